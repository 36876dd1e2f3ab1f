"""``rapt-audit cache ls|prune``: what the cache (``$RAPT_AUDIT_CACHE``) holds, by benchmark, setting and kind, and
removing what is no longer needed (issue #65; the grouping and selection: :mod:`rapt_audit.benchmark.holdings`,
the ledger and the removal under the cache's lock: :mod:`rapt_audit.pipeline.cache_ledger`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from rapt_audit.api.files import default_cache_dir
from rapt_audit.benchmark.holdings import by_kind, holdings, listing, select
from rapt_audit.pipeline.cache_ledger import human_bytes, remove

EPILOG = """examples:
  rapt-audit cache ls
  rapt-audit cache prune --benchmark runs/word-drop-bench --kind services --dry-run
  rapt-audit cache prune --benchmark sst2-cpu --setting defense=word_drop --setting p=0.3
  rapt-audit cache prune --older-than 14d
Every entry a benchmark's cell (or a worker's cell) stores is recorded in the cache's ledger with the cell that
stored it, so the cache lists and prunes by benchmark (its name or folder), setting (KEY=VALUE as benchmark run's
--cell: defense=, seed=, dataset= or a setting such as p=0.3), age and kind. An entry no record names (stored by a
plain run, or before the ledger) is selected only by --older-than or --kind. Prune never touches anything outside
the cache folder, never the assembled models or the bundle's wheels, and refuses while a cell runs on the cache."""


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register the ``cache`` sub-command and its ``ls`` and ``prune`` actions."""
    p = sub.add_parser("cache", help="list what the cache holds (by benchmark, setting and kind) and prune it",
                       epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    actions = p.add_subparsers(dest="cache_command", required=True, metavar="{ls,prune}")
    ls = actions.add_parser("ls", help="the cache's entries by benchmark, setting and kind, with sizes and ages")
    ls.add_argument("--benchmark", default=None, metavar="NAME|DIR", help="only the entries of this benchmark")
    prune = actions.add_parser("prune", help="remove the entries that match every selector given")
    prune.add_argument("--benchmark", default=None, metavar="NAME|DIR",
                       help="entries stored by the cells of this benchmark (its name or its --out folder)")
    prune.add_argument("--setting", dest="settings", action="append", default=[], metavar="KEY=VALUE",
                       help="entries stored by the cells that match (defense=, seed=, dataset= or a setting such as "
                            "p=0.3, or a cell folder name); repeat to require several")
    prune.add_argument("--older-than", dest="older_than", default=None, metavar="AGE",
                       help="entries not written for AGE: 30m, 12h, 7d or 2w")
    prune.add_argument("--kind", default=None, metavar="KIND",
                       help="entries of this kind only (services, attacks, releases, texts, ...: cache ls lists them)")
    prune.add_argument("--dry-run", dest="dry_run", action="store_true", help="list what would go; remove nothing")


def cmd_cache(args: argparse.Namespace) -> int:
    """Run ``cache ls`` or ``cache prune``."""
    root = default_cache_dir()
    found = holdings(root)
    if args.cache_command == "ls":
        shown = select(found, benchmark=args.benchmark) if args.benchmark else found
        print(listing(shown, root=root))
        return 0
    chosen = select(found, benchmark=args.benchmark, settings=args.settings, older_than=args.older_than,
                    kind=args.kind)
    size = sum(h.entry.bytes for h in chosen)
    kinds = by_kind((h.entry.kind, h.entry.bytes) for h in chosen)
    if args.dry_run:
        for h in chosen:
            print(f"  would remove {Path(root) / h.entry.rel}  {human_bytes(h.entry.bytes)}  ({h.benchmark}; "
                  f"{h.setting or 'no setting'})")
        print(f"dry run: {len(chosen)} entries, {human_bytes(size)}{f' ({kinds})' if kinds else ''} would be removed "
              f"from {root}; nothing was removed (drop --dry-run to remove them)")
        return 0
    freed, removed = remove([h.entry.rel for h in chosen], root)
    print(f"removed {len(removed)} of {len(chosen)} selected entries from {root}, freeing {human_bytes(freed)}"
          f"{f' ({kinds})' if kinds else ''}" + (f"; {len(chosen) - len(removed)} were gone or not removable"
                                                  if len(removed) < len(chosen) else ""))
    return 0


__all__ = ["add_parser", "cmd_cache"]
