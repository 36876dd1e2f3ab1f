"""What the cache holds and which cell wrote it: the cache's ledger (issue #65).

Every cache entry is stored through one writer (:func:`rapt_audit.api.files.write_cache_atomic`), which tells
its observers (``CACHE_WRITE_HOOKS``) each path it stored. While a sweep's cell runs (a benchmark's, in this
process, or any cell in an executor's worker: :func:`recording`) the entries it stores are collected, and when
it ends they are added to its *record*: ``<cache>/ledger/<hash of the cell folder>.json``, naming the cell's
folder, its defense, dataset, seed and service, and each entry's path, kind (its top folder under the cache:
:data:`KINDS`), size and time. So the cache can say what it holds by benchmark, setting and kind
(``rapt-audit cache ls``), what a run added, and what a comparable cell will need; an entry no record names was
written by a run outside a sweep's cells, or before the ledger.

Entries are removed only through :func:`remove`, which never touches anything outside the cache root (a path
is resolved and checked to lie in a prunable kind's folder, never a link, a lock or a write in progress, whose
names start with a dot) and honours the cache's lock: every recorded cell holds ``<cache>/.in-use.lock``
shared while it runs, and :func:`remove` takes it exclusively or refuses (:class:`CacheInUse`), so no entry a
running cell may read is deleted under it. Where ``fcntl`` is missing (Windows) there is no such lock.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from rapt_audit.api.errors import ResultError
from rapt_audit.api.files import CACHE_WRITE_HOOKS, default_cache_dir, write_cache_atomic

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no lock, as the module docstring says
    fcntl = None  # type: ignore[assignment]

LEDGER = "ledger"
SCHEMA = "rapt-audit/cache-ledger/1"
IN_USE = ".in-use.lock"
#: The kinds of entries that are a run's work (the cache's top folders), each with what it holds: what prune
#: may remove.
KINDS = {"services": "the service's customized weights", "pretrained": "the service's encoder after "
         "privacy-adaptive pretraining", "attacks": "trained attack models", "defenses": "defenses' trained parts "
         "(SnD's denoiser)", "releases": "defenses' releases", "texts": "privatized texts", "analyses": "spaCy's "
         "analyses of clean texts", "pos": "POS lexicon vectors", "embeddings": "embedding tables", "pooled":
         "pooled sentence vectors", "calibration": "calibrated privacy parameters", "fingerprints": "model weights' "
         "fingerprints"}
#: What a setting's service is made of: the kinds ``benchmark run --drop-finished-services`` removes.
SERVICE_KINDS = ("services", "pretrained")
#: Kinds keyed by the model or the public corpus alone: stored once per cache, by whichever cell comes first.
ONCE_KINDS = ("embeddings", "fingerprints", "pos")


class CacheInUse(ResultError):
    """A rapt-audit cell is running on the cache, so nothing is removed from it now."""


@dataclass(frozen=True)
class Entry:
    """One file of the cache: its path below the root (``services/ab12….pt``), kind, size and modification time."""

    rel: str
    kind: str
    bytes: int
    mtime: float


@dataclass(frozen=True)
class Record:
    """What one cell stored in the cache (one ledger file): the cell's folder and facts, and its entries (path
    below the root → ``{"kind", "bytes", "written_at"}``)."""

    out: str
    facts: Mapping[str, Any]
    entries: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    @property
    def folder(self) -> Path:
        """The folder holding the cell's folder (a benchmark's or sweep's output)."""
        return Path(self.out).parent

    @property
    def cell(self) -> str:
        """The cell's folder name."""
        return Path(self.out).name


def human_bytes(n: float) -> str:
    """``1.7 GB``, ``240 MB``, ``12 kB``, ``512 B`` (powers of 1,000)."""
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:.1f} {unit}" if n < 10 * size else f"{n / size:.0f} {unit}"
    return f"{n:.0f} B"


def kind_of(rel: str) -> str:
    """An entry's kind: its top folder below the cache root."""
    return rel.split("/", 1)[0] if "/" in rel else ""


def _record_path(root: Path, out: Path) -> Path:
    return root / LEDGER / f"{hashlib.sha256(str(out).encode('utf-8')).hexdigest()[:24]}.json"


_lock = threading.Lock()  # the hooks list is shared by the threads of a process


@contextmanager
def in_use(root: Path | None = None) -> Iterator[None]:
    """Hold the cache's lock shared for the ``with`` block: :func:`remove` refuses while any holder runs."""
    root = Path(root or default_cache_dir())
    handle = None
    try:
        root.mkdir(parents=True, exist_ok=True)
        handle = open(root / IN_USE, "a+b")  # noqa: SIM115 - held open for the block
        if fcntl is not None:
            fcntl.flock(handle, fcntl.LOCK_SH)
    except OSError:  # a read-only cache: nothing can be removed from it either
        handle = None
    try:
        yield
    finally:
        if handle is not None:
            handle.close()  # releases the lock


@contextmanager
def recording(config: Any, root: Path | None = None) -> Iterator[dict[str, int]]:
    """Collect the cache entries this process stores while the cell of ``config`` runs, and add them to the cell's
    record when it ends (even when it fails: what it stored is in the cache). Yields the collection
    (path below the root → bytes). The cell holds the cache's lock shared meanwhile (:func:`in_use`)."""
    root = Path(root or default_cache_dir()).expanduser().resolve()
    written: dict[str, int] = {}

    def note(path: Path) -> None:
        try:
            rel = Path(path).resolve().relative_to(root).as_posix()
            written[rel] = Path(path).stat().st_size
        except (OSError, ValueError):  # outside the root (a model assembled elsewhere), or gone meanwhile
            pass

    with in_use(root):
        with _lock:
            CACHE_WRITE_HOOKS.append(note)
        try:
            yield written
        finally:
            with _lock:
                CACHE_WRITE_HOOKS.remove(note)
            if written and config.out is not None:
                add_to_record(root, config, written)


