"""The cache by benchmark, setting and kind (issue #65): what ``rapt-audit cache ls`` lists and ``prune`` removes,
what a benchmark run added and may drop (``--drop-finished-services``), and the disk a dry run's cells will need.

The cache's ledger (:mod:`rapt_audit.pipeline.cache_ledger`) says which cell folder stored each entry; a
benchmark folder's index (``benchmark.json``) says which benchmark that cell is of and which setting (the
defense and the values its grid varies; seeds and datasets pooled). An entry no record names is listed as
such, and only an age or a kind selects it. Removal goes through :func:`~rapt_audit.pipeline.cache_ledger.remove`
(inside the cache root only, under its lock).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rapt_audit.api.errors import ResultError, UnknownNameError, UsageError
from rapt_audit.api.registry import unknown_name_message
from rapt_audit.benchmark.plan import BenchCell
from rapt_audit.benchmark.run import read_index
from rapt_audit.benchmark.verify import matches
from rapt_audit.pipeline.cache_ledger import (
    KINDS,
    ONCE_KINDS,
    SERVICE_KINDS,
    CacheInUse,
    Entry,
    Record,
    human_bytes,
    records,
    remove,
    scan,
)
from rapt_audit.pipeline.estimates import duration
from rapt_audit.pipeline.results import RESULT_FILE, RunResult

NO_RECORD = "(no record: stored outside a benchmark's or a worker's cell, or before the ledger)"
_AGE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|min|h|d|w)\s*$")
_UNITS = {"s": 1, "m": 60, "min": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


@dataclass(frozen=True)
class Holding:
    """One cache entry with who stored it: the record (``None``: no record names it), the benchmark and setting
    it is of (labels), and the cell as a ``--cell`` selector reads it (``None`` without a record)."""

    entry: Entry
    record: Record | None
    benchmark: str
    setting: str
    cell: dict[str, Any] | None


def parse_age(text: str) -> float:
    """``30m``, ``12h``, ``7d``, ``2w`` as seconds.

    Raises:
        UsageError: for anything else, saying how to write an age.
    """
    found = _AGE.match(text)
    if not found:
        raise UsageError(f"--older-than {text!r} is not an age; write a number and a unit: 30m, 12h, 7d or 2w")
    return float(found.group(1)) * _UNITS[found.group(2)]


def age_text(seconds: float) -> str:
    """``40 s``, ``5 min``, ``3.0 h``, ``12 d``: how old an entry is (a progress line's :func:`duration`, in days
    from two days on)."""
    return f"{seconds / 86400:.0f} d" if seconds >= 2 * 86400 else duration(seconds)


def _index(folder: Path, memo: dict[Path, dict[str, Any] | None]) -> dict[str, Any] | None:
    if folder not in memo:
        try:
            memo[folder] = read_index(folder)
        except ResultError:  # gone, or not a benchmark's folder (a sweep's): the record's own facts then
            memo[folder] = None
    return memo[folder]


def holdings(root: Path) -> list[Holding]:
    """Every entry of the cache at ``root`` with who stored it (the latest record naming it)."""
    owner: dict[str, tuple[str, Record]] = {}
    for record in records(root):
        for rel, info in record.entries.items():
            if rel not in owner or str(info.get("written_at", "")) >= owner[rel][0]:
                owner[rel] = (str(info.get("written_at", "")), record)
    memo: dict[Path, dict[str, Any] | None] = {}
    found = []
    for entry in scan(root):
        record = owner.get(entry.rel, (None, None))[1]
        if record is None:
            found.append(Holding(entry, None, NO_RECORD, "", None))
            continue
        index = _index(record.folder, memo)
        cell = next((c for c in index["cells"] if c["name"] == record.cell), None) if index else None
        label = f"{index['name']} ({record.folder})" if cell is not None else \
            f"{record.folder} (no benchmark index lists the cell now)"
        if cell is None:  # the record's own facts, as a --cell selector reads a cell
            cell = {"name": record.cell, "defense": str(record.facts.get("defense")), "seed": record.facts.get("seed"),
                    "dataset": str(record.facts.get("dataset")), "setting": {}, "varying": {}}
        varying = ", ".join(f"{k}={v}" for k, v in cell.get("varying", {}).items())
        found.append(Holding(entry, record, label, f"{cell['defense']} {varying}".strip(), cell))
    return found


def listing(found: Sequence[Holding], *, root: Path, now: float | None = None) -> str:
    """``cache ls``: the cache's size, then one row per benchmark, setting and kind (entries, size, ages)."""
    now = time.time() if now is None else now
    total = sum(h.entry.bytes for h in found)
    if not found:
        return f"cache {root}: empty"
    groups: dict[tuple[str, str, str], list[Entry]] = {}
    for h in found:
        groups.setdefault((h.benchmark, h.setting, h.entry.kind), []).append(h.entry)
    rows = [("benchmark", "setting", "kind", "entries", "size", "age")]
    for (bench, setting, kind), entries in sorted(groups.items(), key=lambda g: (g[0][0] == NO_RECORD, g[0])):
        ages = sorted(now - e.mtime for e in entries)
        age = age_text(ages[0]) if len(ages) == 1 or age_text(ages[0]) == age_text(ages[-1]) else \
            f"{age_text(ages[0])} - {age_text(ages[-1])}"
        rows.append((bench, setting or "-", kind + ("" if kind in KINDS else " (kept by prune)"), str(len(entries)),
                     human_bytes(sum(e.bytes for e in entries)), age))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = [f"cache {root}: {human_bytes(total)} in {len(found)} entries"]
    lines += ["  " + "  ".join(v.ljust(w) if i < 3 else v.rjust(w) for i, (v, w) in enumerate(zip(r, widths))).rstrip()
              for r in rows]
    lines.append("prune by benchmark, setting, age or kind: rapt-audit cache prune --benchmark NAME|DIR "
                 "[--setting KEY=VALUE] [--older-than 7d] [--kind KIND] [--dry-run]")
    return "\n".join(lines)


