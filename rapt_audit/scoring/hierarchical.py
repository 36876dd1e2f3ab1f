"""The hierarchical paired bootstrap behind privacy at matched utility: seeds, then victim records (issue #38).

Every defense of a benchmark sees the same victim records at a seed (the split seed does not depend on the
defense), and its result keeps each record's outcome (``Estimate.per_record``) for utility and every attack.
The comparisons therefore pair: a resample draws the **seeds** with replacement, jointly for every defense,
then, for each drawn seed, the **victim records** with replacement, jointly for every defense, setting and
measure that read those records (records are identified by seed and count: every measure with the same
number of records at a seed is taken to read the same records, as the benchmark's cells do). A record that
is hard for one defense is hard for all in the same resample, so what is common cancels in a difference.

Inside a resample, each drawn seed's frontier is read against **that seed's ceiling** (identity's utility on
the same resampled records), and a defense's reading is the mean of its per-seed readings. It is read from
the defense's **private** settings only: a target between the last private setting and the no-privacy
setting is *not bracketed* (no chord towards sending the text in the clear); a target below every private
setting gives a *lower bound* (the grid stops before it). A resample in which some drawn seed does not reach
the target has no reading.

The verdict at a target gives each candidate its probability of being best (the share of resamples in which
its reading is the highest; ties share; resamples where no candidate reaches the target are left out) and its
95 % rank interval (a reading that did not reach ranks below every one that did). The best defense is the one
with the highest reading on the data; it is established against another when its lead is positive in enough
of the resamples where at least one of the two reaches the target (a joint non-reach is not a tie, it is
left out): one-sided, Holm's step-down over the comparisons with the other candidates at a family-wise 2.5 %
(the two-sided 95 % of every interval here). The no-privacy reference and the local-only baselines are never
candidates.

With few seeds the seed level of any bootstrap under-covers (three seeds hold a seed-dominated mean between their
extremes at most 75 % of the time), so an interval is widened to the Student-t interval over the per-seed values
where that is wider (:func:`interval_with_seeds`), and a lead must also hold in the paired t-test over the seeds
(:func:`seed_t_pvalue`): one seed establishes nothing.

A measure whose per-record parts were not kept is usable only when the run clipped it at 1 (no better than
the attacker's chance guess: content and attribute privacy keep no parts then); it is held at 1 in every
resample, as :mod:`rapt_audit.scoring.worst_case` does. Any other missing part makes the caller fall back to
the unpaired reading (:mod:`rapt_audit.benchmark.matched`), which says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from rapt_audit.api.types import Estimate
from rapt_audit.scoring.metrics import declared

METHOD = "bootstrap-paired-hierarchical"
#: One-sided family-wise level of the best verdict (the two-sided 95 % of every interval).
ALPHA = 0.025
#: How many resampled victim-record draws are summed at once (bounds memory at the paper profile).
_CHUNK = 256

#: A quantity of one run: per-record ``(num, den)`` arrays, or a held value (clipped at 1, no parts kept).
Parts = tuple[np.ndarray, np.ndarray] | float


@dataclass(frozen=True)
class Measure:
    """What one row measures at one seed: ``parts`` → a bounded ratio, the minimum over several for a worst case."""

    parts: tuple[Parts, ...]
    bounded: bool


def run_parts(estimate: Estimate, metric: str) -> Parts | None:
    """An estimate's per-record parts, the held value 1 when it was clipped there, or None (not pairable)."""
    found = estimate.per_record
    if found is not None:
        return np.asarray(found.num, dtype=np.float64), np.asarray(found.den, dtype=np.float64)
    spec = declared(metric)
    if spec is not None and spec.bounded and spec.kind == "privacy" and estimate.value == 1.0:
        return 1.0
    return None


def _ratio(num: np.ndarray, den: np.ndarray, bounded: bool) -> np.ndarray:
    # No weight left (the reference guesser recovers everything): no attacker beats it, privacy 1.
    with np.errstate(divide="ignore", invalid="ignore"):
        value = np.where(den > 0, num / np.where(den > 0, den, 1.0), 1.0)
    return np.clip(value, 0.0, 1.0) if bounded else value


