"""Confidence intervals for the numbers rapt-audit reports.

Every reported metric carries a 95 % interval. Per-example success indicators use a percentile
bootstrap over examples (records, not tokens, are the independent units: tokens of one sentence
are correlated, so resampling tokens would give intervals that are too narrow). Proportions over
independent trials may use the Wilson score interval instead.
"""

from __future__ import annotations

import math
from typing import Callable, Sequence

import numpy as np

from rapt_audit.api.types import Estimate, PerRecord
from rapt_audit.scoring.significance import critical_value

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


def wilson(successes: int, trials: int, *, level: float = 0.95) -> Estimate:
    """Wilson score interval for a binomial proportion ``successes / trials``."""
    _check_level(level)
    if trials <= 0 or not 0 <= successes <= trials:
        raise ValueError(f"wilson needs 0 <= successes <= trials and trials > 0, got {successes}/{trials}")

    z = critical_value(level)
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
