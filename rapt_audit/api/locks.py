"""One rapt-audit process per output directory: a lock on ``DIR/.rapt-audit.lock``.

A run holds the lock of its ``--out`` directory, and a sweep the lock of the sweep directory
(each of its cells then also holds its own cell directory's lock), from its first check of the
directory to its last write. A second process that wants the same directory fails at once with
:class:`~rapt_audit.api.errors.ResultError` (exit code 2) naming the holder, instead of both
writing the same ``result.json``.

Where ``fcntl`` exists (Linux, macOS) the lock is ``flock`` on the lock file: the kernel releases
it when its holder exits in any way, SIGKILL and power cuts included, so a killed run never
leaves a stale lock. Elsewhere (Windows) the lock file is created exclusively and removed on
release; a killed process leaves it behind, and the error message says to delete it.
"""

from __future__ import annotations

import errno
import json
import os
import socket
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

from rapt_audit.api.errors import ResultError
from rapt_audit.api.outputs import make_dir, unwritable

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

LOCK_FILE = ".rapt-audit.lock"
#: Folders this thread holds, with their nesting depth: taking a held folder again is a no-op, so a
#: library caller that locks a directory and then runs into it does not deadlock on itself. Per
#: thread, so two threads of one process aimed at one folder still exclude each other (flock locks
#: taken through two descriptors conflict even within one process).
_local = threading.local()


def _held() -> dict[Path, int]:
    if not hasattr(_local, "held"):
        _local.held = {}
    return _local.held


@contextmanager
def hold_out_dir(out: str | os.PathLike[str]) -> Iterator[Path]:
    """Hold the lock of the output directory ``out`` (created when missing) for the ``with`` block.

    On release the lock file is removed, and so is ``out`` when this call created it and nothing
    was written there (a run that fails early leaves no empty directory behind).

    Yields:
        The lock file.

    Raises:
        ResultError: when another process holds ``out``; the message names it and what to do.
        UsageError: when ``out`` cannot be created or written (:func:`rapt_audit.api.outputs.unwritable`).
    """
    out = Path(out)
    key = out.resolve()
    lock = out / LOCK_FILE
    held = _held()
    if key in held:
        held[key] += 1
        try:
            yield lock
        finally:
            held[key] -= 1
        return
    created = not out.exists()
    fd = _acquire(out, lock)
    held[key] = 1
    try:
        yield lock
    finally:
        del held[key]
        _release(fd, lock)
        if created:
            try:
                out.rmdir()  # only succeeds when empty
            except OSError:
                pass


def _acquire(out: Path, lock: Path) -> int:
    """Open and lock ``lock``, record this process in it and return its descriptor."""
    while True:
        make_dir(out)  # a read-only disk or folder, no permission: one line naming it
        try:
            fd = _open_locked(lock)
        except FileNotFoundError:  # ``out`` was removed by a holder that just let go: try again
            continue
        except OSError as exc:  # the folder exists but takes no new file
            raise unwritable(out, exc) from None
        if fd is None:
            raise ResultError(_in_use_message(out, lock))
        if fcntl is None:
            break
        # A holder removes the lock file as it lets go; if that happened between our open and our
        # flock, we hold a lock on a file nobody else can find: start again on the current one.
        try:
            if os.path.samestat(os.fstat(fd), os.stat(lock)):
                break
        except FileNotFoundError:
            pass
        os.close(fd)
    holder = {"pid": os.getpid(), "host": socket.gethostname(),
              "started": datetime.now().astimezone().isoformat(timespec="seconds"),
              "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]])}
    try:
        os.ftruncate(fd, 0)
        os.write(fd, (json.dumps(holder) + "\n").encode("utf-8"))
    except OSError:  # only informs the error message of a second process (a full disk must not stop us here)
        pass
    return fd


def _open_locked(lock: Path) -> int | None:
    """The descriptor of ``lock``, locked by this process, or None when another process holds it."""
    if fcntl is None:
        try:
            return os.open(lock, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o666)
        except FileExistsError:
            return None
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        os.close(fd)
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            return None
        raise ResultError(f"cannot lock {lock} ({exc.strerror}); the file system of {lock.parent} may not "
                          "support locks: choose an --out on a local disk") from None
    return fd


def _release(fd: int, lock: Path) -> None:
    if fcntl is None:  # Windows cannot remove a file that is open
        os.close(fd)
        lock.unlink(missing_ok=True)
        return
    # Removed while still locked, so no other process can lock the old file after we let go.
    lock.unlink(missing_ok=True)
    os.close(fd)  # closing the descriptor releases the flock


def _in_use_message(out: Path, lock: Path) -> str:
    try:
        holder = json.loads(lock.read_text(encoding="utf-8"))
        who = (f"rapt-audit process {holder['pid']} on {holder['host']} "
               f"(started {_ago(holder['started'])}: {holder['command']})")
    except (OSError, ValueError, KeyError, TypeError):  # the holder has not written its record yet
        who = "another rapt-audit process"
    if fcntl is None:
        stale = f"the lock is stale (left by a process that was killed): delete {lock} and rerun"
    else:
        stale = ("a process it started may still hold the lock: end that process (the system releases "
                 "this lock when its holder exits, so there is no file to delete)")
    return (f"{out} is in use by {who}; wait for it to finish, or use another --out. "
            f"If no such process is running, {stale}")


def _ago(started: str) -> str:
    seconds = max(0, int((datetime.now(timezone.utc) - datetime.fromisoformat(started)).total_seconds()))
    return f"{started}, {seconds} s ago" if seconds < 120 else f"{started}, {seconds // 60} min ago"


__all__ = ["LOCK_FILE", "hold_out_dir"]
