"""Registered metrics: every number in a result has a declared kind and direction.

Reports, the Pareto frontier and the regression gate read these declarations; they never guess
whether a bigger number is better.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping

from rapt_audit.api.registry import Registry
from rapt_audit.api.types import Estimate


@dataclass(frozen=True)
class Metric:
    """What a metric name means.

    Attributes:
        kind: ``"privacy"`` (empirical privacy, from the defender's side), ``"attack"`` (an attack's
            success; higher means more leakage) or ``"utility"`` (task quality).
        higher_is_better: Direction from the defender's point of view.
        bounded: Whether the metric lies in [0, 1].
        description: One line shown in reports.
    """

    kind: str
    higher_is_better: bool
    bounded: bool
    description: str


METRICS: Registry[Metric] = Registry("metric")


def metric(name: str, kind: str, higher_is_better: bool, description: str, *, bounded: bool = True) -> None:
    """Declare a metric (plugins declare the metrics they introduce the same way), exactly once.

    Raises:
        ValueError: for an unknown ``kind``.
        UsageError: when ``name`` is already declared (each metric has one declaration, next to the
            code that computes it).
    """
    if kind not in {"privacy", "attack", "utility"}:
        raise ValueError(f"metric kind must be privacy, attack or utility, got {kind!r}")
    METRICS.add(name, Metric(kind, higher_is_better, bounded, description))


def declared(name: str) -> Metric | None:
    """The declaration of ``name``, or of its base for a per-variant name (``attribute_accuracy.gender``)."""
    for candidate in (name, name.split(".", 1)[0]):
        if candidate in METRICS:
            return METRICS.get(candidate)
    return None


def arrow(name: str) -> str:
    """``↑`` when higher is better for the defender, ``↓`` when lower is (an error such as ``embedding_mse``),
    ``''`` for a metric nobody declared."""
    found = declared(name)
    return "" if found is None else "↑" if found.higher_is_better else "↓"


def headline_metric(metrics: Mapping[str, Estimate], headline: Estimate) -> str:
    """Which declared measure an attack's headline ``empirical_privacy`` is.

    It is ``empirical_privacy`` (1 − attack success, in [0, 1]) unless the attack also reports the
    headline under a privacy metric of its own: ``ae_inversion``'s headline is its
    ``reconstruction_mse``, an error declared unbounded, an attribute attack's its chance-normalised
    ``attribute_privacy.<attr>`` (listed before its ``paper_privacy.<attr>``, the first match wins), and
    reports label them so.
    """
    for name, est in metrics.items():
        found = declared(name)
        if found is not None and found.kind == "privacy" and name != "empirical_privacy" and est == headline:
            return name
    return "empirical_privacy"


def range_problem(name: str, est: Estimate) -> str | None:
    """Why the estimate ``est`` of metric ``name`` breaks its declaration (undeclared, not finite, outside
    [0, 1] for a bounded metric), or ``None`` when it keeps it."""
    found = declared(name)
    if found is None:
        return (f"every metric must be declared, got the undeclared {name!r} (declare it once with "
                "rapt_audit.plugin.metric(name, kind, higher_is_better, description, bounded=...) in the "
                "module that computes it)")
    numbers = (est.value, est.ci_low, est.ci_high)
    if not all(math.isfinite(v) for v in numbers):
        return f"{name} must be finite, got {est.value} [{est.ci_low}, {est.ci_high}]"
    if found.bounded and not all(-1e-9 <= v <= 1 + 1e-9 for v in numbers):
        return (f"{name} must lie in [0, 1] ({found.description}), got {est.value:g} "
                f"[{est.ci_low:g}, {est.ci_high:g}]")
    return None


metric("empirical_privacy", "privacy", True, "1 - attack success (RAPT Sec. IV-A)")
metric("accuracy", "utility", True, "task accuracy on privatized victim-test data")
metric("macro_f1", "utility", True, "task macro-F1 on privatized victim-test data")
metric("auc", "utility", True, "area under the ROC curve of the task classifier (macro one-vs-rest if >2 classes)")
metric("token_accuracy", "attack", False, "fraction of original tokens the attacker recovers (top-1)")
metric("attribute_accuracy", "attack", False, "accuracy of the attacker's private-attribute guesses")
metric("majority_baseline", "attack", False, "accuracy of always guessing the attacker's most common value")
