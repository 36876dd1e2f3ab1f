"""``rapt-audit slim``: its arguments and the lines it prints; the slimming is :mod:`rapt_audit.reporting.slim`."""

from __future__ import annotations

import argparse

from rapt_audit.reporting.slim import slim_files


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register the ``slim`` sub-command."""
    p = sub.add_parser("slim", help="remove per-record parts from result files (every comparison with them becomes "
                                    "unpaired: never slim a benchmark folder you commit or publish)")
    p.add_argument("runs", nargs="+", metavar="RUN_DIR", help="run or sweep directories (or result files)")
    p.add_argument("--dry-run", dest="dry_run", action="store_true", help="say what would be saved; write nothing")


def cmd_slim(args: argparse.Namespace) -> int:
    """Entry of ``rapt-audit slim``: one line per file, then the total."""
    sizes = slim_files(args.runs, dry_run=args.dry_run)
    for path, before, after in sizes:
        print(f"{before / 1e3:10.1f} kB → {after / 1e3:8.1f} kB  {path}")
    before, after = sum(s[1] for s in sizes), sum(s[2] for s in sizes)
    verb = "would shrink" if args.dry_run else "shrank"
    print(f"{verb} {len(sizes)} result file(s) from {before / 1e6:.2f} MB to {after / 1e6:.2f} MB")
    return 0


__all__ = ["add_parser", "cmd_slim"]
