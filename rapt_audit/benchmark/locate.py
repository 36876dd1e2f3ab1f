"""Where a key or table of a TOML file is written: the line a benchmark file's error names.

``tomllib`` returns plain dicts without positions, so a value found wrong after parsing (an unknown
defense, a grid value out of range) is located again in the raw text. The scan knows what a
benchmark file uses: ``[table.headers]``, ``key = value`` and ``dotted.keys = value`` lines, quoted
keys, multi-line arrays and strings (skipped), and inline tables (a key inside one is reported at the
line that opens it).
"""

from __future__ import annotations

import re
from typing import Sequence

_BARE = r"[A-Za-z0-9_-]+"
_KEY = rf'(?:{_BARE}|"[^"]*"|\'[^\']*\')'
_DOTTED = rf"{_KEY}(?:\s*\.\s*{_KEY})*"
_HEADER = re.compile(rf"^\s*\[\[?\s*({_DOTTED})\s*\]\]?")
_ASSIGN = re.compile(rf"^\s*({_DOTTED})\s*=")
_PART = re.compile(_KEY)


def _parts(dotted: str) -> tuple[str, ...]:
    return tuple(p.strip("\"'") for p in _PART.findall(dotted))


def key_lines(text: str) -> list[tuple[tuple[str, ...], int]]:
    """Every table header and key of ``text`` as ``(full dotted path, 1-based line)``, in file order.

    Lines inside a multi-line string or array continue the value above them and are not keys.
    """
    found: list[tuple[tuple[str, ...], int]] = []
    table: tuple[str, ...] = ()
    quote: str | None = None  # the open multi-line string's delimiter
    depth = 0  # open brackets of a multi-line array
    for number, line in enumerate(text.splitlines(), 1):
        if quote is not None:
            if line.count(quote) % 2:
                quote = None
            continue
        if depth == 0:
            header = _HEADER.match(line)
            assign = None if header else _ASSIGN.match(line)
            if header:
                table = _parts(header.group(1))
                found.append((table, number))
            elif assign:
                found.append((table + _parts(assign.group(1)), number))
        body = line.split("=", 1)[1] if depth == 0 and _ASSIGN.match(line) else line
        for delim in ('"""', "'''"):
            if body.count(delim) % 2:
                quote = delim
                break
        else:
            # Brackets of a value (not of a header line): strings and comments removed first.
            value = re.sub(r'"[^"]*"|\'[^\']*\'', "", body).split("#", 1)[0]
            if depth or not _HEADER.match(line):
                depth = max(0, depth + value.count("[") - value.count("]"))
    return found


def find_line(text: str, path: Sequence[str]) -> int:
    """The line that writes ``path`` (``("defenses", "t2t", "eta")``), else the nearest enclosing one, else 1.

    A key not written on its own line (inside an inline table, or a table that only its sub-tables
    create) is reported where its closest written ancestor is.
    """
    lines = key_lines(text)
    path = tuple(path)
    for end in range(len(path), 0, -1):
        for found, number in lines:
            if found == path[:end]:
                return number
        for found, number in lines:  # [defenses.t2t.x] creates [defenses.t2t] implicitly
            if found[:end] == path[:end]:
                return number
    return 1


__all__ = ["find_line", "key_lines"]
