"""A comparable group's rows as the hierarchical paired bootstrap reads them (:mod:`rapt_audit.scoring.hierarchical`).

Each run of a row is one seed; its measures keep their per-record parts, so two rows measured at the same seed are
resampled on the same records. The benchmark's matched readings (:mod:`rapt_audit.benchmark.paired`) and the
claims (:mod:`rapt_audit.reporting.claims`) read rows through these functions.
"""

from __future__ import annotations

from typing import Callable, Mapping

import numpy as np

from rapt_audit.api.plugins import WORST_CASE
from rapt_audit.api.types import AttackResult, Estimate
from rapt_audit.reporting.summary import Row
from rapt_audit.scoring.hierarchical import Measure, Resampler, interval, run_parts
from rapt_audit.scoring.metrics import declared
from rapt_audit.scoring.worst_case import MEASURE


def seed_of(run: object) -> int:
    """The seed a run of a row used."""
    return int(run.result.config.get("seed", 0))  # type: ignore[attr-defined]


def _measures(row: Row, metric: str, pick: Callable[[object], Estimate | None]) -> dict[int, Measure] | None:
    """Seed → ``pick(run's result)``, a ``metric`` estimate, as a measure; None when a run has none or kept no
    per-record parts."""
    out = {}
    for run in row.runs:
        est = pick(run.result)  # type: ignore[attr-defined]
        parts = None if est is None else run_parts(est, metric)
        if parts is None:
            return None
        out[seed_of(run)] = Measure((parts,), bool(declared(metric) and declared(metric).bounded))
    return out


def utility_measures(row: Row, metric: str) -> dict[int, Measure] | None:
    """Seed → the row's utility ``metric`` as a measure; None when a run kept no per-record parts."""
    return _measures(row, metric, lambda result: result.utility.get(metric))  # type: ignore[attr-defined]


def attack_metric_measures(row: Row, attack: str, metric: str) -> dict[int, Measure] | None:
    """Seed → one of ``attack``'s reported measures (``content_privacy``: the common unit of the inversion
    attacks, whatever their headline) as a measure; None when some run lacks it or kept no per-record parts."""
    def pick(result: object) -> Estimate | None:
        outcome = result.attacks.get(attack)  # type: ignore[attr-defined]
        return outcome.metrics.get(metric) if isinstance(outcome, AttackResult) else None
    return _measures(row, metric, pick)


def privacy_measures(row: Row, attack: str, headline: str) -> dict[int, Measure] | None:
    """Seed → the row's privacy under ``attack`` (its headline; the worst case: the minimum of its attacks'
    content privacy, each from its own parts); None when some run's measure cannot be paired."""
    if attack != WORST_CASE:
        def headline_of(result: object) -> Estimate | None:
            outcome = result.attacks.get(attack)  # type: ignore[attr-defined]
            return outcome.empirical_privacy if isinstance(outcome, AttackResult) else None
        return _measures(row, headline, headline_of)
    out = {}
    for run in row.runs:
        outcome = run.result.attacks.get(attack)
        if not isinstance(outcome, AttackResult):
            return None
        over = outcome.details.get("over") or []
        components = [run.result.attacks.get(name) for name in over]
        if not over or not all(isinstance(c, AttackResult) and MEASURE in c.metrics for c in components):
            return None
        parts = tuple(run_parts(c.metrics[MEASURE], MEASURE) for c in components)  # type: ignore[union-attr]
        if any(p is None for p in parts):
            return None
        spec = declared(MEASURE)
        out[seed_of(run)] = Measure(parts, bool(spec and spec.bounded))  # type: ignore[arg-type]
    return out


