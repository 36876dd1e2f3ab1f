"""Small fake plugins the plugin tests share: an attack of texts that keeps every rule, attacks that each break
one rule of the attack contract, and estimates."""

from __future__ import annotations

import sys
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import pytest

from rapt_audit.api.params import CheckedParams
from rapt_audit.api.types import AttackResult, Estimate


#: The defense author's guide, whose complete examples the tests run as printed.
GUIDE = Path(__file__).resolve().parents[1] / "docs" / "writing-a-defense.md"


def guide_module(monkeypatch: pytest.MonkeyPatch, heading: str, name: str) -> types.ModuleType:
    """The first Python block after ``heading`` in the defense guide, run as written, as the module ``name`` (in
    ``sys.modules`` for the test, as an installed plugin's module is): what the guide shows is what is tested."""
    text = GUIDE.read_text(encoding="utf-8")
    section = text[text.index(heading):]
    start = section.index("```python\n") + len("```python\n")
    module = types.ModuleType(name)
    monkeypatch.setitem(sys.modules, name, module)
    exec(compile(section[start:section.index("```\n", start)], str(GUIDE), "exec"), module.__dict__)
    return module


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