def select(found: Sequence[Holding], *, benchmark: str | None = None, settings: Sequence[str] = (),
           older_than: str | None = None, kind: str | None = None, now: float | None = None) -> list[Holding]:
    """The prunable entries that pass every selector given (at least one), each checked first.

    Raises:
        UsageError: for no selector, an unknown kind or one prune never removes, a bad age or setting selector,
            or a benchmark or setting that no recorded entry is of (naming those there are).
    """
    if benchmark is None and not settings and older_than is None and kind is None:
        raise UsageError("cache prune: say what to remove with --benchmark, --setting, --older-than or --kind "
                         "(rapt-audit cache ls shows what the cache holds)")
    if kind is not None and kind not in KINDS:
        raise UnknownNameError(unknown_name_message("kind", kind, list(KINDS)) + " (prune removes a run's entries "
                               "only: never the assembled models or the bundle's wheels)")
    for selector in settings:
        if "=" not in selector and not any(h.cell and h.cell["name"] == selector for h in found):
            raise UsageError(f"--setting {selector!r} is neither KEY=VALUE (defense=, seed=, dataset= or a setting "
                             "such as p=0.3) nor a cell folder name the cache has entries of")
    age = None if older_than is None else parse_age(older_than)
    now = time.time() if now is None else now
    chosen = [h for h in found if h.entry.kind in KINDS]
    if benchmark is not None:
        chosen = [h for h in chosen if h.record is not None and _is_benchmark(h, benchmark)]
        if not chosen:
            known = sorted({h.benchmark for h in found if h.record is not None})
            raise UsageError(f"--benchmark {benchmark!r}: no cache entry was recorded for it; benchmarks with entries: "
                             f"{'; '.join(known) or 'none'}")
    if settings:
        chosen = [h for h in chosen if h.cell is not None and matches(h.cell, settings)]
        if not chosen:
            known = sorted({h.setting for h in found if h.record is not None})
            raise UsageError(f"--setting {' '.join(settings)} matches no recorded cell's entries; settings with "
                             f"entries: {'; '.join(known) or 'none'}")
    if age is not None:
        chosen = [h for h in chosen if now - h.entry.mtime >= age]
    if kind is not None:
        chosen = [h for h in chosen if h.entry.kind == kind]
    return chosen


def _is_benchmark(h: Holding, given: str) -> bool:
    """Whether the entry was stored by a cell of benchmark ``given``: its name, or its folder."""
    folder = h.record.folder if h.record is not None else None
    return h.benchmark.split(" (", 1)[0] == given or (folder is not None and Path(given).expanduser().resolve()
                                                     == Path(folder).resolve())


def by_kind(sizes: Iterable[tuple[str, float]]) -> str:
    """``services 1.7 GB, attacks 240 MB``: bytes summed by kind, largest first."""
    total: dict[str, float] = {}
    for kind, n in sizes:
        total[kind] = total.get(kind, 0) + n
    return ", ".join(f"{k} {human_bytes(n)}" for k, n in sorted(total.items(), key=lambda kv: -kv[1]))


def added_since(out: Path, since: str, root: Path) -> dict[str, int]:
    """Bytes by kind that the cells of the folder ``out`` stored in the cache at ``since`` (ISO time, UTC) or later."""
    folder = Path(out).resolve()
    added: dict[str, int] = {}
    for record in records(root):
        if Path(record.out).parent != folder:
            continue
        for info in record.entries.values():
            if str(info.get("written_at", "")) >= since:
                added[str(info.get("kind"))] = added.get(str(info.get("kind")), 0) + int(info.get("bytes", 0))
    return added


