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

from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any, Iterator, Sequence

from rapt_audit.api.errors import ResultError
from rapt_audit.api.files import json_text, write_json_atomic
from rapt_audit.api.locks import LOCK_FILE, hold_out_dir
from rapt_audit.api.parsing import read_document
from rapt_audit.pipeline.results import read_result
from rapt_audit.reporting.collect import collect

__all__ = ["slim_document", "slim_files"]


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
    through the schema, while holding its folder's lock. With ``dry_run`` nothing is written and
    ``after`` is what would be written.

    Raises:
        ResultError: when ``paths`` hold no readable result (naming each problem), or when a running
            run, sweep or benchmark holds a folder of them (before any file is rewritten).
    """
    coll = collect(paths, calibrations=False)
    coll.require_results("slim")
    coll.warn_problems()  # files of another schema or corrupt ones are left as they are, and named
    sizes = []
    with ExitStack() as stack:
        if not dry_run:
            _hold_folders([loaded.path for loaded in coll.results], stack)
        for loaded in coll.results:
            sizes.append(_slim_one(loaded.path, dry_run=dry_run))
    return sizes


def _hold_folders(files: Sequence[Path], stack: ExitStack) -> None:
    """Refuse, before any write, folders a running process holds: a benchmark or sweep holds its folder for
    the whole run (held here until slim ends), a cell its own (tried here, then held while its file is
    rewritten). A folder without a lock file is no sweep's or benchmark's that is running."""
    parents = sorted({file.parent for file in files})
    roots = sorted({folder for parent in parents for folder in parent.parents if (folder / LOCK_FILE).exists()})
    for folder in roots:
        stack.enter_context(_holding(folder))
    for folder in parents:
        with _holding(folder):
            pass


@contextmanager
def _holding(folder: Path) -> Iterator[None]:
    """The lock of ``folder`` (:func:`~rapt_audit.api.locks.hold_out_dir`); its refusal names the holder."""
    with ExitStack() as stack:
        try:
            stack.enter_context(hold_out_dir(folder))
        except ResultError as exc:  # only the taking is refused in slim's words, not what the block raises
            raise ResultError(f"slim: {exc}") from None
        yield


def _slim_one(path: Path, *, dry_run: bool) -> tuple[Path, int, int]:
    """Slim one result file (under its folder's lock); ``(file, bytes before, bytes after)``."""
    with ExitStack() as stack:
        if not dry_run:
            stack.enter_context(_holding(path.parent))
        before = path.stat().st_size
        document = read_document(path, source=str(path), fmt="json")[1]  # read once already, by collect
        removed = slim_document(document)
        if removed and not dry_run:
            write_json_atomic(path, document)
            read_result(path)  # the slimmed file still follows the schema
        # A file with nothing to remove is not rewritten, so its size stays, in a dry run too.
        after = len(json_text(document).encode("utf-8")) + 1 if removed and dry_run else path.stat().st_size
    return path, before, after
