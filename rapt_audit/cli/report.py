"""``rapt-audit report``: the HTML report's arguments; the report is :mod:`rapt_audit.reporting.report`."""

from __future__ import annotations

import argparse
import sys

from rapt_audit.reporting.report import write_report


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register the ``report`` sub-command."""
    p = sub.add_parser("report", help="self-contained HTML report (Pareto plots, tables, provenance) of stored runs")
    p.add_argument("runs", nargs="+", metavar="RUN_DIR", help="run or sweep directories, result or calibration files")
    p.add_argument("--out", default="report.html", help="HTML file to write (default report.html)")
    p.add_argument("--figures", default=None, metavar="DIR",
                   help="where PNG and SVG copies of the figures go (default: next to the report)")
    p.add_argument("--title", default="rapt-audit report")
    p.add_argument("--strict", action="store_true", help="write nothing when any input is unusable")


def cmd_report(args: argparse.Namespace) -> int:
    """Entry of ``rapt-audit report``: exit 0 when written (unusable inputs are listed), 2 when nothing usable."""
    out, coll = write_report(args.runs, out=args.out, title=args.title, figures_dir=args.figures, strict=args.strict)
    coll.warn_problems()
    schema = coll.schema_summary()
    if schema:
        print(f"rapt-audit: warning: {schema}", file=sys.stderr)
    print(f"wrote {out} ({len(coll.results)} result(s), {len(coll.problems)} input(s) left out)")
    return 0


__all__ = ["add_parser", "cmd_report"]
