"""The ``code:`` part of a result's signature: rapt-audit's own code, wherever a command runs from."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import rapt_audit
from rapt_audit.api.files import _source_digest, package_code_digest
from rapt_audit.pipeline.results import git_sha


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


def test_the_code_digest_is_the_same_in_a_bundles_installed_layout(tmp_path):
    """A bundle (like a wheel) installs defenses/, attacks/ and benchmarks/ inside rapt_audit/; its results
    once carried another ``code:`` than the checkout they were packed from (the core's walk hashed the
    defenses a second time, and the shipped benchmarks' package), so one code read as two."""
    from rapt_audit.bundle.pieces import package_members

    for member in package_members([]):
        path = tmp_path / member.name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(member.data)
    assert (tmp_path / "rapt_audit" / "benchmarks" / "sst2-paper.toml").is_file()  # `benchmark run NAME` there
    code = ("import rapt_audit; from rapt_audit.api.files import package_code_digest; "
            "from rapt_audit.pipeline.results import git_sha; "
            "print(rapt_audit.__file__); print(package_code_digest()); print(git_sha())")
    where, installed, sha = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                                           text=True, check=True).stdout.split()
    assert Path(where).resolve().parent == (tmp_path / "rapt_audit").resolve()
    assert installed == package_code_digest()
    assert sha == str(git_sha())  # a result made there names the commit the bundle was packed from
