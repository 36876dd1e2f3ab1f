"""Atomic file writes: a reader sees the old file or the new one, never half of one.

Every file rapt-audit writes for later reading (results, sweep indexes, baselines, reports, the
leaderboard, on-disk caches, privatized text and its sidecar) goes through :class:`AtomicWrites` (one file:
:func:`write_atomic`): the content is written to a temporary file in the target's folder, flushed to disk,
given the mode, owner and group of the file it replaces (a new file: the user's umask), then renamed over
the target with ``os.replace`` (atomic on POSIX and Windows when both lie on one file system). Several files
are moved together or not at all. A process killed mid-write leaves at most a ``.NAME.*.tmp`` file beside
the target, which no reader opens and the next run that writes it removes (:func:`remove_stray_temps`).
:mod:`rapt_audit.api.files` re-exports these names beside the other file helpers.
"""

from __future__ import annotations

import contextlib
import errno
import glob
import os
import re
import secrets
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import IO, Any

from rapt_audit.api.errors import ResultError
from rapt_audit.api.outputs import file_target

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

#: errno values that mean the disk (or the user's quota) is full.
_NO_SPACE = frozenset({errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)})


class _WriteError(ResultError, OSError):
    def __str__(self) -> str:
        return self.message


class DiskFullError(_WriteError):
    """A write failed because the disk or the quota is full; the files written to are unchanged. An
    :class:`OSError` too (``errno`` kept), so callers that take an unwritable cache as a warning still do."""

    def __init__(self, path: Path, code: int, *, before: str) -> None:
        super().__init__(code, os.strerror(code), str(path))
        self.message = f"no space left on device while writing {path}; {before}; free space and rerun"


class UnwritableError(_WriteError):
    """A write failed for another reason than a full disk (no permission, a read-only disk, a path
    through a file); the files written to are unchanged. An :class:`OSError` too (``errno`` kept)."""

    def __init__(self, path: Path, error: OSError, *, before: str) -> None:
        super().__init__(error.errno, error.strerror or str(error), str(path))
        self.message = (f"cannot write {path}: {error.strerror or error}; {before}; choose another path or fix "
                        "its folder")


def _temp_prefix(name: str) -> str:
    return f".{name}."


def _before(states: Mapping[Path, bool]) -> str:
    """What a failed write left: ``the previous a and b are intact``, ``no a or b was written``, or both."""
    kept, new = ([path.name for path, existed in states.items() if existed is was] for was in (True, False))
    parts = [f"the previous {' and '.join(kept)} {'is' if len(kept) == 1 else 'are'} intact"] if kept else []
    return " and ".join(parts + ([f"no {' or '.join(new)} was written"] if new else []))


def _carry_over(fd: int, target: Path) -> None:
    """Give the temporary file ``fd`` the mode, owner and group of the ``target`` it replaces; a new file gets
    ``0o666 & ~umask`` as ``open`` gives it (mkstemp made it 0600)."""
    try:
        old = os.stat(target)
    except FileNotFoundError:
        umask = os.umask(0o077)  # read by setting it, to the narrowest meanwhile: no file made then is wider
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)
        return
    try:
        os.fchown(fd, old.st_uid, old.st_gid)
    except OSError:  # another owner needs root; a member of the group may still set the group
        with contextlib.suppress(OSError):
            os.fchown(fd, -1, old.st_gid)
    mode = stat.S_IMODE(old.st_mode)
    if os.fstat(fd).st_gid != old.st_gid:
        mode &= ~0o070  # the group's rights were given to the old group, not ours: never widen
    os.fchmod(fd, mode)  # after the chown, which clears setuid and setgid


def _lock(fd: int) -> bool:
    """Take ``fd``'s lock; False when a live process holds it (the system lets go of a killed one's)."""
    if fcntl is None:
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:  # a file system without locks leaves the temporary unguarded
        return exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN)
    return True


def _keep_aside(target: Path) -> Path:
    """A second name for ``target``'s current content, to put it back if a later move of the group fails.

    A hard link (no copy made); a copy where the file system has none. Named as our temporaries are, so a
    killed run's is swept by :func:`remove_stray_temps`.
    """
    backup = target.parent / f"{_temp_prefix(target.name)}{secrets.token_hex(8)}.tmp"
    try:
        os.link(target, backup)
    except OSError:  # no hard links here (some network and FAT file systems)
        shutil.copy2(target, backup)
    return backup


