"""Confidence intervals for the numbers rapt-audit reports.

Every reported metric carries a 95 % interval. Per-example success indicators use a percentile
bootstrap over examples (records, not tokens, are the independent units: tokens of one sentence
are correlated, so resampling tokens would give intervals that are too narrow). Proportions over
independent trials may use the Wilson score interval instead.
"""

from __future__ import annotations

import math
from statistics import NormalDist
from typing import Callable, Sequence

import numpy as np

from rapt_audit.api.types import Estimate, PerRecord
from rapt_audit.scoring.hierarchical import Measure, Resampler

#: Bootstrap resamples used unless a caller asks otherwise (enough for stable 2.5/97.5 percentiles).
DEFAULT_RESAMPLES = 1000


def _check_level(level: float) -> None:
    if not 0.0 < level < 1.0:
        raise ValueError(f"confidence level must lie in (0, 1), got {level}")


def bootstrap_mean(values: Sequence[float] | np.ndarray, *, rng: np.random.Generator,
                   weights: Sequence[float] | np.ndarray | None = None,
                   resamples: int = DEFAULT_RESAMPLES, level: float = 0.95) -> Estimate:
    """Mean of per-unit ``values`` (weighted by ``weights``) with a percentile-bootstrap interval.

    With ``weights`` this is a ratio estimator: e.g. per-sentence counts of correct tokens as
    ``values * weights`` and token counts as ``weights`` give token accuracy with sentences as the
    resampled unit. The estimate keeps those per-unit parts (``Estimate.per_record``) so that two runs
    over the same records can be compared paired.

    Args:
        values: One number per independent unit (per record).
        rng: Generator for the resampling.
        weights: Optional non-negative weight per unit (default: equal weights).
        resamples: Number of bootstrap resamples.
        level: Confidence level.

    Raises:
        ValueError: on an empty input, non-finite values, or weights that sum to zero.
    """
    _check_level(level)
    x = np.asarray(values, dtype=np.float64)
    if x.ndim != 1 or x.size == 0:
        raise ValueError("bootstrap_mean needs a non-empty 1-D sequence of values")
    if not np.all(np.isfinite(x)):
        raise ValueError("bootstrap_mean got non-finite values")
    w = np.ones_like(x) if weights is None else np.asarray(weights, dtype=np.float64)
    if w.shape != x.shape or np.any(w < 0) or w.sum() <= 0:
        raise ValueError("weights must be non-negative, match the values, and not all be zero")
    point = float(np.dot(x, w) / w.sum())
    idx = rng.integers(0, x.size, size=(resamples, x.size))
    ws = w[idx]
    totals = ws.sum(axis=1)
    # A resample whose weights are all zero has no defined mean; it carries no information.
    ok = totals > 0
    means = (x[idx] * ws).sum(axis=1)[ok] / totals[ok]
    alpha = (1.0 - level) / 2.0
    low, high = np.quantile(means, [alpha, 1.0 - alpha]) if means.size else (point, point)
    # Percentile intervals can exclude the point estimate on tiny, skewed samples; widen to keep it.
    return Estimate(point, float(min(low, point)), float(max(high, point)), int(x.size),
                    "bootstrap-percentile", level, PerRecord(tuple((x * w).tolist()), tuple(w.tolist())))


def bootstrap_statistic(n_units: int, statistic: Callable[[np.ndarray], float], *, rng: np.random.Generator,
                        resamples: int = DEFAULT_RESAMPLES, level: float = 0.95) -> Estimate:
    """Percentile-bootstrap interval of any statistic of resampled unit indices.

    ``statistic(idx)`` receives an index array into the ``n_units`` units (the identity order for
    the point estimate) and returns a float; use this for F1 and other non-additive metrics.
    """
    _check_level(level)
    if n_units <= 0:
        raise ValueError("bootstrap_statistic needs at least one unit")
    point = float(statistic(np.arange(n_units)))
    draws = np.array([statistic(rng.integers(0, n_units, size=n_units)) for _ in range(resamples)])
    draws = draws[np.isfinite(draws)]
    alpha = (1.0 - level) / 2.0
    low, high = np.quantile(draws, [alpha, 1.0 - alpha]) if draws.size else (point, point)
    return Estimate(point, float(min(low, point)), float(max(high, point)), n_units, "bootstrap-percentile", level)


