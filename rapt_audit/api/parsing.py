"""Text from the user turned into values, one way everywhere: numbers, seeds, TOML/JSON files, repeats.

* **Numbers** (:func:`parse_float`, :func:`to_float`): every ``--set``, ``--sweep``, config file, benchmark
  grid and plugin built in Python reads a float here. Infinity is a setting that voids privacy (η = ∞
  releases every word unchanged), so it is accepted only when spelled as such: ``inf``, ``infinity`` or
  ``∞`` (any case, with an optional sign; TOML's ``inf`` literal and Python's ``math.inf`` count as
  spelled). A finite-looking value too large for a float (``1e309``, ``10**400``) is refused, not read as
  infinity, and so is a non-zero value too small for one (``1e-400``, which would read as 0).
* **Seeds** (:func:`check_seed`): whole numbers from 0 to 2**32 - 1, the range every seeded library
  (numpy, torch, scikit-learn) accepts.
* **Files** (:func:`read_document`, the one reader of every TOML and JSON file the tool takes, over
  :func:`decode_text`, :func:`loads_toml`, :func:`loads_json`): UTF-8 with or without a byte-order mark; an
  undecodable byte is named at its line and column; a number too large for a float (a float literal, or an
  integer of hundreds of digits that a report would fail to format) is named at its line. Only a regular file is
  opened (a FIFO would wait forever for a writer), of at most :data:`MAX_FILE_BYTES`, nesting lists and tables at
  most :data:`MAX_DEPTH` deep (Python's parsers recurse once a level, and so do the checks after them).
* **Repeats** (:func:`repeated`): the items given more than once, in one pass.
"""

from __future__ import annotations

import json
import math
import numbers
import os
import re
import stat
import sys
from collections import Counter
from pathlib import Path
from typing import Any, Hashable, Iterable

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: the same parser from PyPI
    import tomli as tomllib

from rapt_audit.api.errors import UsageError

#: The spellings of infinity (compared case-insensitively, after an optional sign).
INFINITY_SPELLINGS = ("inf", "infinity", "∞")
#: The largest seed: 2**32 - 1.
MAX_SEED = 2**32 - 1
#: The largest TOML or JSON file read (result files of the paper's profile are a few MB).
MAX_FILE_BYTES = 512 * 2**20
#: The deepest nesting of lists and tables read (result files nest about 10 deep).
MAX_DEPTH = 100
#: A non-zero digit before the exponent: a literal that reads as 0.0 although it is not zero.
_NONZERO = re.compile(r"^[+-]?[0-9_]*\.?[0-9_]*[1-9]")


class FloatRangeError(UsageError):
    """A number too large (or too small) for a float. ``line`` is set for a literal of a file (else 0)."""

    def __init__(self, message: str, *, literal: str = "", line: int = 0) -> None:
        super().__init__(message)
        self.literal, self.line = literal, line


def _out_of_range(what: str, value: float) -> str:
    """Why ``what`` (``eta=1e309``) is refused: it reads as infinity (``value`` inf) or as 0."""
    if math.isinf(value):
        return (f"{what} is too large for a float: it would read as infinity (for a privacy parameter such as eta: "
                "no privacy at all); write inf if infinity is meant, else a finite value")
    return f"{what} is too small for a float: it would read as 0; write 0 if zero is meant, else a larger value"


def parse_float(text: str, *, key: str) -> float:
    """``text`` as a float: digits (``75``, ``1e-3``), or infinity spelled ``inf``/``infinity``/``∞``.

    Raises:
        FloatRangeError: for a finite-looking value that overflows to infinity or a non-zero one that
            underflows to 0 (a UsageError).
        UsageError: for text that is not a number.
    """
    stripped = text.strip()
    lowered = stripped.lower()
    unsigned = lowered[1:] if lowered[:1] in ("+", "-") else lowered
    if unsigned in INFINITY_SPELLINGS:
        return -math.inf if lowered.startswith("-") else math.inf
    try:
        value = float(lowered)
    except ValueError:
        raise UsageError(f"{key}={text!r} is not a number (use digits, or inf)") from None
    if math.isinf(value) or (value == 0.0 and _NONZERO.match(lowered)):
        raise FloatRangeError(_out_of_range(f"{key}={stripped}", value), literal=stripped)
    return value


def to_float(value: Any, *, key: str) -> float:
    """A real number (an int of any size, a numpy scalar) as a float, refusing an int too large for one.

    Raises:
        FloatRangeError: for an integer beyond the float range (``10**400``).
    """
    try:
        return float(value)
    except OverflowError:
        size = f"an integer of {value.bit_length()} bits" if isinstance(value, int) else type(value).__name__
        raise FloatRangeError(_out_of_range(f"{key} ({size})", math.inf)) from None


