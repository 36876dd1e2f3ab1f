"""Registered metrics: every number in a result has a declared kind and direction.

Reports, the Pareto frontier and the regression gate read these declarations; they never guess
whether a bigger number is better.
"""

from __future__ import annotations

from dataclasses import dataclass

from rapt_audit.api.registry import Registry


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


metric("empirical_privacy", "privacy", True,
       "1 - attack success (RAPT Sec. IV-A); for MSE attacks, the reconstruction MSE", bounded=False)
metric("accuracy", "utility", True, "task accuracy on privatized victim-test data")
metric("macro_f1", "utility", True, "task macro-F1 on privatized victim-test data")
metric("auc", "utility", True, "area under the ROC curve of the task classifier (macro one-vs-rest if >2 classes)")
metric("token_accuracy", "attack", False, "fraction of original tokens the attacker recovers (top-1)")
metric("attribute_accuracy", "attack", False, "accuracy of the attacker's private-attribute guesses")
metric("majority_baseline", "attack", False, "accuracy of always guessing the attacker's most common value")
