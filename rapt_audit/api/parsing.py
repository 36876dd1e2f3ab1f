"""Text from the user turned into values, one way everywhere: numbers, seeds, TOML/JSON files, repeats.

* **Numbers** (:func:`parse_float`, :func:`to_float`): every ``--set``, ``--sweep``, config file, benchmark
  grid and plugin built in Python reads a float here. Infinity is a setting that voids privacy (η = ∞
  releases every word unchanged), so it is accepted only when spelled as such: ``inf``, ``infinity`` or
  ``∞`` (any case, with an optional sign; TOML's ``inf`` literal and Python's ``math.inf`` count as
  spelled). A finite-looking value too large for a float (``1e309``, ``10**400``) is refused, not read as
  infinity, and so is a non-zero value too small for one (``1e-400``, which would read as 0).
* **Seeds** (:func:`check_seed`): whole numbers from 0 to 2**32 - 1, the range every seeded library
  (numpy, torch, scikit-learn) accepts.
* **Files** (:func:`decode_text`, :func:`loads_toml`, :func:`loads_json`): UTF-8 with or without a byte-order
  mark; an undecodable byte is named at its line and column; a float literal that overflows is named at its line.
* **Repeats** (:func:`repeated`): the items given more than once, in one pass.
"""

from __future__ import annotations

import json
import math
import numbers
import re
import sys
from collections import Counter
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


class TextDecodeError(UsageError):
    """Bytes that are not UTF-8: ``SOURCE:LINE:COLUMN: detail`` (1-based; the column counts characters)."""

    def __init__(self, source: str, line: int, column: int, detail: str) -> None:
        super().__init__(f"{source}:{line}:{column}: {detail}")
        self.line, self.column, self.detail = line, column, detail


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
    return FloatRangeError(f"line {line}: {_out_of_range(literal, value)}", literal=literal, line=line)


def loads_toml(text: str) -> dict[str, Any]:
    """``tomllib.loads`` with :func:`parse_float`'s rule for float literals.

    Raises:
        tomllib.TOMLDecodeError: for a syntax error.
        FloatRangeError: for a float literal out of range, with its ``line``.
    """
    try:
        return tomllib.loads(text, parse_float=_file_float)
    except _Overflow as exc:
        raise _overflow_error(text, exc.literal) from None


def loads_json(text: str) -> Any:
    """``json.loads`` with :func:`parse_float`'s rule for numbers (``Infinity`` counts as spelled).

    Raises:
        ValueError: for invalid JSON.
        FloatRangeError: for a number out of range, with its ``line``.
    """
    try:
        return json.loads(text, parse_float=_file_float)
    except _Overflow as exc:
        raise _overflow_error(text, exc.literal) from None


def repeated(items: Iterable[Hashable]) -> list[Any]:
    """The items that occur more than once, each once, in order of first occurrence (one pass: a Counter)."""
    counts = Counter(items)
    return [item for item, n in counts.items() if n > 1]


TOMLDecodeError = tomllib.TOMLDecodeError

__all__ = ["FloatRangeError", "INFINITY_SPELLINGS", "MAX_SEED", "TOMLDecodeError", "TextDecodeError", "check_seed",
           "decode_text", "loads_json", "loads_toml", "parse_float", "repeated", "to_float"]
