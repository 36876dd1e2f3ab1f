"""Reading the user's own input and writing the privatized output, one record at a time.

Three layouts, chosen by ``--format`` or the file's extension:

* ``text`` — one text per line (``.txt`` and anything else); an empty line stays an empty line;
* ``jsonl`` — one JSON object per line (``.jsonl``, ``.ndjson``); the text is the string in
  ``field``, and the output is the same object with that field privatized (other fields kept);
* ``csv`` — a header row, then rows (``.csv``; ``.tsv`` with tabs); the text is the ``column``
  cell, and the output is the same row with that cell privatized.

Input is read as bytes and decoded line by line, so an invalid UTF-8 byte is reported with its
byte offset (``errors="replace"`` substitutes U+FFFD and goes on); a JSON escape of a lone
surrogate (``"\\ud800"``), which UTF-8 cannot hold either, is treated the same way. Nothing is held
beyond one line, so memory stays flat however long the file is. Output to a file replaces it only at
the end (the one atomic writer): a failed run leaves any earlier output untouched.
"""

from __future__ import annotations

import csv
import io
import json
import re
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Callable, Iterator, TextIO

from rapt_audit.api.errors import DataError, UsageError
from rapt_audit.api.files import write_atomic
from rapt_audit.mechanisms.privatize import LONE_SURROGATE

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
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DataError(f"{name}: line {number} is not JSON ({exc.msg} at column {exc.colno})") from None
        if _SURROGATE_ESCAPE.search(line):  # any field may hold it, and every field is written back
            obj = _without_lone_surrogates(obj, where=f"{name}: line {number}", errors=errors)
        if not isinstance(obj, dict):
            raise DataError(f"{name}: line {number} is a JSON {type(obj).__name__}, not an object")
        if key not in obj:
            raise DataError(f"{name}: line {number} has no field {key!r}; its fields are "
                            f"{', '.join(map(repr, obj)) or '(none)'} (choose one with --field)")
        if not isinstance(obj[key], str):
            raise DataError(f"{name}: line {number}: field {key!r} holds a {type(obj[key]).__name__}, not text")
        yield Item(number, obj[key], obj)


def _without_lone_surrogates(obj: Any, *, where: str, errors: str) -> Any:
    """``obj`` with each lone surrogate replaced by U+FFFD (``errors="replace"``), else a DataError."""
    text = json.dumps(obj, ensure_ascii=False)  # lone surrogates stay as they are in the dumped str
    found = LONE_SURROGATE.search(text)
    if found is None:
        return obj
    if errors != "replace":
        raise DataError(f"{where} holds a lone surrogate escape (\\u{ord(found.group()):04x}), which is not a Unicode "
                        "character and cannot be written as UTF-8; repair the input, or pass --errors replace to "
                        "substitute U+FFFD and go on")
    return json.loads(LONE_SURROGATE.sub("\ufffd", text))


def _csv_items(lines: Iterator[tuple[int, str]], layout: Layout, *, name: str) -> Iterator[Item]:
    numbers = [0]  # the number of the last line read (the row's last): one slot, not one per line

    def text_lines() -> Iterator[str]:
        for number, line in lines:
            numbers[-1] = number
            yield line

    reader = csv.DictReader(text_lines(), delimiter=layout.delimiter)
    if reader.fieldnames is None:
        return  # an empty file: no header, no rows
    if layout.field not in reader.fieldnames:
        raise DataError(f"{name}: no column {layout.field!r}; the header has "
                        f"{', '.join(map(repr, reader.fieldnames))} (choose one with --field)")
    for row in reader:
        value = row[layout.field]
        if value is None:
            raise DataError(f"{name}: the row ending on line {numbers[-1]} has no {layout.field!r} cell")
        yield Item(numbers[-1], value, row)


class Writer:
    """Writes privatized items in the input's layout (texts, or vectors as JSON lists)."""

    def __init__(self, stream: TextIO, layout: Layout) -> None:
        self.stream, self.layout = stream, layout
        self._csv: csv.DictWriter | None = None

    def write(self, item: Item, value: Any) -> None:
        """Write ``item`` with its text replaced by ``value`` (a string, or a JSON-able vector list)."""
        if self.layout.fmt == "text":
            line = value if isinstance(value, str) else json.dumps(value)
            self.stream.write(line.replace("\r", " ").replace("\n", " ") + "\n")
        elif self.layout.fmt == "jsonl":
            self.stream.write(json.dumps({**item.carrier, self.layout.field: value}, ensure_ascii=False) + "\n")
        else:
            if self._csv is None:
                self._csv = csv.DictWriter(self.stream, fieldnames=list(item.carrier), delimiter=self.layout.delimiter,
                                           lineterminator="\n")
                self._csv.writeheader()
            self._csv.writerow({**item.carrier, self.layout.field: value if isinstance(value, str) else json.dumps(value)})


@contextmanager
def open_input(path: str | None) -> Iterator[tuple[BinaryIO, str, int | None]]:
    """``(byte stream, display name, size in bytes or None)`` for a path, or stdin for ``None``/``-``.

    Raises:
        UsageError: when the file does not exist or is a directory.
    """
    if path in (None, "-"):
        yield sys.stdin.buffer, "<stdin>", None
        return
    file = Path(path)
    if not file.is_file():
        raise UsageError(f"input {path!r} is not a file" + (" (it is a directory)" if file.is_dir() else
                                                            " (no such file)"))
    with file.open("rb") as handle:
        yield handle, str(file), file.stat().st_size


def write_output(path: str | None, produce: Callable[[TextIO], None]) -> None:
    """Call ``produce(stream)`` on a UTF-8 text stream to ``path``, or on stdout for ``None``/``-``.

    A file is written with the one atomic writer (:func:`rapt_audit.api.files.write_atomic`): it
    replaces ``path`` only when ``produce`` returns, so a failed run leaves earlier output as it was.

    Raises:
        UsageError: when ``path`` is a directory.
    """
    if path in (None, "-"):
        produce(sys.stdout)
        sys.stdout.flush()
        return
    if Path(path).is_dir():
        raise UsageError(f"output {path!r} is a directory; name a file")

    def write(handle: BinaryIO) -> None:
        stream = io.TextIOWrapper(handle, encoding="utf-8", newline="")
        produce(stream)
        stream.flush()
        stream.detach()  # the atomic writer closes the file itself

    write_atomic(path, write)
