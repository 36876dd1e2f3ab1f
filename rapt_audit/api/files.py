"""File helpers of the core: the atomic writers (:mod:`rapt_audit.api.atomic`, re-exported here), JSON and
gzip'd cache entries, stable hashes, and the digests of the code that can change a number.

Every file rapt-audit writes for later reading goes through :func:`write_atomic` or :class:`AtomicWrites`; a
cache entry that cannot be written is a warning, never an error (:func:`write_cache_atomic`).
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import importlib.util
import json
import os
import re
import secrets
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO, Any

from rapt_audit.api.atomic import AtomicWrites, DiskFullError, UnwritableError, remove_stray_temps, write_atomic
from rapt_audit.api.errors import UsageError


def write_bytes_atomic(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (see :func:`write_atomic`)."""
    write_atomic(path, lambda handle: handle.write(data))


def write_text_atomic(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` as UTF-8 to ``path`` atomically (see :func:`write_atomic`)."""
    write_bytes_atomic(path, text.encode("utf-8"))


def write_json_atomic(path: str | os.PathLike[str], document: Mapping[str, Any]) -> None:
    """Write ``document`` as indented JSON to ``path`` atomically (NaN and infinity are refused).

    Lists of numbers stay on one line (:func:`json_text`): a result's per-record parts hold one number
    per test record, which indented take a line each (about 10 bytes; at paper scale, megabytes per cell).
    """
    write_text_atomic(path, json_text(document) + "\n")


def stable_hash(value: Any) -> str:
    """sha256 of ``value`` as canonical JSON (sorted keys; what JSON cannot hold, as its text): cache keys."""
    text = json.dumps(value, sort_keys=True, ensure_ascii=True, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def json_text(document: Any) -> str:
    """Indented JSON of ``document`` with every non-empty list of numbers written on one line."""
    rows: list[str] = []
    mark = secrets.token_hex(8)  # placeholders no string of the document holds (2**-64 to collide)

    def fold(value: Any) -> Any:  # a list of numbers → a placeholder string, its one-line JSON kept aside
        if isinstance(value, Mapping):
            return {key: fold(item) for key, item in value.items()}
        if isinstance(value, (list, tuple)):
            if value and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value):
                rows.append(json.dumps(list(value), separators=(", ", ": "), allow_nan=False))
                return f"{mark}:{len(rows) - 1}"
            return [fold(item) for item in value]
        return value

    text = json.dumps(fold(document), indent=2, sort_keys=False, allow_nan=False)
    return re.sub(f'"{mark}:(\\d+)"', lambda m: rows[int(m.group(1))], text)


_warned_unwritable = False  # the cache's one warning per process
#: Called with the path of each cache entry once it is stored (the cache's ledger records what a cell adds).
CACHE_WRITE_HOOKS: list[Callable[[Path], None]] = []


def write_cache_atomic(path: str | os.PathLike[str], write: Callable[[IO[bytes]], Any]) -> bool:
    """:func:`write_atomic` for a cache entry, which may fail: returns whether it was stored.

    A cache folder that cannot be written (read-only, full, no permission) is not an error: the
    caller keeps what it computed in memory and goes on. The first failure of a process says so in
    one warning that names the folder and how to choose another; later failures are silent.
    """
    global _warned_unwritable
    try:
        write_atomic(path, write)
        for hook in list(CACHE_WRITE_HOOKS):
            hook(Path(path))
        return True
    except (OSError, UsageError) as exc:  # UsageError: the output rule refused the path (below a file, a device)
        if not _warned_unwritable:
            _warned_unwritable = True
            reason = getattr(exc, "strerror", None) or exc
            warnings.warn(f"the cache folder {Path(path).parent} cannot be written ({reason}); "
                          "working from memory, so the next start will be slower. Set RAPT_AUDIT_CACHE to a "
                          "writable folder to keep the cache", stacklevel=2)
        return False


def write_cache_json_gz(path: str | os.PathLike[str], document: Any) -> bool:
    """Store ``document`` as gzip'd compact JSON with :func:`write_cache_atomic` (ASCII escapes keep
    any string, lone surrogates included); returns whether it was stored."""
    payload = json.dumps(document, separators=(",", ":")).encode("ascii")
    return write_cache_atomic(path, lambda handle: handle.write(gzip.compress(payload, compresslevel=1)))


def read_cache_json_gz(path: str | os.PathLike[str]) -> Any | None:
    """The document of a :func:`write_cache_json_gz` entry, or None when it is missing, truncated, not
    gzip or not JSON (the caller checks its shape and rebuilds what it cannot use)."""
    try:
        return json.loads(gzip.decompress(Path(path).read_bytes()))
    except (OSError, EOFError, ValueError):
        return None


#: Parts of the core whose code cannot change a release or a calibration: a report, CLI, attack,
#: benchmark or plugin-kit edit keeps the release cache.
_NOT_RELEASE_CODE = frozenset({"reporting", "cli", "attacks", "benchmark", "plugin_kit", "plugin.py"})
#: The packages a checkout keeps beside the core and an installation (a wheel, a bundle) inside it: never
#: hashed as part of the core, so that one code hashes alike in both layouts (the built-in defenses and
#: attacks are hashed under their own folder's name by the callers that need them).
_BESIDE_THE_CORE = frozenset({"defenses", "attacks", "benchmarks"})


@functools.lru_cache(maxsize=16)
def _source_digest(folders: tuple[tuple[str, bool], ...]) -> str:
    digest = hashlib.sha256()
    for folder, recursive in folders:
        root = Path(folder)
        for path in sorted(root.rglob("*.py") if recursive else root.glob("*.py")):
            relative = path.relative_to(root)
            if recursive and relative.parts[0] in _NOT_RELEASE_CODE | _BESIDE_THE_CORE:
                continue
            digest.update(f"{root.name}/{relative.as_posix()}\n".encode("utf-8") + path.read_bytes())
    return digest.hexdigest()


def package_code_digest() -> str:
    """A hash of rapt-audit's own code that can change a number: the core (less reporting, CLI, benchmark
    planning), the built-in defenses and the built-in attacks.

    A result's signature names it (``code:``). It is the same for every defense and attack of one
    installation, so a plugin defense's rows sit in one table with the built-ins' (third-party plugins
    are named by their versions instead); the regression gate compares runs of different code, and says so.
    """
    core = Path(__file__).resolve().parent.parent  # rapt_audit/
    folders = [(str(core), True)]
    # The built-in plugins: defenses/ and attacks/ beside rapt_audit/ in the repository, installed as
    # rapt_audit.defenses and rapt_audit.attacks. Looked up by those names: a top-level "defenses" is
    # importable only from the repository's root, so a console script's digest once left them out.
    for package in ("rapt_audit.defenses", "rapt_audit.attacks"):
        spec = importlib.util.find_spec(package)
        if spec is not None and spec.submodule_search_locations:
            folders.append((str(Path(list(spec.submodule_search_locations)[0]).resolve()), False))
    return _source_digest(tuple(folders))


def default_cache_dir() -> Path:
    """Where expensive intermediate results are cached: ``$RAPT_AUDIT_CACHE``, else ``~/.cache/rapt-audit``."""
    return Path(os.environ.get("RAPT_AUDIT_CACHE", Path.home() / ".cache" / "rapt-audit")).expanduser()


#: The atomic writers live in :mod:`rapt_audit.api.atomic`; callers import them from here with the rest.
__all__ = ["AtomicWrites", "CACHE_WRITE_HOOKS", "DiskFullError", "UnwritableError", "default_cache_dir", "json_text",
           "package_code_digest",
           "read_cache_json_gz", "remove_stray_temps", "stable_hash", "write_atomic",
           "write_bytes_atomic", "write_cache_atomic", "write_cache_json_gz", "write_json_atomic",
           "write_text_atomic"]
