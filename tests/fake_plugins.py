"""Small fake plugins the plugin tests share: an attack of texts that keeps every rule, attacks that each break
one rule of the attack contract, and estimates."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from rapt_audit.api.params import CheckedParams
from rapt_audit.api.types import AttackResult, Estimate


def estimate(value: float) -> Estimate:
    """An estimate of ``value`` with an interval 0.1 either side (floored at 0), over 10 records."""
    return Estimate(value, max(0.0, value - 0.1), value + 0.1, 10, "test")


@dataclass
class FakeAttack(CheckedParams):
    """A fake attack of texts (empirical privacy 0.5); tests subclass it to break one rule each."""

    requires: ClassVar[frozenset[str]] = frozenset({"texts"})

    def fit(self, aux: Any, defense: Any, *, ctx: Any) -> Any:
        return self

    def attack(self, release: Any, truth: Any, *, ctx: Any) -> Any:
        return AttackResult(estimate(0.5), {})


@dataclass
class ReturnsFloat(FakeAttack):
    """Returns a bare number."""

    def attack(self, release: Any, truth: Any, *, ctx: Any) -> Any:
        return 0.5


@dataclass
class OutOfRange(FakeAttack):
    """An empirical privacy of 1.7 for 1 − attack success."""

    def attack(self, release: Any, truth: Any, *, ctx: Any) -> Any:
        return AttackResult(Estimate(1.7, 1.6, 1.8, 10), {})


@dataclass
class UndeclaredMetric(FakeAttack):
    """Reports a metric nobody declared."""

    def attack(self, release: Any, truth: Any, *, ctx: Any) -> Any:
        return AttackResult(estimate(0.5), {"my_secret_metric": estimate(0.5)})
