"""Reading the user's own input and writing the privatized output, one record at a time.

Three layouts, chosen by ``--format`` or the file's extension:

* ``text`` — one text per line (``.txt`` and anything else); an empty line stays an empty line;
* ``jsonl`` — one JSON object per line (``.jsonl``, ``.ndjson``); the text is the string in
  ``field``, and the output is the same line with that field's value privatized (every other byte
  as read: :mod:`~rapt_audit.user_side.records`);
* ``csv`` — a header row, then rows (``.csv``; ``.tsv`` with tabs); the text is the ``column``
  cell, and the output is the same row with that cell privatized (every other cell's value as read).

A record that could not be written back as it was is refused, naming its line: a JSON key twice in
one object, a CSV header naming a column twice, a CSV row with more cells than the header.

Input is read as bytes and decoded line by line, so an invalid UTF-8 byte is reported with its
byte offset (``errors="replace"`` substitutes U+FFFD and goes on); a JSON escape of a lone
surrogate (``"\\ud800"``) in the text, which UTF-8 cannot hold either, is treated the same way (in
another field it is copied as the escape it is, like every field privatize does not touch). Nothing is held
beyond one line, so memory stays flat however long the file is. Output to a file replaces it only at
the end (the one atomic writer): a failed run leaves any earlier output untouched.
"""

from __future__ import annotations

import csv
import io
import json
import re
import stat
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Callable, Iterator, TextIO

from rapt_audit.api.errors import DataError, UsageError
from rapt_audit.api.files import AtomicWrites
from rapt_audit.api.outputs import standard_input_bytes, standard_output
from rapt_audit.mechanisms.privatize import LONE_SURROGATE
from rapt_audit.user_side.records import CsvRow, check_header, check_row, parse_object

FORMATS = ("text", "jsonl", "csv")
_BY_SUFFIX = {".jsonl": "jsonl", ".ndjson": "jsonl", ".csv": "csv", ".tsv": "csv"}
#: A JSON escape of a surrogate; only a line holding one can decode to a lone surrogate (a valid pair
#: such as an emoji's decodes to one character).
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


@dataclass
class Item:
    """One input record: its 1-based line number, its text, and what carries it (a JSON object, a row)."""

    line: int
    text: str
    carrier: Any = None


@dataclass(frozen=True)
class Layout:
    """How records are laid out: ``fmt`` plus the JSON field or CSV column that holds the text."""

    fmt: str = "text"
    field: str = "text"
    delimiter: str = ","

    @classmethod
    def for_path(cls, path: str | None, fmt: str | None, field: str | None) -> Layout:
        """The layout named by ``fmt``, else guessed from ``path``'s extension (stdin: ``text``)."""
        suffix = Path(path).suffix.lower() if path and path != "-" else ""
        chosen = fmt or _BY_SUFFIX.get(suffix, "text")
        if chosen not in FORMATS:
            raise UsageError(f"--format {chosen!r} is not one of: {', '.join(FORMATS)}")
        if field is not None and chosen == "text":
            raise UsageError("--field names a JSON field or CSV column; plain text input has none "
                             "(add --format jsonl or --format csv)")
        return cls(chosen, field or "text", "\t" if suffix == ".tsv" else ",")


def decoded_lines(handle: BinaryIO, *, name: str, errors: str = "strict") -> Iterator[tuple[int, str]]:
    """``(line number, text)`` of each line of a byte stream, line endings kept.

    Raises:
        DataError: at the first byte that is not UTF-8 (with ``errors="strict"``), naming its offset.
    """
    offset = 0
    for number, raw in enumerate(handle, start=1):
        try:
            yield number, raw.decode("utf-8", errors=errors)
        except UnicodeDecodeError as exc:
            raise DataError(
                f"{name}: byte {offset + exc.start} (line {number}) is not valid UTF-8 ({exc.reason}); re-encode "
                "the input as UTF-8, or pass --errors replace to substitute U+FFFD for bad bytes and go on") from None
        offset += len(raw)


def read_items(handle: BinaryIO, layout: Layout, *, name: str, errors: str = "strict") -> Iterator[Item]:
    """The records of ``handle`` in ``layout``, in order.

    Raises:
        DataError: for invalid UTF-8, a line that is not a JSON object, or a missing or non-text
            field or column (the message lists the ones present).
    """
    lines = decoded_lines(handle, name=name, errors=errors)
    if layout.fmt == "text":
        for number, line in lines:
            yield Item(number, line.rstrip("\r\n"))
    elif layout.fmt == "jsonl":
        yield from _json_items(lines, layout.field, name=name, errors=errors)
    else:
        yield from _csv_items(lines, layout, name=name)


def _json_items(lines: Iterator[tuple[int, str]], key: str, *, name: str, errors: str) -> Iterator[Item]:
    for number, line in lines:
        if not line.strip():
            continue
        record = parse_object(line, where=f"{name}: line {number}")
        obj = record.values
        if key not in obj:
            raise DataError(f"{name}: line {number} has no field {key!r}; its fields are "
                            f"{', '.join(map(repr, obj)) or '(none)'} (choose one with --field)")
        if not isinstance(obj[key], str):
            raise DataError(f"{name}: line {number}: field {key!r} holds a {type(obj[key]).__name__}, not text")
        text = obj[key]
        start, end = record.spans[key]
        if _SURROGATE_ESCAPE.search(line, start, end):  # only the text is decoded and written again
            text = _without_lone_surrogates(text, where=f"{name}: line {number}", errors=errors)
        yield Item(number, text, record)


