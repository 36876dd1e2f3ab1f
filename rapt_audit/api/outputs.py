"""The output rule: what every command that writes checks before it does any work.

1. **No output is an input, and no two outputs are one file.** Each output a command will write is
   compared with each file it reads, and with its other outputs: existing files by identity
   (``os.path.samefile``: device and inode, so through symbolic links and hard links), paths that do
   not exist yet by their resolved path. A match is refused (:func:`check_outputs`), naming both and
   the fix. Standard input and output take part when they are regular files (``< notes.txt``).
2. **An existing output that is not a regular file is never replaced by one.** Standard output
   (``-``), a FIFO (``/dev/stdout`` on a pipe too) and the null device are written *into* (streamed,
   as ``open(path, "w")`` would); a directory where a file is expected, any other device node, a
   socket or a loop of symbolic links is refused (:func:`file_target`). A symbolic link to a regular
   file is kept: its target is replaced (atomically, by :func:`rapt_audit.api.files.write_atomic`),
   so the link still points at the new content. A dangling link is followed as ``open`` follows it:
   its target is created.
3. **A folder is written only when it is new, empty, or holds this tool's own index** for the same
   kind of output (:func:`check_out_folder`): a sweep's ``sweep.json``, a benchmark's
   ``benchmark.json``, a bundle's ``manifest.json``, each recognised by its ``schema`` (or ``format``)
   key, so a user's unrelated ``sweep.json`` is not taken for ours; a run's folder is checked by
   :func:`rapt_audit.pipeline.runner.check_out_dir` the same way (its ``result.json``). Hidden files
   (the lock, temporary files) do not count. Reports written into a folder the tool made are
   rewritten on a rerun.

Every refusal is a :class:`~rapt_audit.api.errors.UsageError` (exit 2, one line), raised before work.
"""

from __future__ import annotations

import errno
import os
import stat
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import IO, Any, Union

from rapt_audit.api.errors import ResultError, UsageError
from rapt_audit.api.parsing import read_document

#: How a command names standard input or output on its command line.
STDIO = "-"

#: An input or output: a path, an open file descriptor (0 standard input, 1 standard output), or
#: ``None`` (not given: skipped).
Where = Union[str, "os.PathLike[str]", int, None]


def _label(name: str, where: Where) -> str:
    if isinstance(where, int):
        return {0: "standard input", 1: "standard output"}.get(where, f"file descriptor {where}")
    return f"{name} {where}" if name else str(where)


def _stat(where: Where, *, name: str = "") -> os.stat_result | None:
    """``stat`` through links (``fstat`` of a descriptor); None when missing (or a closed descriptor).

    Raises:
        UsageError: for a loop of symbolic links, or a path through a file ("a/b" with "a" a file).
    """
    try:
        return os.fstat(where) if isinstance(where, int) else os.stat(where)  # type: ignore[arg-type]
    except FileNotFoundError:
        return None
    except OSError as exc:
        if isinstance(where, int):
            return None
        if exc.errno == errno.ELOOP:
            raise UsageError(f"{_label(name, where)} is a loop of symbolic links; remove the link or name another "
                             "path") from None
        if exc.errno == errno.ENOTDIR:
            raise UsageError(f"{_label(name, where)} lies below a file, not a folder; name another path") from None
        raise UsageError(f"{_label(name, where)} cannot be inspected: {exc.strerror or exc}") from None


def _kind(mode: int) -> str:
    for test, text in ((stat.S_ISREG, "a file"), (stat.S_ISDIR, "a folder"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISFIFO, "a FIFO")):
        if test(mode):
            return text
    return "neither a file nor a folder"


