"""The ``rapt-audit`` command line: argument parsing only; every command calls the library.

Owns: :mod:`~rapt_audit.cli.main` (the parser, ``run`` and ``ls``) and one module per other command
(:mod:`~rapt_audit.cli.calibrate`, :mod:`~rapt_audit.cli.report`, :mod:`~rapt_audit.cli.check`, ...): every
``add_parser`` and ``cmd_*`` is here, and the layers below parse no arguments. May import every layer; nothing
imports it.
"""

from __future__ import annotations

from rapt_audit.cli.main import main

__all__ = ["main"]
