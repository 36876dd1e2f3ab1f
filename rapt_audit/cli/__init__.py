"""The ``rapt-audit`` command line: argument parsing only; every command calls the library.

Owns: :mod:`~rapt_audit.cli.main` (the parser, ``run`` and ``ls``) and one module per command
that is not a report (:mod:`~rapt_audit.cli.calibrate`); the report commands live with the
reporting layer. May import every layer; nothing imports it.
"""

from __future__ import annotations

from rapt_audit.cli.main import main

__all__ = ["main"]
