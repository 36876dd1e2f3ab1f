"""Every rule that says whether a difference is beyond noise, in one place (issue #64).

The regression gate (:mod:`rapt_audit.reporting.check`), the seed papers' claims
(:mod:`rapt_audit.reporting.claims`) and the benchmark's unpaired matched-utility reading
(:mod:`rapt_audit.benchmark.matched`) all judge differences of estimates; they import their rules from here, so
a rule is stated and changed once.

- **Paired, one run against another over the same records** (the gate): the drop is recomputed on bootstrap
  resamples of the records, the same resampled records for both runs (:func:`paired_drop`); a regression when
  its one-sided lower bound at level Φ(z) exceeds a small tolerance (:func:`compare_paired`).
- **Paired, two rows over the same seeds** (the claims): the hierarchical paired bootstrap of
  :mod:`rapt_audit.scoring.hierarchical` (seeds, then each seed's records, jointly for both rows), its interval
  made to hold the reported value (:func:`paired_interval`).
- **Unpaired, two intervals as independent estimates** (the gate's fallback, the claims' fallback): each standard
  error read off its interval under the normal approximation (:func:`standard_error`), the difference's
  half-width ``z · sqrt(se_a² + se_b²)`` (:func:`unpaired_half_width`); the gate adds a tolerance
  (:func:`compare_estimates`), the claims report the interval (:func:`unpaired_interval`).
- **An interval redrawn** (the matched-utility fallback): a Student t over n seeds with the scale of the
  t-interval it came from, or a normal with the scale of a one-seed interval (:func:`redraw`).

Every critical value comes from :class:`statistics.NormalDist` (or SciPy's t), never a typed-in quantile;
``z = 1.96`` is the gate's documented default (its baselines record it), not a quantile derived here.

May import: :mod:`rapt_audit.api` and :mod:`rapt_audit.scoring` (numpy; SciPy inside the function that needs it).
"""

from __future__ import annotations

import math
import zlib
from statistics import NormalDist
from typing import Mapping, Sequence

import numpy as np

from rapt_audit.api.types import Estimate, PerRecord
from rapt_audit.scoring.hierarchical import Measure, Resampler, paired_difference

#: The gate's noise multiplier (``rapt-audit check --z``): 97.5 % one-sided, the two-sided 95 % of every interval.
DEFAULT_Z = 1.96
#: The unpaired rule's absolute slack added to the allowed drop.
DEFAULT_TOLERANCE = 0.005
#: The paired rule: the drop's lower bound must exceed this to fail (far below any change worth reporting and far
#: above floating-point noise).
DEFAULT_PAIRED_TOLERANCE = 0.001
#: Paired bootstrap resamples of the gate: enough for a stable 2.5 % quantile of the drop.
PAIRED_RESAMPLES = 2000


def seed_of(key: str) -> int:
    """The bootstrap seed of one comparison, from its label, so that a comparison is repeatable."""
    return zlib.crc32(key.encode("utf-8"))


def one_sided_level(z: float) -> float:
    """Φ(z): the one-sided level of a bound ``z`` standard errors out (0.975 for z = 1.96)."""
    return NormalDist().cdf(z)


def critical_value(level: float) -> float:
    """The normal quantile of a two-sided interval at ``level`` (1.959964... at 0.95)."""
    return NormalDist().inv_cdf(0.5 + level / 2)


def standard_error(est: Estimate) -> float:
    """The standard error implied by a two-sided interval at ``est.level`` (normal approximation)."""
    return max(0.0, est.ci_high - est.ci_low) / (2 * critical_value(est.level))


def unpaired_half_width(a: Estimate, b: Estimate, *, z: float = DEFAULT_Z) -> float:
    """Half the width of the interval of ``a − b`` from their two intervals as independent estimates."""
    return z * math.hypot(standard_error(a), standard_error(b))


def unpaired_interval(a: Estimate, b: Estimate, *, z: float = DEFAULT_Z) -> tuple[float, float, float]:
    """``(a − b, low, high)``: the difference with its interval from the two intervals as independent."""
    diff, half = a.value - b.value, unpaired_half_width(a, b, z=z)
    return diff, diff - half, diff + half


