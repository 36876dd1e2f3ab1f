"""The ``code:`` part of a result's signature: rapt-audit's own code, wherever a command runs from."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import rapt_audit
from rapt_audit.api.files import _source_digest, package_code_digest


def test_the_code_digest_covers_the_builtin_plugins_wherever_the_command_runs(tmp_path):
    """defenses/ and attacks/ install as rapt_audit.defenses and rapt_audit.attacks; looked up as top-level
    packages they were found only from the repository's root, so a console script's digest (and every
    result's ``code:``) covered the core alone and missed a change to a built-in defense or attack."""
    here = package_code_digest()
    code = "from rapt_audit.api.files import package_code_digest; print(package_code_digest())"
    elsewhere = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True,
                               check=True).stdout.strip()
    assert elsewhere == here
    core_only = _source_digest(((str(Path(rapt_audit.__file__).resolve().parent), True),))
    assert here != core_only