def file_target(path: str | os.PathLike[str], *, name: str = "output") -> tuple[Path, bool]:
    """Where a file output really goes, and whether it is streamed into rather than replaced.

    Returns:
        ``(path, stream)``: ``path`` itself, or for a symbolic link to a regular file (or to nothing)
        the file it names (the link is kept); ``stream`` is true for an existing FIFO (``/dev/stdout``
        on a pipe included) or the null device, which are written into and never renamed over.

    Raises:
        UsageError: when ``path`` is a folder, another device, a socket or a loop of links.
    """
    path = Path(path)
    info = _stat(path, name=name)
    if info is None or stat.S_ISREG(info.st_mode):
        return (Path(os.path.realpath(path)) if path.is_symlink() else path), False
    if stat.S_ISFIFO(info.st_mode) or (stat.S_ISCHR(info.st_mode) and _is_devnull(info)):
        return path, True
    fix = "name a file" if stat.S_ISDIR(info.st_mode) else "name a regular file (- for standard output)"
    raise UsageError(f"{_label(name, path)} is {_kind(info.st_mode)}, which rapt-audit does not replace; {fix}")


def _is_devnull(info: os.stat_result) -> bool:
    try:
        null = os.stat(os.devnull)
    except OSError:
        return False
    return (info.st_dev, info.st_ino, info.st_rdev) == (null.st_dev, null.st_ino, null.st_rdev)


def _identity(where: Where, name: str) -> tuple[int, int] | str | None:
    """What makes two places one file: (device, inode) of an existing regular file, the resolved path
    of a missing one, None for what cannot coincide with a file (a pipe, a terminal, a closed descriptor)."""
    if where is None:
        return None
    info = _stat(where, name=name)
    if info is None:
        return None if isinstance(where, int) else os.path.normcase(os.path.realpath(where))
    if stat.S_ISREG(info.st_mode):
        return info.st_dev, info.st_ino
    return None


def check_outputs(outputs: Sequence[tuple[str, Where]], inputs: Iterable[tuple[str, Where]] = ()) -> None:
    """Refuse outputs that are inputs, outputs that are one another, and outputs that cannot be files.

    Args:
        outputs: ``(how the command line names it, path)``: ``("--out", "x.md")``; a path ``-`` or
            ``None`` is standard output or not written (skipped), the descriptor ``1`` standard output
            itself (compared with the inputs when it is a regular file).
        inputs: ``(name, path)`` of every file the command reads (``0``: standard input).

    Raises:
        UsageError: naming both paths and the fix.
    """
    outs = [(name, where) for name, where in outputs if where is not None and where != STDIO]
    for name, where in outs:
        if not isinstance(where, int):
            file_target(where, name=name)
    seen: dict[Any, str] = {}
    for name, where in inputs:
        key = _identity(None if where == STDIO else where, name)
        if key is not None:
            seen.setdefault(key, _label(name, where))
    written: dict[Any, str] = {}
    for name, where in outs:
        key, label = _identity(where, name), _label(name, where)
        if key is None:
            continue
        if key in seen:
            raise UsageError(f"{label} is the same file as {seen[key]}, which this command reads; writing it would "
                             "destroy it: name another output")
        if key in written:
            raise UsageError(f"{label} and {written[key]} are the same file; give each output its own path")
        written[key] = label


def folder_exists(folder: str | os.PathLike[str], *, name: str = "--out") -> bool:
    """Whether the output folder ``folder`` exists (False: it will be made).

    Raises:
        UsageError: when it is a file, a device, a socket or a loop of symbolic links.
    """
    info = _stat(folder, name=name)
    if info is None and os.path.islink(folder):
        raise UsageError(f"{_label(name, folder)} is a symbolic link to nothing ({os.readlink(folder)}); remove it or "
                         "make the folder it names")
    if info is None:
        return False
    if not stat.S_ISDIR(info.st_mode):
        raise UsageError(f"{_label(name, folder)} is {_kind(info.st_mode)}, not a folder; name a new or empty folder")
    return True