def add_to_record(root: Path, config: Any, written: Mapping[str, int]) -> None:
    """Add ``written`` (path below ``root`` → bytes) to the record of the cell of ``config`` (its folder's)."""
    out = Path(str(config.out)).expanduser().resolve()
    path = _record_path(root, out)
    old = read_record(path)
    now = datetime.now(timezone.utc).isoformat(timespec="microseconds")  # compared with a run's start
    entries = dict(old.entries) if old is not None else {}
    entries.update({rel: {"kind": kind_of(rel), "bytes": int(n), "written_at": now} for rel, n in written.items()})
    facts = {"cell_id": config.cell_id(), "defense": config.defense, "dataset": config.dataset, "seed": config.seed,
             "profile": config.profile, "model": config.model, "service_model": config.service_model}
    document = {"schema": SCHEMA, "out": str(out), **facts, "entries": entries}
    write_cache_atomic(path, lambda handle: handle.write(json.dumps(document, indent=1).encode("utf-8")))


def read_record(path: Path) -> Record | None:
    """One ledger file, or ``None`` when it is missing, unreadable or of another schema."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA or not isinstance(doc.get("entries"), dict) \
            or not isinstance(doc.get("out"), str):
        return None
    facts = {k: v for k, v in doc.items() if k not in ("schema", "out", "entries")}
    return Record(doc["out"], facts, {k: v for k, v in doc["entries"].items() if isinstance(v, dict)})


def records(root: Path | None = None) -> list[Record]:
    """Every readable record of the cache's ledger."""
    folder = Path(root or default_cache_dir()) / LEDGER
    found = (read_record(p) for p in sorted(folder.glob("*.json"))) if folder.is_dir() else ()
    return [r for r in found if r is not None]


def scan(root: Path | None = None) -> list[Entry]:
    """Every file of the cache but its ledger, locks and writes in progress (dot files), links not followed."""
    root = Path(root or default_cache_dir())
    entries = []
    if not root.is_dir():
        return entries
    for top in sorted(p for p in root.iterdir() if p.is_dir() and not p.is_symlink() and p.name != LEDGER
                      and not p.name.startswith(".")):
        for folder, dirs, files in os.walk(top):
            dirs[:] = [d for d in dirs if not d.startswith(".")]
            for name in files:
                path = Path(folder) / name
                if name.startswith("."):
                    continue
                try:
                    info = path.lstat()
                except OSError:
                    continue
                if path.is_symlink() or not path.is_file():
                    continue
                rel = path.relative_to(root).as_posix()
                entries.append(Entry(rel, kind_of(rel), info.st_size, info.st_mtime))
    return entries


def _inside(root: Path, rel: str) -> Path | None:
    """The path of entry ``rel`` when it is a prunable kind's regular file inside ``root``, else ``None``."""
    parts = rel.split("/")
    if len(parts) < 2 or parts[0] not in KINDS or any(p in ("", ".", "..") or p.startswith(".") for p in parts):
        return None
    path = root / Path(*parts)
    try:
        if path.is_symlink() or not path.is_file():
            return None
        path.resolve().relative_to(root.resolve())
        return path
    except (OSError, ValueError):
        return None


def remove(rels: Sequence[str], root: Path | None = None) -> tuple[int, list[str]]:
    """Remove the entries ``rels`` (paths below the cache root) and drop them from every record; return the bytes
    freed and the entries removed. An entry that is not a prunable kind's regular file inside the root is left.

    Raises:
        CacheInUse: when a recorded cell is running on the cache (its lock is held): nothing is removed.
    """
    root = Path(root or default_cache_dir())
    if not root.is_dir():
        return 0, []
    with open(root / IN_USE, "a+b") as handle:
        if fcntl is not None:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise CacheInUse(f"a rapt-audit run is using the cache {root} now (it holds {root / IN_USE}), and "
                                 "an entry it reads must not go under it: nothing was removed; run this again when "
                                 "it has finished") from None
        freed, removed = 0, []
        for rel in dict.fromkeys(rels):
            path = _inside(root, rel)
            if path is None:
                continue
            size = path.stat().st_size
            path.unlink()
            freed, removed = freed + size, removed + [rel]
        _forget(root, set(removed))
    return freed, removed


def _forget(root: Path, removed: set[str]) -> None:
    """Drop ``removed`` entries from the records that list them (a record left empty goes too)."""
    if not removed:
        return
    for path in sorted((root / LEDGER).glob("*.json")):
        record = read_record(path)
        if record is None or not removed & set(record.entries):
            continue
        entries = {k: v for k, v in record.entries.items() if k not in removed}
        if not entries:
            path.unlink(missing_ok=True)
            continue
        document = {"schema": SCHEMA, "out": record.out, **record.facts, "entries": entries}
        write_cache_atomic(path, lambda handle, d=document: handle.write(json.dumps(d, indent=1).encode("utf-8")))


__all__ = ["CacheInUse", "Entry", "IN_USE", "KINDS", "LEDGER", "ONCE_KINDS", "Record", "SERVICE_KINDS", "add_to_record",
           "human_bytes", "in_use", "kind_of", "read_record", "recording", "records", "remove", "scan"]