class Resampler:
    """The hierarchical draws of one comparison: seeds, then the records of each drawn seed.

    ``values(measures)`` gives a ``(resamples, seeds)`` array of a row's measure on each resample's drawn seeds
    (NaN where the row lacks that seed), and ``point(measures)`` its ``(seeds,)`` values on the data.
    """

    def __init__(self, seeds: Sequence[int], resamples: int, rng: np.random.Generator) -> None:
        self.seeds = list(seeds)
        self.resamples = resamples
        self.drawn = rng.integers(0, len(self.seeds), size=(resamples, len(self.seeds)))
        self._rng = rng
        self._counts: dict[tuple[int, int], np.ndarray] = {}

    def _record_counts(self, seed_index: int, n: int) -> np.ndarray:
        """How often each of the seed's ``n`` records is drawn, one row per occurrence of the seed in a resample
        (drawn once per seed and record count, then shared by every measure that reads them)."""
        key = (seed_index, n)
        if key not in self._counts:
            occurrences = int((self.drawn == seed_index).sum())
            counts = self._rng.multinomial(n, np.full(n, 1.0 / n), size=occurrences)
            # Kept as bytes (a record drawn 256 times of n is beyond any n here: checked) and widened a chunk at a
            # time: 17 MB a thousand resamples of a paper-profile seed, not 136.
            if counts.max(initial=0) > np.iinfo(np.uint8).max:
                raise ValueError("a record was drawn more than 255 times in one resample")
            self._counts[key] = counts.astype(np.uint8)
        return self._counts[key]

    def values(self, measures: Mapping[int, Measure]) -> np.ndarray:
        out = np.full(self.drawn.shape, np.nan)
        for i, seed in enumerate(self.seeds):
            measure = measures.get(seed)
            where = self.drawn == i
            if measure is None or not where.any():
                continue
            out[where] = self._drawn_values(i, measure)
        return out

    def _drawn_values(self, seed_index: int, measure: Measure) -> np.ndarray:
        per_part = []
        for part in measure.parts:
            if isinstance(part, float):
                per_part.append(np.full(int((self.drawn == seed_index).sum()), part))
                continue
            num, den = part
            counts = self._record_counts(seed_index, num.size)
            # float32 sums (a resample's relative error ~1e-7, far inside any interval) at twice float64's speed.
            parts = np.stack([num, den], axis=1).astype(np.float32)
            chunks = (counts[k:k + _CHUNK].astype(np.float32) @ parts for k in range(0, len(counts), _CHUNK))
            sums = np.concatenate(list(chunks)).astype(np.float64)
            per_part.append(_ratio(sums[:, 0], sums[:, 1], measure.bounded))
        return np.min(per_part, axis=0)

    def point(self, measures: Mapping[int, Measure]) -> np.ndarray:
        out = np.full(len(self.seeds), np.nan)
        for i, seed in enumerate(self.seeds):
            measure = measures.get(seed)
            if measure is None:
                continue
            out[i] = min(float(p) if isinstance(p, float) else
                         float(_ratio(np.array([p[0].sum()]), np.array([p[1].sum()]), measure.bounded)[0])
                         for p in measure.parts)
        return out


# Reading codes, per seed.
NOT_REACHED, INTERPOLATED, MEASURED, LOWER_BOUND = 0, 1, 2, 3


def read_frontier(utility: np.ndarray, privacy: np.ndarray, target: np.ndarray) -> tuple[np.ndarray, ...]:
    """The Pareto frontier of each row of ``(utility, privacy)`` points (last axis: the private settings) read at
    ``target``: ``(privacy, code, above, below)``, NaN and :data:`NOT_REACHED` where no setting reaches the target;
    ``above`` and ``below`` index the settings read from (``below`` is -1 where none was).

    Vectorised form of :func:`rapt_audit.benchmark.matched.at_utility` over private settings: the frontier point
    just above the target is the most private setting at or above it (ties: the higher utility); the one just
    below is the highest-utility setting under the target that is more private than it (ties: the more private);
    the reading interpolates between them, is that setting's privacy when it lies at the target, and a lower
    bound when nothing more private lies under the target. A NaN coordinate leaves its setting out.
    """
    t = target[..., None]
    ok = ~(np.isnan(utility) | np.isnan(privacy))
    above = ok & (utility >= t)
    a = _lexicographic_argmax(above, privacy, utility)
    reached = above.any(axis=-1)
    u_a, p_a = _take(utility, a), _take(privacy, a)
    below = ok & (utility < t) & (privacy > p_a[..., None])
    b = _lexicographic_argmax(below, utility, privacy)
    has_below = below.any(axis=-1)
    u_b, p_b = _take(utility, b), _take(privacy, b)
    at_target = u_a == target
    with np.errstate(divide="ignore", invalid="ignore"):  # rows without a setting below: not used
        weight = (target - u_b) / (u_a - u_b)
        value = np.where(at_target, p_a, np.where(has_below, p_b + weight * (p_a - p_b), p_a))
    code = np.where(at_target, MEASURED, np.where(has_below, INTERPOLATED, LOWER_BOUND))
    return (np.where(reached, value, np.nan), np.where(reached, code, NOT_REACHED), a,
            np.where(has_below & ~at_target, b, -1))