def check_out_folder(folder: str | os.PathLike[str], *, name: str = "--out", index: str | None = None,
                     schema: str | None = None, key: str = "schema", what: str = "output") -> bool:
    """Refuse a folder that rapt-audit may not write into; return whether it holds our ``index`` already.

    Args:
        folder: The output folder (it may not exist yet).
        name: How the command line names it (``--out``).
        index: The file that marks a folder as this kind of output of ours (``sweep.json``).
        schema: The value of ``index``'s ``key`` that proves rapt-audit wrote it.
        key: The key holding it (``schema``; a bundle's manifest says ``format``).
        what: The kind of output, for the message (``sweep``, ``benchmark``).

    Raises:
        UsageError: when ``folder`` is a file, a device or a loop of links, is not empty and holds no
            index of ours (the message names what is there), or holds an index someone else wrote.
    """
    folder = Path(folder)
    if not folder_exists(folder, name=name):
        return False
    try:
        names = sorted(p.name for p in folder.iterdir() if not p.name.startswith("."))
    except OSError as exc:
        raise UsageError(f"{_label(name, folder)} cannot be read: {exc.strerror or exc}") from None
    if not names:
        return False
    if index is not None and index in names:
        if _holds_schema(folder / index, key, schema):
            return True
        raise UsageError(f"{_label(name, folder)} holds a {index} that rapt-audit did not write (no {key} "
                         f"{schema!r}); choose a new or empty folder for the {what}")
    shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
    ours = f" (no {index})" if index else ""
    raise UsageError(f"{_label(name, folder)} is not empty and holds no rapt-audit {what}{ours}: {shown}; choose a "
                     "new or empty folder, so that none of these is overwritten")


def unwritable(folder: str | os.PathLike[str], exc: OSError) -> UsageError:
    """The one-line error for a folder that cannot be created or written: the folder, the system's reason, the fix."""
    return UsageError(f"cannot write to {folder} ({exc.strerror or exc}); choose an --out folder you can write to, "
                      f"or make {folder} writable")


def make_dir(folder: str | os.PathLike[str]) -> Path:
    """Create ``folder`` and its parents when missing (a read-only disk, no permission: :func:`unwritable`).

    Raises:
        UsageError: naming the folder, the system's reason and the fix.
    """
    try:
        Path(folder).mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise unwritable(folder, exc) from None
    return Path(folder)


def _holds_schema(path: Path, key: str, schema: str | None) -> bool:
    try:  # the one reader: a FIFO is never opened, a deep or huge document is refused, not recursed into
        doc = read_document(path, source=str(path), fmt="json")[1]
    except UsageError:
        return False
    return isinstance(doc, dict) and (schema is None or doc.get(key) == schema)


class _GuardedStream:
    """A text stream whose write errors become one-line messages (a full disk, a reader gone)."""

    def __init__(self, stream: IO[str], name: str) -> None:
        self._stream, self._name = stream, name

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except OSError as exc:
            raise stream_error(exc, self._name) from None

    def flush(self) -> None:
        try:
            self._stream.flush()
        except OSError as exc:
            raise stream_error(exc, self._name) from None

    def __getattr__(self, attr: str) -> Any:
        return getattr(self._stream, attr)


def stream_error(exc: OSError, name: str = "standard output") -> ResultError:
    """The message for a failed write to a stream (a closed pipe, a full disk); standard output is
    pointed at the null device afterwards, so Python's own flush at exit cannot fail a second time."""
    if name == "standard output":
        try:
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, sys.stdout.fileno())
            os.close(null)
        except (OSError, AttributeError, ValueError):
            pass
    if isinstance(exc, BrokenPipeError) or exc.errno == errno.EPIPE:
        return ResultError(f"{name} was closed by its reader before the output was complete (broken pipe); "
                           "the output is incomplete")
    return ResultError(f"cannot write to {name}: {exc.strerror or exc}; the output is incomplete"
                       + ("; free space and rerun" if exc.errno == errno.ENOSPC else ""))


def standard_output() -> Any:
    """``sys.stdout`` for streaming an output, its write errors as one-line messages.

    Raises:
        UsageError: when standard output is closed (``>&-``).
    """
    if sys.stdout is None:
        raise UsageError("standard output is closed; pass --out FILE, or leave standard output open")
    return _GuardedStream(sys.stdout, "standard output")


def standard_input_bytes() -> Any:
    """``sys.stdin.buffer``, the byte stream of standard input.

    Raises:
        UsageError: when standard input is closed (``<&-``).
    """
    if sys.stdin is None:
        raise UsageError("standard input is closed; name an input file, or pipe the text in "
                         "(cat notes.txt | rapt-audit privatize ...)")
    return sys.stdin.buffer


__all__ = ["STDIO", "check_out_folder", "check_outputs", "file_target", "folder_exists", "make_dir", "unwritable", "standard_input_bytes",
           "standard_output", "stream_error"]
