"""Privacy at matched utility: each defense's empirical privacy where its utility is a share of the ceiling.

η and ε mean different things in different mechanisms, so defenses are compared where a user would
choose between them: at the utility they keep. For one comparable group (a benchmark's task), the
ceiling is ``identity``'s utility under the same protocol and the targets are 90 % and 95 % of it
(:data:`FRACTIONS`).

**Paired, wherever the results allow** (every result kept its per-record outcomes, as the runner writes
them): :mod:`rapt_audit.benchmark.paired` — each seed's frontier of a defense's private settings read against
that seed's ceiling, one hierarchical bootstrap over seeds and victim records for every defense at once,
probability of being best and rank intervals. That is the benchmark's reading; what follows is the fallback
for results slimmed of their per-record outcomes (or written before they kept them), and every verdict it
gives ends in "(unpaired)":

- **Reading**: a defense's measured settings (seeds combined) are points (utility, privacy); its
  Pareto frontier (:func:`rapt_audit.reporting.pareto.pareto_front`) is read at the target by linear
  interpolation between the two adjacent frontier settings that bracket it. No setting at or above
  the target: **not reached** (never extrapolated). Every setting above it: the privacy of the most
  private one is a **lower bound** (the grid stops before the target; more noise may keep the utility).
  Interpolating assumes a setting between two measured ones lands between them; monotonicity in η is
  not assumed (the frontier is read over the points, whatever their parameter).
- **Interval**: a parametric bootstrap of the whole chain. Each resample draws the ceiling and every
  setting's utility and privacy from its seed-combined estimate (a Student t with n − 1 degrees of
  freedom scaled to the t-interval over n seeds; one seed: a normal scaled to its record-bootstrap
  interval) and reads the frontiers again; the interval is the 2.5 – 97.5 % quantiles of the readings
  that reached the target, and the share that did is shown when it is under 100 %. One ceiling draw
  serves every defense of a resample, so comparisons are at the same target (and is the reference's
  utility in it). A bounded measure (accuracy, 1 − attack success) is drawn inside [0, 1], as its
  intervals are. A setting's utility and privacy are drawn independently (their correlation across
  seeds is not modelled).
- **Best**: the defense with the highest reading (``identity`` is the reference, not a candidate) when,
  in the resamples, its lead over every other reading has a 2.5 % quantile above 0; otherwise "no
  significant difference" between it and the defenses it does not clear.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from rapt_audit.api.types import Estimate
from rapt_audit.scoring.hierarchical import Ranking
from rapt_audit.benchmark.paired import Margin, Pairing, Reading
from rapt_audit.reporting.figures import pareto_points, pick_utility
from rapt_audit.reporting.pareto import Point, pareto_front
from rapt_audit.reporting.summary import Group, Row, is_local_baseline, is_reference
from rapt_audit.scoring.metrics import declared
from rapt_audit.scoring.significance import redraw

FRACTIONS = (0.90, 0.95)
RESAMPLES = 1000


@dataclass
class Matched:
    """The matched-utility readings of one group: per attack and fraction, each defense's reading and the verdict."""

    group: Group
    utility: str | None
    ceiling: Estimate | None = None
    #: The no-privacy reference whose utility is the ceiling (None without a ceiling).
    reference: str | None = None
    targets: dict[float, Estimate] = field(default_factory=dict)
    readings: dict[str, dict[float, list[Reading]]] = field(default_factory=dict)
    verdicts: dict[str, dict[float, str]] = field(default_factory=dict)
    #: Attack → fraction → the candidates' probability of being best and rank intervals (paired readings only).
    rankings: dict[str, dict[float, Ranking]] = field(default_factory=dict)
    #: Each setting's utility against sending nothing (the local-only baselines; paired results only).
    against_local: list[Margin] = field(default_factory=list)
    #: Attack → whether its readings are paired (:mod:`~rapt_audit.benchmark.paired`) or the unpaired fallback.
    paired: dict[str, bool] = field(default_factory=dict)
    note: str = ""


