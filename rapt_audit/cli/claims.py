"""``rapt-audit claims``: the seed papers' claims judged on stored results (:mod:`rapt_audit.reporting.claims`).

A benchmark folder is read as its own report reads it (:mod:`rapt_audit.benchmark.claims`): ``rapt-audit claims
FOLDER`` prints its ``claims.md``.
"""

from __future__ import annotations

import argparse
import sys

from rapt_audit.benchmark.claims import claims_input, claims_markdown
from rapt_audit.reporting.claims import format_json, format_markdown, judge


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register the ``claims`` sub-command."""
    p = sub.add_parser("claims", help="whether the papers' claims hold in stored results, with the numbers (a "
                                      "benchmark folder: its claims.md)")
    p.add_argument("runs", nargs="+", metavar="RUN_DIR",
                   help="run, sweep or benchmark directories (or result files)")
    p.add_argument("--format", choices=["md", "json"], default="md", help="Markdown (default) or JSON")


def cmd_claims(args: argparse.Namespace) -> int:
    """Entry of ``rapt-audit claims``."""
    coll, benchmark, notes = claims_input(args.runs)
    coll.require_results("claims")
    coll.warn_problems()
    for note in notes:
        print(f"rapt-audit: warning: {note}", file=sys.stderr)
    if args.format == "md" and benchmark is not None:
        print(claims_markdown(benchmark), end="")  # what the benchmark's report writes to FOLDER/claims.md
        return 0
    verdicts = judge(coll.results)
    print(format_json(verdicts) if args.format == "json" else format_markdown(verdicts), end="")
    return 0


__all__ = ["add_parser", "cmd_claims"]