def _lexicographic_argmax(mask: np.ndarray, first: np.ndarray, second: np.ndarray) -> np.ndarray:
    """Per row, the index among ``mask`` with the largest ``first``, ties broken by the largest ``second``."""
    best_first = np.where(mask, first, -np.inf).max(axis=-1, keepdims=True)
    tied = mask & (first == best_first)
    return np.argmax(np.where(tied, second, -np.inf), axis=-1)


def _take(values: np.ndarray, index: np.ndarray) -> np.ndarray:
    return np.take_along_axis(values, index[..., None], -1)[..., 0]


@dataclass(frozen=True)
class Ranking:
    """The candidates at one target: probability of being best and 95 % rank interval, by defense."""

    p_best: dict[str, float]
    ranks: dict[str, tuple[int, int]]
    established: dict[str, bool]
    compared: int
    #: The smallest paired difference between two candidates the comparison would detect with 80 % power at a
    #: two-sided 5 % (before the multiplicity correction): (z₀.₉₇₅ + z₀.₈₀) × the median standard error of the
    #: pairwise differences over resamples where both reached. None with fewer than two such candidates.
    detectable: float | None = None


def rank(draws: Mapping[str, np.ndarray], best: str | None,
         per_seed: Mapping[str, np.ndarray] | None = None) -> Ranking:
    """Probability of being best, rank intervals, and whether ``best``'s lead over each other candidate is
    established (Holm, :data:`ALPHA`, one-sided, over resamples where at least one of the two reached).

    With ``per_seed`` (each candidate's readings at the seeds, on the data), a lead must also hold in the paired
    one-sided t-test over the seeds where both read (:func:`seed_t_pvalue`): resampling three seeds alone covers a
    seed-dominated difference in at most 75 % of samples, so the bootstrap's p-value is never trusted below the
    t-test's (no lead is established from one seed)."""
    names = list(draws)
    if not names:
        return Ranking({}, {}, {}, 0)
    stack = np.vstack([draws[n] for n in names])  # candidates × resamples
    detectable = minimum_detectable(stack)
    filled = np.where(np.isnan(stack), -np.inf, stack)
    any_reached = ~np.all(np.isnan(stack), axis=0)
    top = filled.max(axis=0)
    winners = (filled == top) & any_reached
    share = winners / np.maximum(winners.sum(axis=0), 1)
    compared = int(any_reached.sum())
    p_best = {n: float(share[i].sum() / compared) if compared else 0.0 for i, n in enumerate(names)}
    # Ranks over the resamples where some candidate reached (as P(best)): elsewhere every one would rank first.
    ranks_drawn = (1 + (filled[None, :, :] > filled[:, None, :]).sum(axis=1))[:, any_reached]
    ranks = {n: ((int(np.quantile(ranks_drawn[i], 0.025, method="lower")),
                  int(np.quantile(ranks_drawn[i], 0.975, method="higher"))) if compared else (len(names), len(names)))
             for i, n in enumerate(names)}
    established: dict[str, bool] = {}
    if best is not None and best in names:
        lead = filled[names.index(best)]
        p_values = {}
        for i, other in enumerate(names):
            if other == best:
                continue
            either = any_reached & ~(np.isinf(lead) & np.isinf(filled[i]))
            diff = lead[either] - filled[i][either]
            # One-sided p: the share of informative resamples where the lead is not positive (+1 smoothing, so
            # a finite number of resamples never claims p = 0).
            p_values[other] = (1 + int((diff <= 0).sum())) / (1 + diff.size)
            if per_seed is not None:
                p_values[other] = max(p_values[other], seed_t_pvalue(per_seed[best] - per_seed[other]))
        ordered = sorted(p_values, key=p_values.get)  # type: ignore[arg-type]
        holding = True
        for k, other in enumerate(ordered):
            holding = holding and p_values[other] <= ALPHA / (len(ordered) - k)
            established[other] = holding
    return Ranking(p_best, ranks, established, compared, detectable)