def compare_estimates(base: Estimate, new: Estimate, *, higher_is_better: bool, z: float = DEFAULT_Z,
                      tolerance: float = DEFAULT_TOLERANCE) -> tuple[str, float]:
    """``(status, allowed_drop)`` under the gate's unpaired rule: ``"regressed"`` when the drop (how much worse
    ``new`` is) exceeds ``z · sqrt(se_base² + se_new²) + tolerance``, ``"improved"`` when the gain does, else
    ``"ok"``."""
    allowed = unpaired_half_width(base, new, z=z) + tolerance
    worse = (base.value - new.value) if higher_is_better else (new.value - base.value)
    if worse > allowed:
        return "regressed", allowed
    return ("improved" if -worse > allowed else "ok"), allowed


def paired_drop(base: PerRecord, new: PerRecord, *, higher_is_better: bool, z: float = DEFAULT_Z,
                seed: int = 0, resamples: int = PAIRED_RESAMPLES) -> tuple[float, float, float]:
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
    level = one_sided_level(z)
    lower, upper = np.quantile(drops, [1.0 - level, level])
    return drop, float(min(lower, drop)), float(max(upper, drop))


def _weighted(resampler: Resampler, parts: Sequence[tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
    """Resamples in which every run keeps some weight (a record with a positive denominator was drawn)."""
    # The ratio of the indicator "den > 0" to 1 per record is positive exactly when such a record was drawn.
    return np.all([resampler.values({0: Measure((((d > 0).astype(float), np.ones_like(d)),), False)})[:, 0] > 0
                   for _, d in parts], axis=0)


def compare_paired(base: Estimate, new: Estimate, *, higher_is_better: bool, z: float = DEFAULT_Z,
                   tolerance: float = DEFAULT_PAIRED_TOLERANCE, seed: int = 0) -> tuple[str, float]:
    """``(status, lower bound of the drop)`` under the gate's paired rule: ``"regressed"`` when the lower bound
    of the drop (:func:`paired_drop`) exceeds ``tolerance``, ``"improved"`` when its upper bound is below
    ``−tolerance``, else ``"ok"``; ``"records"`` when the runs scored different numbers of records (a weaker
    check, never a wider interval)."""
    assert base.per_record is not None and new.per_record is not None
    if len(base.per_record) != len(new.per_record) or new.n < base.n:
        return "records", math.nan
    _, lower, upper = paired_drop(base.per_record, new.per_record, higher_is_better=higher_is_better, z=z,
                                  seed=seed, resamples=PAIRED_RESAMPLES)
    if lower > tolerance:
        return "regressed", lower
    return ("improved" if upper < -tolerance else "ok"), lower


def paired_interval(a: Mapping[int, Measure], b: Mapping[int, Measure], *, seed: int,
                    value: float | None = None) -> tuple[float, float, float]:
    """``(a − b, low, high)`` (seed → measure, the same seeds) with the hierarchical paired 95 % interval
    (:func:`rapt_audit.scoring.hierarchical.paired_difference`), reported at ``value`` (default: the mean of the
    per-seed differences); the interval always holds the value."""
    found = paired_difference(a, b, seed=seed)
    value = found.value if value is None else value
    return value, min(found.ci_low, value), max(found.ci_high, value)


def redraw(est: Estimate, seeds: int, rng: np.random.Generator, size: int) -> np.ndarray:
    """``size`` draws of an estimate from its interval: a Student t with ``seeds − 1`` degrees of freedom scaled to
    its t-interval over ``seeds`` seeds, or, for one seed, a normal scaled to its interval (the standard error of
    :func:`standard_error`)."""
    half = (est.ci_high - est.ci_low) / 2.0
    if seeds > 1:
        from scipy import stats as sps  # lazy (scipy)

        return est.value + half / float(sps.t.ppf(0.5 + est.level / 2, seeds - 1)) * rng.standard_t(seeds - 1, size)
    return est.value + standard_error(est) * rng.standard_normal(size)


__all__ = ["DEFAULT_PAIRED_TOLERANCE", "DEFAULT_TOLERANCE", "DEFAULT_Z", "PAIRED_RESAMPLES", "compare_estimates",
           "compare_paired", "critical_value", "one_sided_level", "paired_drop", "paired_interval", "redraw", "seed_of",
           "standard_error", "unpaired_half_width", "unpaired_interval"]
