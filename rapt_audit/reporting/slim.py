"""``rapt-audit slim``: result files without their per-record parts, small enough to commit a reference grid.

A result keeps each attack's headline and the task accuracy per test record (``per_record``: a
numerator and denominator per record), so that the regression gate and ``rapt-audit claims`` can
compare two single runs record by record. At the ``paper`` profile that is about 0.9 MB a cell
(17,055 test records, seven token-level attacks; measured on a synthetic document of that shape),
which a repository of reference results, or an upload of limited size, cannot carry for a grid of
dozens of cells. A slimmed file keeps every value, interval and setting; it loses only pairing:
comparisons with it are made from the two intervals, as for several seeds combined, and the gate
compares it unpaired. Each slimmed file says so in ``env.per_record_removed``, and slimming a file
twice changes nothing.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, Sequence

from rapt_audit.api.files import json_text, write_json_atomic
from rapt_audit.pipeline.results import read_result
from rapt_audit.reporting.collect import collect

__all__ = ["add_parser", "cmd_slim", "slim_document", "slim_files"]


def slim_document(document: dict[str, Any]) -> int:
    """Remove every ``per_record`` part of a result document in place; returns how many were removed."""
    removed = 0

    def walk(value: Any) -> None:
        nonlocal removed
        if isinstance(value, dict):
            if value.pop("per_record", None) is not None:
                removed += 1
            for item in value.values():
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)

    walk(document.get("utility"))
    walk(document.get("attacks"))
    if removed:
        env = document.setdefault("env", {})
        env["per_record_removed"] = env.get("per_record_removed", 0) + removed
    return removed


def slim_files(paths: Sequence[str | Path], *, dry_run: bool = False) -> list[tuple[Path, int, int]]:
    """Slim every result file below ``paths``; returns ``(file, bytes before, bytes after)`` for each.

    Files are found and validated as ``report`` finds them; each is rewritten atomically and read back
    through the schema. With ``dry_run`` nothing is written and ``after`` is what would be written.

    Raises:
        ResultError: when ``paths`` hold no readable result (naming each problem).
    """
    coll = collect(paths, calibrations=False)
    coll.require_results("slim")
    coll.warn_problems()  # files of another schema or corrupt ones are left as they are, and named
    sizes = []
    for loaded in coll.results:
        before = loaded.path.stat().st_size
        document = json.loads(loaded.path.read_text(encoding="utf-8"))
        removed = slim_document(document)
        if removed and not dry_run:
            write_json_atomic(loaded.path, document)
            read_result(loaded.path)  # the slimmed file still follows the schema
        # A file with nothing to remove is not rewritten, so its size stays, in a dry run too.
        after = len(json_text(document).encode("utf-8")) + 1 if removed and dry_run else loaded.path.stat().st_size
        sizes.append((loaded.path, before, after))
    return sizes


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