def check_seed(value: Any, *, key: str = "seed") -> int:
    """``value`` as a seed: a whole number from 0 to :data:`MAX_SEED` (``"7"`` and ``7.0`` are 7).

    Raises:
        UsageError: naming ``key`` and the range.
    """
    seed = value
    if isinstance(value, str):
        try:
            seed = int(value.strip())
        except ValueError:
            seed = None
    elif isinstance(value, float) and value.is_integer():
        seed = int(value)
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or not 0 <= seed <= MAX_SEED:
        raise UsageError(f"{key}={value!r} is not a seed: use a whole number from 0 to {MAX_SEED} (2**32 - 1)")
    return int(seed)


class DocumentError(UsageError):
    """A TOML or JSON file that cannot be taken: ``SOURCE: detail``, or ``SOURCE:LINE:COLUMN: detail`` where the
    problem has a place (``line`` and ``column`` are 0 when it has none)."""

    def __init__(self, source: str, detail: str, *, line: int = 0, column: int = 0) -> None:
        place = "".join(f":{n}" for n in (line, column) if n)
        super().__init__(f"{source}{place}: {detail}")
        self.source, self.line, self.column, self.detail = source, line, column, detail


class TextDecodeError(DocumentError):
    """Bytes that are not UTF-8: ``SOURCE:LINE:COLUMN: detail`` (1-based; the column counts characters)."""

    def __init__(self, source: str, line: int, column: int, detail: str) -> None:
        super().__init__(source, detail, line=line, column=column)


def decode_text(data: bytes, *, source: str) -> str:
    """UTF-8 ``data`` as text, a leading byte-order mark dropped.

    Raises:
        TextDecodeError: for an undecodable byte, at its line and column.
    """
    bom = 3 if data.startswith(b"\xef\xbb\xbf") else 0
    try:
        return data[bom:].decode("utf-8")
    except UnicodeDecodeError as exc:
        start = bom + exc.start
        line = data.count(b"\n", 0, start) + 1
        begin = max(data.rfind(b"\n", 0, start) + 1, bom)
        column = len(data[begin:start].decode("utf-8", errors="replace")) + 1
        raise TextDecodeError(source, line, column, f"not UTF-8 text (byte 0x{data[start]:02x}: {exc.reason}); "
                                                    "save the file as UTF-8") from None


class _Overflow(ValueError):
    def __init__(self, literal: str) -> None:
        super().__init__(literal)
        self.literal = literal


def _file_float(literal: str) -> float:
    """A float literal of a TOML or JSON file (``parse_float``): as :func:`parse_float`, else :class:`_Overflow`."""
    try:
        return parse_float(literal, key="")
    except FloatRangeError:
        raise _Overflow(literal) from None


def _file_int(literal: str) -> int:
    """An integer literal of a JSON file: as ``int``, else :class:`_Overflow` when a float cannot hold it (every
    number of a result is formatted as a float) or Python refuses its length (over 4,300 digits)."""
    if len(literal) > 300 and math.isinf(float(literal)):
        raise _Overflow(literal)
    return int(literal)


def _literal_line(text: str, literal: str) -> int:
    """The first line of ``text`` where ``literal`` stands as a value (outside a comment), else 1."""
    pattern = re.compile(rf"(?<![\w.+-]){re.escape(literal)}(?![\w.])")
    for number, line in enumerate(text.splitlines(), 1):
        if pattern.search(line.split("#", 1)[0]):
            return number
    return 1


def _overflow_error(text: str, literal: str) -> FloatRangeError:
    """The error for a float literal of a file that is out of range, at its line."""
    line = _literal_line(text, literal)
    value = float(literal.replace("_", ""))  # infinity, or 0 for a literal that underflows
    shown = literal if len(literal) <= 40 else f"{literal[:12]}… (a number of {len(literal)} characters)"
    return FloatRangeError(f"line {line}: {_out_of_range(shown, value)}", literal=literal, line=line)


def _huge_toml_int(text: str) -> FloatRangeError | None:
    """The error for the first integer literal of a TOML text too large for a float, else None (``tomllib`` has no
    integer hook; past 4,300 digits it raises a plain ValueError instead of reading one)."""
    for number in re.finditer(r"(?<![\w.])[+-]?[0-9][0-9_]{300,}(?![\w.])", text):
        literal = number.group(0)
        if math.isinf(float(literal.replace("_", ""))):
            return _overflow_error(text, literal)
    return None


def loads_toml(text: str) -> dict[str, Any]:
    """``tomllib.loads`` with :func:`parse_float`'s rule for float literals.

    Raises:
        tomllib.TOMLDecodeError: for a syntax error.
        FloatRangeError: for a float literal out of range, with its ``line``.
    """
    try:
        data = tomllib.loads(text, parse_float=_file_float)
    except _Overflow as exc:
        raise _overflow_error(text, exc.literal) from None
    except ValueError as exc:
        huge = None if isinstance(exc, tomllib.TOMLDecodeError) else _huge_toml_int(text)
        if huge is None:
            raise
        raise huge from None
    huge = _huge_toml_int(text) if _holds_huge_int(data) else None
    if huge is not None:
        raise huge
    return data


def _holds_huge_int(data: Any) -> bool:
    """Whether ``data`` holds an integer too large for a float (iteratively, as :func:`_depth_over`)."""
    stack = [data]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, int) and item.bit_length() > 1023:
            try:
                float(item)
            except OverflowError:
                return True
    return False