def _without_lone_surrogates(text: str, *, where: str, errors: str) -> str:
    """``text`` with each lone surrogate replaced by U+FFFD (``errors="replace"``), else a DataError."""
    found = LONE_SURROGATE.search(text)
    if found is None:
        return text
    if errors != "replace":
        raise DataError(f"{where} holds a lone surrogate escape (\\u{ord(found.group()):04x}), which is not a Unicode "
                        "character and cannot be written as UTF-8; repair the input, or pass --errors replace to "
                        "substitute U+FFFD and go on")
    return LONE_SURROGATE.sub("\ufffd", text)


def _csv_items(lines: Iterator[tuple[int, str]], layout: Layout, *, name: str) -> Iterator[Item]:
    numbers = [0]  # the number of the last line read (the row's last): one slot, not one per line

    def text_lines() -> Iterator[str]:
        for number, line in lines:
            numbers[-1] = number
            yield line

    # Rows as lists, not dicts: a dict would merge a duplicated column and file extra cells under None.
    reader = csv.reader(text_lines(), delimiter=layout.delimiter)
    header = next((row for row in reader if row), None)
    if header is None:
        return  # an empty file: no header, no rows
    check_header(header, where=f"{name}: line {numbers[-1]}")
    if layout.field not in header:
        raise DataError(f"{name}: no column {layout.field!r}; the header has "
                        f"{', '.join(map(repr, header))} (choose one with --field)")
    column = header.index(layout.field)
    for row in reader:
        if not row:
            continue  # a blank line holds no row
        where = f"{name}: the row ending on line {numbers[-1]}"
        check_row(row, header, where=where, delimiter=layout.delimiter)
        if column >= len(row):
            raise DataError(f"{where} has no {layout.field!r} cell")
        yield Item(numbers[-1], row[column], CsvRow(header, row))


class Writer:
    """Writes privatized items in the input's layout (texts, or vectors as JSON lists)."""

    def __init__(self, stream: TextIO, layout: Layout) -> None:
        self.stream, self.layout = stream, layout
        self._csv: Any = None  # a csv.writer, made with the first row
        self._column = 0  # the text's column, from the first row's header

    def write(self, item: Item, value: Any) -> None:
        """Write ``item`` with its text replaced by ``value`` (a string, or a JSON-able vector list)."""
        if self.layout.fmt == "text":
            line = value if isinstance(value, str) else json.dumps(value)
            self.stream.write(line.replace("\r", " ").replace("\n", " ") + "\n")
        elif self.layout.fmt == "jsonl":
            self.stream.write(item.carrier.with_value(self.layout.field, value) + "\n")  # the rest as read
        else:
            row: CsvRow = item.carrier
            if self._csv is None:
                self._csv = csv.writer(self.stream, delimiter=self.layout.delimiter, lineterminator="\n")
                self._csv.writerow(row.header)
                self._column = row.header.index(self.layout.field)
            cell = value if isinstance(value, str) else json.dumps(value)
            self._csv.writerow(row.with_value(self._column, cell))


@contextmanager
def open_input(path: str | None) -> Iterator[tuple[BinaryIO, str, int | None]]:
    """``(byte stream, display name, size in bytes or None)`` for a path, or stdin for ``None``/``-``.

    A pipe or FIFO (``<(cmd)`` is ``/dev/fd/63``) or a terminal is read as standard input is: once,
    as it comes, with no size (nothing downstream reads the input twice).

    Raises:
        UsageError: when the input does not exist, is a directory, or is a socket or block device.
    """
    if path in (None, "-"):
        yield standard_input_bytes(), "<stdin>", None
        return
    file = Path(path)
    try:
        mode = file.stat().st_mode
    except OSError as exc:
        why = "no such file" if isinstance(exc, FileNotFoundError) else exc.strerror or str(exc)
        raise UsageError(f"input {path!r} cannot be read ({why}); name an existing file, or - for standard "
                         "input") from None
    if not (stat.S_ISREG(mode) or stat.S_ISFIFO(mode) or stat.S_ISCHR(mode)):
        kind = "a directory" if stat.S_ISDIR(mode) else "a socket or block device"
        raise UsageError(f"input {path!r} is {kind}; name a file, a pipe, or - for standard input")
    try:
        handle = file.open("rb")
    except OSError as exc:
        raise UsageError(f"input {path!r} cannot be opened: {exc.strerror or exc}") from None
    with handle:
        yield handle, str(file), file.stat().st_size if stat.S_ISREG(mode) else None


def write_output(path: str | None, produce: Callable[[TextIO], None], files: AtomicWrites) -> None:
    """Call ``produce(stream)`` on a UTF-8 text stream to ``path``, or on stdout for ``None``/``-``.

    A file is written aside into ``files`` (:class:`rapt_audit.api.files.AtomicWrites`): it replaces
    ``path`` when ``files`` is committed, with the sidecar, so a failed run leaves earlier output as it was.

    Standard output (``None``/``-``) and an existing FIFO are written into as the records come;
    a symbolic link keeps pointing at the new file (:mod:`rapt_audit.api.outputs`).

    Raises:
        UsageError: when ``path`` is a directory, a device or a socket, or standard output is closed.
        ResultError: when standard output fails (its reader gone, a full disk).
    """
    if path in (None, "-"):
        stream = standard_output()  # a reader gone or a full disk: one line, exit 2
        produce(stream)
        stream.flush()
        return
    if Path(path).is_dir():
        raise UsageError(f"output {path!r} is a directory; name a file")

    def write(handle: BinaryIO) -> None:
        stream = io.TextIOWrapper(handle, encoding="utf-8", newline="")
        produce(stream)
        stream.flush()
        stream.detach()  # the atomic writer closes the file itself

    files.write(path, write)
