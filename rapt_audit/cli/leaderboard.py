"""``rapt-audit leaderboard``: the Markdown leaderboard's arguments; the leaderboard is
:mod:`rapt_audit.reporting.leaderboard`."""

from __future__ import annotations

import argparse
from pathlib import Path

from rapt_audit.api.errors import UsageError
from rapt_audit.reporting.leaderboard import write_leaderboard


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register the ``leaderboard`` sub-command."""
    p = sub.add_parser("leaderboard", help="Markdown leaderboard of stored results, one table per signature")
    p.add_argument("runs", nargs="+", metavar="RUN_DIR", help="run or sweep directories (or result files)")
    p.add_argument("-o", "--out", default="leaderboard.md", help="Markdown file to write (default leaderboard.md)")
    p.add_argument("--report", default=None, help="HTML report of the same runs, for the row links")
    p.add_argument("--title", default="rapt-audit leaderboard")
    p.add_argument("--preamble", default=None, metavar="FILE", help="Markdown file placed under the heading")


def cmd_leaderboard(args: argparse.Namespace) -> int:
    """Entry of ``rapt-audit leaderboard``."""
    preamble = ""
    if args.preamble:
        try:
            preamble = Path(args.preamble).read_text(encoding="utf-8")
        except OSError as exc:
            raise UsageError(f"--preamble {args.preamble} cannot be read: {exc.strerror or exc}") from None
    out, coll = write_leaderboard(args.runs, out=args.out, report=args.report, title=args.title, preamble=preamble,
                                  preamble_file=args.preamble)
    coll.warn_problems()
    print(f"wrote {out} ({len(coll.results)} result(s))")
    return 0


__all__ = ["add_parser", "cmd_leaderboard"]
