"""Records kept as they were: a JSON Lines object or a CSV row, read so that only its text changes.

``privatize`` writes each record back with the one field or cell it privatized replaced. A JSON object
keeps its line: every other key and value, spacing and number spelling (``1.10``, ``-0.0``, ``1e999``,
``NaN``) is copied from the input byte for byte, and only the text's value is spliced in, as standard
JSON. A CSV row keeps every other cell's value exactly (the writer quotes a cell only where the
delimiter, a quote or a line break needs it, so quoting may differ from the input's).

What cannot be written back as it was is refused, naming the line and the fix: a key that appears
twice in one object (a reader keeps only one of the two), a header that names one column twice, a row
with more cells than the header names.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from rapt_audit.api.errors import DataError

_SPACE = re.compile(r"[ \t\n\r]*")  # JSON's whitespace


class _DuplicateKey(ValueError):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A nested object's dict; a key it holds twice raises."""
    obj: dict[str, Any] = {}
    for key, value in pairs:
        if key in obj:
            raise _DuplicateKey(key)
        obj[key] = value
    return obj


_DECODER = json.JSONDecoder(object_pairs_hook=_unique)


def _duplicate(where: str, key: str) -> DataError:
    return DataError(f"{where} has the key {key!r} twice in one object; a JSON reader keeps only one of the two, so "
                     "the record cannot be written back as it was: remove or rename one")


@dataclass
class JsonRecord:
    """One JSON object as read: its line (no line ending), its top-level values and each value's span."""

    line: str
    values: dict[str, Any]
    spans: dict[str, tuple[int, int]]

    def with_value(self, key: str, value: Any) -> str:
        """The line with ``key``'s value replaced by ``value`` as JSON; every other character as read."""
        start, end = self.spans[key]
        return self.line[:start] + json.dumps(value, ensure_ascii=False) + self.line[end:]


def parse_object(line: str, *, where: str) -> JsonRecord:
    """The JSON object on ``line`` with the span of each top-level value.

    Raises:
        DataError: when the line is not JSON, is JSON but not an object, or holds a key twice in one object.
    """
    line = line.rstrip("\r\n")
    try:
        record = _walk(line)
        if isinstance(record, JsonRecord):
            return record
        if isinstance(record, str):
            raise _DuplicateKey(record)
        obj = json.loads(line, object_pairs_hook=_unique)  # not one object: the standard parser says why
    except _DuplicateKey as exc:
        raise _duplicate(where, exc.key) from None
    except json.JSONDecodeError as exc:
        raise DataError(f"{where} is not JSON ({exc.msg} at column {exc.colno})") from None
    except RecursionError:
        raise DataError(f"{where} nests objects or lists too deeply for Python's JSON reader; flatten it") from None
    raise DataError(f"{where} is a JSON {type(obj).__name__}, not an object")


def _walk(line: str) -> JsonRecord | str | None:
    """The object on ``line`` key by key; a top-level key seen twice (its name), or None if not one object."""
    values: dict[str, Any] = {}
    spans: dict[str, tuple[int, int]] = {}
    at = _SPACE.match(line).end()
    if not line.startswith("{", at):
        return None
    at = _SPACE.match(line, at + 1).end()
    try:
        if line.startswith("}", at):
            at += 1
        else:
            while True:
                if not line.startswith('"', at):
                    return None
                key, at = _DECODER.raw_decode(line, at)
                at = _SPACE.match(line, at).end()
                if not line.startswith(":", at):
                    return None
                start = _SPACE.match(line, at + 1).end()
                if key in values:
                    return key
                value, end = _DECODER.raw_decode(line, start)
                values[key], spans[key] = value, (start, end)
                at = _SPACE.match(line, end).end()
                if line.startswith(",", at):
                    at = _SPACE.match(line, at + 1).end()
                elif line.startswith("}", at):
                    at += 1
                    break
                else:
                    return None
    except json.JSONDecodeError:
        return None
    if _SPACE.match(line, at).end() != len(line):
        return None  # something after the object
    return JsonRecord(line, values, spans)


@dataclass
class CsvRow:
    """One CSV row as read: the header (one list for every row) and the row's cells."""

    header: list[str]
    cells: list[str]

    def with_value(self, column: int, value: str) -> list[str]:
        """The cells with the one at ``column`` replaced."""
        return [*self.cells[:column], value, *self.cells[column + 1:]]


def check_header(header: list[str], *, where: str) -> None:
    """Refuse a header that names one column twice (a row could not say which cell is which)."""
    seen: set[str] = set()
    for name in header:
        if name in seen:
            raise DataError(f"{where}: the header names the column {name!r} twice; rename one so that each cell "
                            "can be written back under its own column")
        seen.add(name)


def check_row(row: list[str], header: list[str], *, where: str, delimiter: str) -> None:
    """Refuse a row with more cells than the header names (its extra cells have no column to go back to)."""
    if len(row) > len(header):
        raise DataError(f"{where} has {len(row)} cells but the header names {len(header)} columns; quote a cell "
                        f"that holds the delimiter {delimiter!r}, or name the extra column(s) in the header")


__all__ = ["CsvRow", "JsonRecord", "check_header", "check_row", "parse_object"]