def at_utility(points: Sequence[Point], target: float) -> tuple[float | None, str, tuple[str, ...]]:
    """The frontier of ``points`` read at utility ``target``: ``(privacy, kind, settings read from)``."""
    if not points or not math.isfinite(target):
        return None, "not reached", ()
    front = [points[i] for i in pareto_front(points)]  # utility ascending, so privacy descending
    reachable = [p for p in front if p.utility >= target]
    if not reachable:
        return None, "not reached", ()
    above = reachable[0]
    below = [p for p in front if p.utility < target]
    if above.utility == target:
        return above.privacy, "measured", (above.label,)
    if not below:
        return above.privacy, "lower bound", (above.label,)
    low = below[-1]
    weight = (target - low.utility) / (above.utility - low.utility)
    return low.privacy + weight * (above.privacy - low.privacy), "interpolated", (low.label, above.label)


def _draws(est: Estimate, seeds: int, rng: np.random.Generator, size: int, metric: str) -> np.ndarray:
    """Resamples of an estimate (:func:`rapt_audit.scoring.significance.redraw`: a t over seeds, the t-interval's
    scale, or a normal for one seed); a metric declared bounded (accuracy, 1 − attack success) stays in [0, 1], as
    its intervals do."""
    drawn = redraw(est, seeds, rng, size)
    found = declared(metric)
    return np.clip(drawn, 0.0, 1.0) if found is not None and found.bounded else drawn


def _verdict(readings: list[Reading], draws: dict[str, np.ndarray]) -> str:
    """The best defense at one target, or the defenses it cannot be told apart from (see the module docstring)."""
    candidates = [r for r in readings if not is_reference(r.defense) and r.value is not None]
    if not candidates:
        return "no defense reaches it"
    best = max(candidates, key=lambda r: r.value.value)  # type: ignore[union-attr]
    if len(candidates) == 1:
        return f"{best.defense} (the only defense that reaches it)"
    ties, bounded = [], []
    for other in candidates:
        if other is best:
            continue
        a, b = draws[best.defense], draws[other.defense]
        # Not reached counts as worse than any reading; a resample where neither reached is left out (not a tie).
        either = ~(np.isnan(a) & np.isnan(b))
        diff = np.where(np.isnan(a), -np.inf, np.where(np.isnan(b), np.inf, a - b))[either]
        if diff.size == 0:
            ties.append(other.defense)
            continue
        if not np.quantile(diff, 0.025, method="lower") > 0:  # no interpolation: the draws hold ±inf
            ties.append(other.defense)
        elif other.kind == "lower bound":
            bounded.append(other.defense)
    if ties:
        return f"no significant difference: {best.defense}, {', '.join(ties)}"
    if bounded:
        return (f"{best.defense} leads; not established against {', '.join(bounded)} (its grid stops above the "
                "target, so its reading is a lower bound)")
    return best.defense


def _by_defense(group: Group) -> dict[str, list[Row]]:
    rows: dict[str, list[Row]] = {}
    for row in group.rows:
        rows.setdefault(row.defense, []).append(row)
    return rows


def matched(group: Group, *, fractions: Sequence[float] = FRACTIONS, resamples: int = RESAMPLES,
            seed: int = 0) -> Matched:
    """Read every defense of ``group`` at each fraction of the ceiling, for every measured attack: paired
    (:mod:`~rapt_audit.benchmark.paired`) where every result kept its per-record outcomes, else the parametric
    bootstrap of this module's docstring (``paired[attack]`` says which)."""
    utility = pick_utility(group)
    out = Matched(group, utility)
    reference = [r for r in group.rows if is_reference(r.defense) and utility in r.utility]
    if utility is None:
        out.note = "no utility was measured, so there is no frontier to read"
        return out
    if not reference:
        out.note = "no row of the no-privacy reference: the no-privacy ceiling is not measured, so no target utility can be set"
        return out
    ceiling_row = max(reference, key=lambda r: r.utility[utility].value)
    out.ceiling, out.reference = ceiling_row.utility[utility], ceiling_row.defense
    rng = np.random.default_rng(seed)
    ceilings = _draws(out.ceiling, len(ceiling_row.seeds), rng, resamples, utility)
    for f in fractions:
        lo, hi = np.quantile(f * ceilings, [0.025, 0.975])
        value = f * out.ceiling.value
        out.targets[f] = Estimate(value, float(min(lo, value)), float(max(hi, value)), out.ceiling.n,
                                  "bootstrap-parametric")
    rows = {d: mine for d, mine in _by_defense(group).items() if not is_local_baseline(d)}
    pairing = Pairing.of(group, utility, ceiling_row, resamples, seed)
    if pairing is not None:
        out.ceiling, out.targets = pairing.ceiling(), {f: pairing.target(f) for f in fractions}
        out.against_local = pairing.against_local()
    for attack in group.measured_attacks:
        out.readings[attack], out.verdicts[attack] = {}, {}
        found = pairing.read(group, attack, rows, fractions) if pairing is not None else None
        out.paired[attack] = found is not None
        if found is None:
            _unpaired(out, attack, rows, ceiling_row, ceilings, rng, resamples, fractions)
            continue
        out.rankings[attack] = {}
        for f, (readings, ranking, said) in found.items():
            out.readings[attack][f], out.rankings[attack][f], out.verdicts[attack][f] = readings, ranking, said
    return out


