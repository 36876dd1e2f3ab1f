"""Importing the package and listing plugins must not import torch, transformers or spaCy."""

from __future__ import annotations

import subprocess
import sys


def test_import_and_ls_do_not_load_heavy_libraries():
    code = ("import sys, rapt_audit, rapt_audit.api.plugins as p; p.load(); "
            "from rapt_audit.cli import main; main(['ls']); "
            "heavy = [m for m in ('torch', 'transformers', 'spacy', 'peft', 'sklearn') if m in sys.modules]; "
            "assert not heavy, heavy")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "identity" in done.stdout and "random_guess" in done.stdout