def drop_finished_services(cells: Sequence[BenchCell], *, out: Path, root: Path,
                           results: Sequence[tuple[Any, RunResult]] = ()) -> str:
    """Remove the service entries (:data:`~rapt_audit.pipeline.cache_ledger.SERVICE_KINDS`) the cells of ``out``
    stored for each setting all of whose cells (``cells``: the file's) have finished; say what it freed. An entry
    a pending cell of the same seed and dataset may still read (identity's service is read by the no-privacy cells
    of other defenses) is kept until that cell has run. ``results``: the finished cells' results, already read
    (others are judged by their result file)."""
    failed = {c.name for c, r in results if r.failed}  # its failed attacks run again, and its service with them
    done = {c.name for c in cells if (Path(str(c.cell.config.out)) / RESULT_FILE).is_file()} - failed
    settings: dict[str, list[BenchCell]] = {}
    for cell in cells:
        settings.setdefault(json.dumps([cell.defense, cell.varying]), []).append(cell)
    closed = {c.name for group in settings.values() if all(c.name in done for c in group) for c in group}
    waiting = {(str(c.seed), c.dataset) for c in cells if c.name not in done}
    folder = Path(out).resolve()
    chosen, kept = [], 0
    for h in holdings(root):
        if h.record is None or h.entry.kind not in SERVICE_KINDS or h.record.folder.resolve() != folder:
            continue
        if h.record.cell in closed:
            if (str(h.record.facts.get("seed")), str(h.record.facts.get("dataset"))) in waiting:
                kept += 1
            else:
                chosen.append(h)
    held = f"; {kept} kept that pending cells of the same seed and dataset may read" if kept else ""
    finished = sum(1 for group in settings.values() if all(c.name in done for c in group))
    try:
        freed, removed = remove([h.entry.rel for h in chosen], root)
    except CacheInUse as exc:
        return (f"--drop-finished-services: nothing dropped: {exc} (the same command, run again, drops them: its "
                "finished cells are reused)")
    return (f"--drop-finished-services: {finished} of {len(settings)} setting(s) finished; dropped {len(removed)} "
            f"service entr{'y' if len(removed) == 1 else 'ies'} of theirs, freeing {human_bytes(freed)}{held}")


def disk_needed(cells: Sequence[BenchCell], *, root: Path) -> str:
    """The dry run's disk line: what the ``cells`` to run will store in the cache, estimated from the recorded
    sizes of comparable cells (of the same profile, service and dataset: the same defense where there are any,
    else any), leaving out what is stored once per cache (:data:`~rapt_audit.pipeline.cache_ledger.ONCE_KINDS`);
    a cell on a dataset no record is of is not counted, and the line says so."""
    recorded = []
    for record in records(root):
        service = record.facts.get("service_model") or record.facts.get("model")
        sizes = [(str(i.get("kind")), int(i.get("bytes", 0))) for i in record.entries.values()
                 if i.get("kind") not in ONCE_KINDS]
        recorded.append(((record.facts.get("defense"), record.facts.get("dataset"), record.facts.get("profile"),
                          service), sizes))
    if not cells:
        return f"disk: no cell to run, so nothing more in the cache {root}"
    total: list[tuple[str, float]] = []
    used = {"the same defense and dataset": 0, "other defenses on the same dataset": 0}
    missing: dict[str, int] = {}
    for cell in cells:
        config = cell.cell.config
        key = (cell.defense, cell.dataset, config.profile, config.service_model or config.model)
        for what, like in (("the same defense and dataset", [s for k, s in recorded if k == key]),
                           ("other defenses on the same dataset", [s for k, s in recorded if k[1:] == key[1:]])):
            if like:
                used[what] += 1
                total += [(kind, n / len(like)) for sizes in like for kind, n in sizes]
                break
        else:
            missing[cell.dataset] = missing.get(cell.dataset, 0) + 1
    if not any(used.values()):
        return (f"disk: unknown: the cache {root} records no comparable cell yet (the ledger starts with this "
                "version; run one cell of each dataset first with --cell, then its size is known; rapt-audit cache ls "
                "shows the cache)")
    basis = ", ".join(f"{n} from cells of {what}" for what, n in used.items() if n)
    unknown = (f"; not counted: {sum(missing.values())} cell(s) on {', '.join(missing)}, whose cells the cache has no "
               "record of yet" if missing else "")
    return (f"disk: about {human_bytes(sum(n for _, n in total))} more in the cache {root} for {sum(used.values())} "
            f"cell(s), an estimate from the recorded sizes of comparable cached cells ({basis}): "
            f"{by_kind(total)}; what is cached already is not stored again{unknown}")


__all__ = ["Holding", "NO_RECORD", "added_since", "age_text", "by_kind", "disk_needed", "drop_finished_services",
           "holdings", "listing", "parse_age", "select"]