def seed_t_pvalue(differences: np.ndarray) -> float:
    """One-sided p-value that the mean of the per-seed ``differences`` (NaN: not read at that seed) is above 0:
    Student's t with n − 1 degrees of freedom; 1 with fewer than two seeds (one seed cannot show a seed-level
    effect), 0 or 1 when every seed agrees exactly."""
    from scipy import stats as sps  # lazy (scipy)

    d = np.asarray(differences, dtype=np.float64)
    d = d[~np.isnan(d)]
    if d.size < 2:
        return 1.0
    spread = float(np.std(d, ddof=1))
    if spread == 0:
        return 0.0 if d.mean() > 0 else 1.0
    return float(sps.t.sf(d.mean() / (spread / np.sqrt(d.size)), d.size - 1))


def seed_t_interval(values: np.ndarray) -> tuple[float, float] | None:
    """The 95 % Student-t interval of the mean of per-seed ``values`` (NaN left out); None with fewer than two."""
    from scipy import stats as sps  # lazy (scipy)

    v = np.asarray(values, dtype=np.float64)
    v = v[~np.isnan(v)]
    if v.size < 2:
        return None
    half = float(sps.t.ppf(0.975, v.size - 1) * np.std(v, ddof=1) / np.sqrt(v.size))
    return float(v.mean() - half), float(v.mean() + half)


def interval_with_seeds(value: float, draws: np.ndarray, per_seed: np.ndarray) -> Estimate:
    """:func:`interval` widened to the Student-t interval over the per-seed values where that is wider: with few
    seeds the bootstrap's seed level under-covers (three seeds: at most 75 % for a seed-dominated quantity)."""
    found = interval(value, draws)
    t = seed_t_interval(per_seed)
    if t is None:
        return found
    return Estimate(value, min(found.ci_low, t[0]), max(found.ci_high, t[1]), found.n, METHOD + "+seed-t")


#: z₀.₉₇₅ + z₀.₈₀: a two-sided 5 % test has 80 % power against a true difference of this many standard errors.
POWER_80 = 1.959964 + 0.841621


def minimum_detectable(stack: np.ndarray) -> float | None:
    """:attr:`Ranking.detectable` of candidates' resampled readings (candidates × resamples; NaN: not reached).

    A pair counts when both reached in at least half of the resamples; its standard error is the spread of their
    paired difference over those resamples (what pairing cancels is already gone from it)."""
    errors = []
    for i in range(len(stack)):
        for j in range(i + 1, len(stack)):
            both = ~(np.isnan(stack[i]) | np.isnan(stack[j]))
            if both.sum() >= max(2, stack.shape[1] // 2):
                spread = float(np.std(stack[i][both] - stack[j][both], ddof=1))
                if spread > 0:  # identical candidates say nothing of what could be told apart
                    errors.append(spread)
    return POWER_80 * float(np.median(errors)) if errors else None


def interval(value: float, draws: np.ndarray) -> Estimate:
    """``value`` with the 2.5 – 97.5 % quantiles of the resamples that have a reading (its n: how many)."""
    ok = draws[~np.isnan(draws)]
    lo, hi = np.quantile(ok, [0.025, 0.975]) if ok.size else (value, value)
    return Estimate(value, float(min(lo, value)), float(max(hi, value)), int(ok.size), METHOD)


def paired_difference(a: Mapping[int, Measure], b: Mapping[int, Measure], *, seed: int = 0,
                      resamples: int = 2000) -> Estimate:
    """``a − b`` (each: seed → measure, the same seeds) averaged over the seeds, with its hierarchical paired
    95 % interval: the seeds drawn with replacement, then each drawn seed's records, jointly for both."""
    if set(a) != set(b) or not a:
        raise ValueError(f"cannot pair measures at seeds {sorted(a)} with measures at seeds {sorted(b)}")
    resampler = Resampler(sorted(a), resamples, np.random.default_rng(seed))
    draws = (resampler.values(a) - resampler.values(b)).mean(axis=-1)
    per_seed = resampler.point(a) - resampler.point(b)
    return interval_with_seeds(float(per_seed.mean()), draws, per_seed)


__all__ = ["ALPHA", "INTERPOLATED", "LOWER_BOUND", "MEASURED", "METHOD", "Measure", "NOT_REACHED", "POWER_80",
           "Ranking", "Resampler", "interval", "interval_with_seeds", "minimum_detectable", "paired_difference", "rank",
           "read_frontier", "run_parts", "seed_t_interval", "seed_t_pvalue"]