def paired_drop(base: PerRecord, new: PerRecord, *, higher_is_better: bool, z: float = 1.96,
                seed: int = 0, resamples: int = 2000) -> tuple[float, float, float]:
    """``(drop, lower, upper)``: how much worse ``new`` is than ``base``, with one-sided paired bounds.

    For two ratio estimates over the same records in the same order (``Estimate.per_record`` of two
    runs of one configuration); the regression gate's paired rule.

    Both runs are resampled on the *same* bootstrap draws of the records — the hierarchical paired bootstrap
    of :mod:`rapt_audit.scoring.hierarchical` at one seed, the one implementation the benchmark's readings and
    the claims use too — so what the records have in common cancels and only the records whose outcome
    changed move the drop. ``lower`` and ``upper`` are the ``1 − Φ(z)`` and ``Φ(z)`` quantiles of the
    resampled drop; a resample in which either run has no weight left has no drop and is left out.

    Raises:
        ValueError: when the two runs hold different numbers of records (not pairable).
    """

    if len(base) != len(new):
        raise ValueError(f"cannot pair {len(new)} records with the baseline's {len(base)}")
    sign = 1.0 if higher_is_better else -1.0
    drop = sign * (base.value - new.value)
    if len(base) == 0:
        return drop, drop, drop
    parts = [(np.asarray(p.num, dtype=np.float64), np.asarray(p.den, dtype=np.float64)) for p in (base, new)]
    resampler = Resampler([0], resamples, np.random.default_rng(seed))
    drawn = [resampler.values({0: Measure((p,), False)})[:, 0] for p in parts]
    # A resample with no weight in a run has no value there (the ratio reads 1 by convention): left out.
    ok = np.ones(resamples, dtype=bool) if all(np.all(d > 0) for _, d in parts) else _weighted(resampler, parts)
    drops = sign * (drawn[0] - drawn[1])[ok]
    if drops.size == 0:
        return drop, drop, drop
    level = NormalDist().cdf(z)
    lower, upper = np.quantile(drops, [1.0 - level, level])
    return drop, float(min(lower, drop)), float(max(upper, drop))


def _weighted(resampler: Resampler, parts: Sequence[tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
    """Resamples in which every run keeps some weight (a record with a positive denominator was drawn)."""
    # The ratio of the indicator "den > 0" to 1 per record is positive exactly when such a record was drawn.
    return np.all([resampler.values({0: Measure((((d > 0).astype(float), np.ones_like(d)),), False)})[:, 0] > 0
                   for _, d in parts], axis=0)


def wilson(successes: int, trials: int, *, level: float = 0.95) -> Estimate:
    """Wilson score interval for a binomial proportion ``successes / trials``."""
    _check_level(level)
    if trials <= 0 or not 0 <= successes <= trials:
        raise ValueError(f"wilson needs 0 <= successes <= trials and trials > 0, got {successes}/{trials}")

    z = NormalDist().inv_cdf(0.5 + level / 2.0)
    p = successes / trials
    denom = 1.0 + z * z / trials
    centre = (p + z * z / (2 * trials)) / denom
    half = z * math.sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials)) / denom
    return Estimate(p, max(0.0, min(p, centre - half)), min(1.0, max(p, centre + half)), trials, "wilson", level)


def seed_summary(estimates: Sequence[Estimate], *, level: float = 0.95,
                 bounds: tuple[float, float] | None = None) -> Estimate:
    """Combine one estimate per seed into a mean with a t-interval across seeds.

    With a single seed the estimate is returned unchanged (its own interval is the only one).
    ``bounds`` clips the interval to a metric's range: with two or three seeds a t-interval of an
    accuracy can reach past 1, a value the metric cannot take (the mean is never moved).
    """
    if not estimates:
        raise ValueError("seed_summary needs at least one estimate")
    if len(estimates) == 1:
        return estimates[0]
    from scipy import stats as sps  # lazy (scipy)

    values = np.array([e.value for e in estimates])
    mean = float(values.mean())
    half = float(sps.t.ppf(0.5 + level / 2, len(values) - 1) * values.std(ddof=1) / math.sqrt(len(values)))
    low, high = mean - half, mean + half
    if bounds is not None:
        low, high = max(low, min(bounds[0], mean)), min(high, max(bounds[1], mean))
    return Estimate(mean, low, high, len(values), f"t-over-{len(values)}-seeds", level)