class AtomicWrites(contextlib.AbstractContextManager):
    """Files written aside (a temporary file in each one's folder), then moved into place together.

    ``with AtomicWrites([out, sidecar]) as files: files.write(out, ...); files.write(sidecar, ...)``
    replaces both when the block ends or, on any error in it or in the moves, neither (a file already
    moved is put back from a hard link of the old one); the error names the previous files intact. A
    FIFO or the null device is written into at once: there is nothing to rename over, nor to take back.
    """

    def __init__(self, expected: Iterable[str | os.PathLike[str]] = ()) -> None:
        self._states: dict[Path, bool] = {}  # every file of the group → whether it existed before
        self._staged: list[tuple[Path, str, IO[bytes]]] = []  # target, temporary, its locked handle
        for path in expected:
            self._declare(path)

    def _declare(self, path: str | os.PathLike[str]) -> tuple[Path, bool]:
        target, stream = file_target(path, name="output")
        if not stream:
            self._states.setdefault(target, target.exists())
        return target, stream

    def _error(self, path: Path, exc: OSError) -> OSError:
        if isinstance(exc, _WriteError):
            return exc
        return (DiskFullError(path, exc.errno, before=_before(self._states)) if exc.errno in _NO_SPACE
                else UnwritableError(path, exc, before=_before(self._states)))

    def write(self, path: str | os.PathLike[str], write: Callable[[IO[bytes]], Any]) -> None:
        """Call ``write(handle)`` on a binary temporary file next to ``path``; moved into place at the end."""
        target, stream = self._declare(path)
        if stream:  # a FIFO: its reader gets the content as it is written
            try:
                with open(target, "wb") as handle:
                    write(handle)
            except OSError as exc:
                raise UnwritableError(target, exc, before=f"the previous {target.name} is intact") from None
            return
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=_temp_prefix(target.name), suffix=".tmp", dir=target.parent)
            handle = os.fdopen(fd, "wb")
            _lock(fd)  # so that another process's remove_stray_temps leaves it
            self._staged.append((target, tmp, handle))
            write(handle)
            handle.flush()
            os.fsync(fd)
            _carry_over(fd, target)
        except OSError as exc:
            raise self._error(target, exc) from exc

    def commit(self) -> None:
        """Move every staged file into place, all or (putting back those moved) none."""
        moved: list[tuple[Path, Path | None]] = []  # target, a hard link to its old content (None: it was new)
        try:
            for index, (target, tmp, _handle) in enumerate(self._staged):
                backup = None  # the last move needs no way back: nothing can fail after it
                if index < len(self._staged) - 1 and target.exists():
                    backup = _keep_aside(target)
                os.replace(tmp, target)
                moved.append((target, backup))
                backup = None
        except BaseException as exc:
            if backup:  # kept aside for a move that then failed
                backup.unlink(missing_ok=True)
            for old, backup in reversed(moved):
                if backup:
                    os.replace(backup, old)
                else:
                    old.unlink(missing_ok=True)
            self.discard()
            if isinstance(exc, OSError):
                raise self._error(target, exc) from exc
            raise
        for target, backup in moved:
            if backup:
                backup.unlink(missing_ok=True)
            _fsync_dir(target.parent)
        for _target, _tmp, handle in self._staged:
            handle.close()
        self._staged = []

    def discard(self) -> None:
        """Remove every staged temporary file; the targets are left as they were."""
        for _target, tmp, handle in self._staged:
            handle.close()
            Path(tmp).unlink(missing_ok=True)
        self._staged = []

    def __exit__(self, kind: Any, *_rest: Any) -> None:
        if kind is None:
            self.commit()
        else:
            self.discard()


def write_atomic(path: str | os.PathLike[str], write: Callable[[IO[bytes]], Any]) -> None:
    """Call ``write(handle)`` on a binary temporary file next to ``path``, then move it into place.

    The folder is created when missing; the file, then its folder, are synced to disk, so a crash or power
    cut right after the rename cannot leave an empty ``path``. On any error (``KeyboardInterrupt`` and a
    SIGTERM turned into one included) the temporary file is removed and ``path`` left as it was. A replaced
    file keeps its mode, owner and group (:class:`AtomicWrites` replaces several together). The output rule
    (:mod:`rapt_audit.api.outputs`) holds: a link's target is replaced, a FIFO written into, never renamed over.

    Args:
        path: The file to (re)place.
        write: Writes the whole content to the open binary handle it is given.

    Raises:
        DiskFullError: when the disk or quota is full (``path`` unchanged; the message says so).
        UnwritableError: when ``path`` or its folder cannot be written (permissions, a read-only disk).
        UsageError: when ``path`` is a folder, a device, a socket or a loop of links (left as it is).
    """
    with AtomicWrites() as files:
        files.write(path, write)


def _fsync_dir(folder: Path) -> None:
    """Sync ``folder``'s entries, so the rename survives a power cut (POSIX; a no-op where unsupported)."""
    try:
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:  # Windows cannot open a folder; its rename is durable on its own
        return
    try:
        os.fsync(fd)
    except OSError:  # some file systems (and Windows) refuse to sync a folder; the file itself is synced
        pass
    finally:
        os.close(fd)


def remove_stray_temps(folder: str | os.PathLike[str], name: str) -> list[Path]:
    """Remove the temporary files that :func:`write_atomic` left for ``folder/name`` in a killed process.

    Only our own: regular files named exactly ``.NAME.<random>.tmp`` that no live writer holds (each locks
    its own). Without ``fcntl`` (Windows) call it only holding :func:`rapt_audit.api.locks.hold_out_dir`.

    Returns:
        The files removed.
    """
    ours = re.compile(rf"{re.escape(_temp_prefix(name))}[a-z0-9_]+\.tmp")  # mkstemp's random part, or a backup's
    strays = sorted(Path(folder).glob(f"{glob.escape(_temp_prefix(name))}*.tmp"))
    return [stray for stray in strays if ours.fullmatch(stray.name) and _remove_unheld(stray)]


def _remove_unheld(path: Path) -> bool:
    """Remove the regular file ``path`` unless a live writer holds it; whether it was removed."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError:  # gone, a link, unreadable
        return False
    try:
        if not (stat.S_ISREG(os.fstat(fd).st_mode) and _lock(fd)):
            return False
        path.unlink(missing_ok=True)
        return True
    finally:
        os.close(fd)


__all__ = ["AtomicWrites", "DiskFullError", "UnwritableError", "remove_stray_temps", "write_atomic"]