def _unpaired(out: Matched, attack: str, rows: dict[str, list[Row]], ceiling_row: Row, ceilings: np.ndarray,
              rng: np.random.Generator, resamples: int, fractions: Sequence[float]) -> None:
    """The parametric bootstrap (this module's docstring): each setting redrawn from its seed-combined interval."""
    group, utility = out.group, out.utility
    assert out.ceiling is not None and utility is not None
    sampled: dict[str, tuple[list[Point], list[np.ndarray], list[np.ndarray]]] = {}
    for defense, mine in rows.items():
        # Private settings only (the reference excepted): never a chord towards sending the text in the clear.
        points = [p for p in pareto_points(Group(group.signature, mine), attack, utility)
                  if is_reference(defense) or not p.key.no_privacy]
        rows_of = [p.key for p in points]
        # The ceiling's row is drawn once: its utility in a resample is the ceiling of that resample.
        utilities = [ceilings if r is ceiling_row else _draws(r.utility[utility], len(r.seeds), rng, resamples,
                                                              utility) for r in rows_of]
        privacies = [_draws(r.privacy[attack], len(r.seeds), rng, resamples, group.headline(attack))
                     for r in rows_of]
        sampled[defense] = (points, utilities, privacies)
    for f in fractions:
        readings, draws = [], {}
        for defense, (points, us, ps) in sampled.items():
            # The attack skipped (or failed on) every setting, or ran only where the defense adds no noise
            # (SnD's mutual information declines clipped releases): no frontier to read, not a bound.
            if not points:
                readings.append(Reading(defense, None, "not measured", (), 0.0))
                continue
            value, kind, between = at_utility(points, f * out.ceiling.value)
            draws[defense] = np.array([_resampled(points, us, ps, i, f * ceilings[i]) for i in range(resamples)])
            # The reference has one setting: its privacy is what it is, not a bound on a frontier.
            kind = "reference" if is_reference(defense) and value is not None else kind
            if value is None and any(r.no_privacy and utility in r.utility and r.utility[utility].value
                                     >= f * out.ceiling.value for r in rows[defense]):
                kind = "not bracketed"  # only the no-privacy setting keeps the target
            readings.append(_reading(defense, value, kind, between, draws[defense]))
        out.readings[attack][f] = readings
        out.verdicts[attack][f] = _verdict(readings, draws) + " (unpaired)"


def _resampled(points: Sequence[Point], us: Sequence[np.ndarray], ps: Sequence[np.ndarray], i: int,
               target: float) -> float:
    drawn = [Point(float(u[i]), float(p[i]), pt.label) for pt, u, p in zip(points, us, ps)]
    value, _, _ = at_utility(drawn, target)
    return math.nan if value is None else value


def _reading(defense: str, value: float | None, kind: str, between: tuple[str, ...], draws: np.ndarray) -> Reading:
    ok = draws[~np.isnan(draws)]
    share = ok.size / draws.size if draws.size else 0.0
    if value is None:
        return Reading(defense, None, kind, between, share)
    lo, hi = np.quantile(ok, [0.025, 0.975]) if ok.size else (value, value)
    return Reading(defense, Estimate(value, float(min(lo, value)), float(max(hi, value)), int(ok.size),
                                     "bootstrap-parametric"), kind, between, share)


__all__ = ["FRACTIONS", "Matched", "RESAMPLES", "Reading", "at_utility", "matched"]