def loads_json(text: str) -> Any:
    """``json.loads`` with :func:`parse_float`'s rule for numbers (``Infinity`` counts as spelled).

    Raises:
        ValueError: for invalid JSON.
        FloatRangeError: for a number out of range, with its ``line``.
    """
    try:
        return json.loads(text, parse_float=_file_float, parse_int=_file_int)
    except _Overflow as exc:
        raise _overflow_error(text, exc.literal) from None


def _depth_over(data: Any, limit: int) -> bool:
    """Whether ``data`` nests lists and tables more than ``limit`` deep (iteratively: no recursion to run out of)."""
    stack = [(data, 1)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        if children is None:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return False


def _regular_bytes(path: Path, source: str) -> bytes:
    """The bytes of ``path``, checked with ``os.stat`` before it is opened: a regular file within the size limit."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise DocumentError(source, "does not exist; check the path") from None
    except OSError as exc:
        raise DocumentError(source, f"cannot be read ({exc.strerror or exc})") from None
    if not stat.S_ISREG(info.st_mode):
        kind = ("a folder" if stat.S_ISDIR(info.st_mode) else "a FIFO" if stat.S_ISFIFO(info.st_mode)
                else "a device" if stat.S_ISCHR(info.st_mode) or stat.S_ISBLK(info.st_mode) else "a special file")
        raise DocumentError(source, f"is not a regular file ({kind}); give the path of a TOML or JSON file")
    if info.st_size > MAX_FILE_BYTES:
        raise DocumentError(source, f"is larger than {MAX_FILE_BYTES // 2**20} MiB ({info.st_size:,} bytes); "
                                    "this is no file rapt-audit wrote or reads: check the path")
    try:
        with open(path, "rb") as handle:
            return handle.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise DocumentError(source, f"cannot be read ({exc.strerror or exc})") from None


def parse_seconds(value: Any, *, key: str, fix: str) -> float:
    """A time limit in seconds: a positive number (``inf``: none), from text or a number.

    Raises:
        UsageError: when it is not a positive number, naming ``key`` and ``fix`` (how to set it).
    """
    seconds = parse_float(value, key=key) if isinstance(value, str) else float(value)
    if not seconds > 0:
        raise UsageError(f"{key}={value!r} must be a positive number of seconds (inf: no limit); {fix}")
    return seconds


def read_document(path: str | os.PathLike[str], *, source: str, fmt: str | None = None) -> tuple[str, Any]:
    """The text of the TOML or JSON file ``path`` and what it holds: the one reader of every such file.

    Args:
        path: The file.
        source: How messages name it (``config file x.toml``, a path).
        fmt: ``"json"`` or ``"toml"``; by default JSON for a ``.json`` name, else TOML.

    Raises:
        DocumentError: for what is not a regular file (refused before it is opened), a file over
            :data:`MAX_FILE_BYTES`, invalid syntax (at its line where the parser names one), or nesting deeper than
            :data:`MAX_DEPTH`; its subclass TextDecodeError for bytes that are not UTF-8.
        FloatRangeError: for a number too large (or too small) for a float, with its ``line``.
    """
    path = Path(path)
    fmt = fmt or ("json" if path.suffix.lower() == ".json" else "toml")
    text = decode_text(_regular_bytes(path, source), source=source)  # a byte-order mark is dropped
    deep = f"nests lists or tables deeper than {MAX_DEPTH} levels; no file rapt-audit reads does: flatten it"
    try:
        data = loads_json(text) if fmt == "json" else loads_toml(text)
    except RecursionError:
        raise DocumentError(source, deep) from None
    except tomllib.TOMLDecodeError as exc:
        found = re.search(r"line (\d+)", str(exc))
        raise DocumentError(source, f"not valid TOML: {exc}; fix the syntax there",
                            line=int(found.group(1)) if found else 0) from None
    except json.JSONDecodeError as exc:
        raise DocumentError(source, f"not valid JSON: {exc}; fix the syntax there", line=exc.lineno) from None
    except FloatRangeError:
        raise
    except ValueError as exc:  # e.g. a JSON integer over Python's 4,300 digits caught by no hook
        raise DocumentError(source, f"not valid {fmt.upper()}: {exc}") from None
    if _depth_over(data, MAX_DEPTH):
        raise DocumentError(source, deep)
    return text, data


def repeated(items: Iterable[Hashable]) -> list[Any]:
    """The items that occur more than once, each once, in order of first occurrence (one pass: a Counter)."""
    counts = Counter(items)
    return [item for item, n in counts.items() if n > 1]


TOMLDecodeError = tomllib.TOMLDecodeError

__all__ = ["DocumentError", "FloatRangeError", "INFINITY_SPELLINGS", "MAX_DEPTH", "MAX_FILE_BYTES", "MAX_SEED",
           "TOMLDecodeError", "TextDecodeError", "check_seed", "decode_text", "loads_json", "loads_toml", "parse_float",
           "parse_seconds", "read_document", "repeated", "to_float"]
