"""Atomic file writes: a reader sees the old file or the new one, never half of one.

Every file rapt-audit writes for later reading (results, sweep indexes, baselines, reports, the
leaderboard, on-disk caches) goes through :func:`write_atomic`: the content is written to a
temporary file in the target's folder, flushed to disk, then renamed over the target with
``os.replace`` (atomic on POSIX and Windows when both lie on one file system).
"""

from __future__ import annotations

import json
import os
import tempfile
import warnings
from pathlib import Path
from typing import IO, Any, Callable, Mapping


def write_atomic(path: str | os.PathLike[str], write: Callable[[IO[bytes]], Any]) -> None:
    """Call ``write(handle)`` on a binary temporary file next to ``path``, then move it into place.

    The folder is created when missing. On any error the temporary file is removed and ``path``
    is left as it was.

    Args:
        path: The file to (re)place.
        write: Writes the whole content to the open binary handle it is given.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        # mkstemp creates 0600 files; results and reports are meant to be shared (umask decides, as for open()).
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_bytes_atomic(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (see :func:`write_atomic`)."""
    write_atomic(path, lambda handle: handle.write(data))


def write_text_atomic(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` as UTF-8 to ``path`` atomically (see :func:`write_atomic`)."""
    write_bytes_atomic(path, text.encode("utf-8"))


def write_json_atomic(path: str | os.PathLike[str], document: Mapping[str, Any]) -> None:
    """Write ``document`` as indented JSON to ``path`` atomically (NaN and infinity are refused)."""
    write_text_atomic(path, json.dumps(document, indent=2, sort_keys=False, allow_nan=False) + "\n")


_warned_unwritable = False  # the cache's one warning per process


def write_cache_atomic(path: str | os.PathLike[str], write: Callable[[IO[bytes]], Any]) -> bool:
    """:func:`write_atomic` for a cache entry, which may fail: returns whether it was stored.

    A cache folder that cannot be written (read-only, full, no permission) is not an error: the
    caller keeps what it computed in memory and goes on. The first failure of a process says so in
    one warning that names the folder and how to choose another; later failures are silent.
    """
    global _warned_unwritable
    try:
        write_atomic(path, write)
        return True
    except OSError as exc:
        if not _warned_unwritable:
            _warned_unwritable = True
            warnings.warn(f"the cache folder {Path(path).parent} cannot be written ({exc.strerror or exc}); "
                          "working from memory, so the next start will be slower. Set RAPT_AUDIT_CACHE to a "
                          "writable folder to keep the cache", stacklevel=2)
        return False
