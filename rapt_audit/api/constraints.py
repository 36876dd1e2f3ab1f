"""Declared constraints of plugin parameters: a validator (:class:`Check`), bounds (:class:`Range`), bounds for
each value of a grid (:class:`Each`) and the common declarations built from them.

A parameter declares its rule in its annotation (``hidden: Annotated[int, Range(1)]``); :mod:`.params` applies
every declared rule when a plugin is built and lists them in ``rapt-audit ls --params``. Re-exported from
:mod:`rapt_audit.api.params` and, for plugin authors, :mod:`rapt_audit.plugin`.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from typing import Annotated, Any, Callable

from rapt_audit.api.errors import UsageError



@dataclasses.dataclass(frozen=True)
class Check:
    """Validate with ``fn(value)``, a validator that names the parameter in its own messages.

    ``fn`` returns the value to keep (``check_eta`` returns a float) or raises (a
    :class:`~rapt_audit.api.errors.UsageError`, or ``TypeError`` for a value of the wrong type).
    """

    fn: Callable[[Any], Any]

    def __call__(self, name: str, value: Any) -> Any:
        """The checked value (``name`` is unused: ``fn`` names the parameter itself)."""
        return self.fn(value)

    def describe(self) -> str:
        """The rule in words: the first line of the validator's docstring, else its name."""
        doc = (getattr(self.fn, "__doc__", None) or "").strip()
        return doc.splitlines()[0].rstrip(".") if doc else f"checked by {getattr(self.fn, '__name__', 'a validator')}"


@dataclasses.dataclass(frozen=True)
class Range:
    """A finite real number within bounds; ``None`` leaves a side open-ended.

    Attributes:
        low, high: The bounds, inclusive unless ``low_open`` / ``high_open``.
        note: What the bound means, appended to the message (``"40 in the paper"``).
        error: The error raised; privacy parameters raise
            :class:`~rapt_audit.api.errors.PrivacyParameterError`.
    """

    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    note: str = ""
    error: type[UsageError] = UsageError

    def describe(self) -> str:
        """The rule in words: ``be >= 1``, ``lie in [0, 1)``."""
        if self.low is not None and self.high is not None:
            return f"lie in {'(' if self.low_open else '['}{self.low:g}, {self.high:g}{')' if self.high_open else ']'}"
        if self.low is not None:
            return f"be {'>' if self.low_open else '>='} {self.low:g}"
        if self.high is not None:
            return f"be {'<' if self.high_open else '<='} {self.high:g}"
        return "be finite"

    def __call__(self, name: str, value: Any) -> Any:
        """``value`` unchanged when it satisfies the range, else :attr:`error` naming ``name``."""
        # bool is a numbers.Integral in Python: True must not pass as 1. NaN fails every comparison.
        ok = isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)
        if ok and self.low is not None:
            ok = value > self.low if self.low_open else value >= self.low
        if ok and self.high is not None:
            ok = value < self.high if self.high_open else value <= self.high
        if not ok:
            raise self.error(f"{name} must {self.describe()}{f' ({self.note})' if self.note else ''}, got {value!r}")
        return value


@dataclasses.dataclass(frozen=True)
class Each:
    """A tuple parameter (a grid) of one or more values, each satisfying ``rule``
    (``orders: Annotated[tuple[int, ...], Each(Range(1, 5))] = (2, 3)``)."""

    rule: Range

    def __call__(self, name: str, value: Any) -> tuple[Any, ...]:
        """``value`` as a tuple when it is not empty and every element passes :attr:`rule`, else the rule's error."""
        values = tuple(value) if isinstance(value, (tuple, list)) else (value,)
        if not values:
            raise self.rule.error(f"{name} needs at least one value, each of which must {self.rule.describe()}")
        return tuple(self.rule(name, v) for v in values)

    def describe(self) -> str:
        """The rule in words: ``must hold one or more values, each of which must be >= 1``."""
        return f"must hold one or more values, each of which must {self.rule.describe()}"


#: Common declarations: a count >= 1, a rate > 0, a weight >= 0, a dropout rate in [0, 1).
PositiveInt = Annotated[int, Range(1)]
PositiveFloat = Annotated[float, Range(0, low_open=True)]
NonNegativeFloat = Annotated[float, Range(0)]
Dropout = Annotated[float, Range(0, 1, high_open=True)]


__all__ = ["Check", "Dropout", "Each", "NonNegativeFloat", "PositiveFloat", "PositiveInt", "Range"]
