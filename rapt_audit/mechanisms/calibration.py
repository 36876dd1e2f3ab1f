"""Calibration: word-replacement probability per η, the η for a target probability, and
plausible deniability.

Equal η is not equal protection across embedding models (RAPT Sec. V-D, Table III), so the suite
compares defenses at equal **word-replacement probability**: the fraction of privatized units whose
released word differs from the input. It is measured on public text (WikiText-2 when a data
directory is configured, else the synthetic demo corpus), never on the data being protected.

:func:`find_eta` searches η for a target probability by bisection on log η with common random
numbers: every evaluation reuses the same seed, and numpy draws Gamma(d, 1/η) as
standard-Gamma / η, so the noise of one evaluation is a rescaling of the next and the measured
probability moves smoothly with η.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from rapt_audit.api.errors import UsageError
from rapt_audit.api.types import Estimate
from rapt_audit.scoring.stats import wilson


@dataclass
class ReplacementCount:
    """How many privatized units changed (the RAPT Table III word-replacement measure).

    Attributes:
        perturbed: Units that went through the mechanism.
        replaced: Perturbed units released as a different unit.
        dropped: Units removed from the release (``unk_policy=drop``).
        passed: Units released as they were without going through the mechanism (PCT2T's words
            outside the selected categories): they are sent in the clear.
        forced: Perturbed units that no candidate of their group equals (a name, a misspelling, a
            word no public list gives that category): at every
            finite η they are released as another word, so they set a floor under the replacement
            probability that no η removes. Counted at finite η only (η = ∞ releases every unit as it was).
        by_category: Category → ``{"perturbed", "replaced", "passed", "forced"}`` counts, where the
            mechanism knows categories (PCT2T and RAPT: POS categories).
    """

    perturbed: int = 0
    replaced: int = 0
    dropped: int = 0
    passed: int = 0
    forced: int = 0
    by_category: dict[str, dict[str, int]] = field(default_factory=dict)

    def add(self, other: ReplacementCount) -> None:
        """Accumulate another count into this one."""
        self.perturbed += other.perturbed
        self.replaced += other.replaced
        self.dropped += other.dropped
        self.passed += other.passed
        self.forced += other.forced
        for category, counts in other.by_category.items():
            self.count_category(category, **counts)

    def count_category(self, category: str, **counts: int) -> None:
        """Add ``counts`` (``perturbed=``, ``replaced=``, ``passed=``, ``forced=``) to ``category``'s counts."""
        mine = self.by_category.setdefault(category, {"perturbed": 0, "replaced": 0, "passed": 0, "forced": 0})
        for key, value in counts.items():
            mine[key] += int(value)

    @property
    def rate(self) -> float:
        """Observed replacement probability (NaN when nothing was perturbed)."""
        return self.replaced / self.perturbed if self.perturbed else math.nan


#: ``counter(eta, rng)`` privatizes a fixed calibration corpus and counts replacements.
Counter = Callable[[float, np.random.Generator], ReplacementCount]

#: RAPT Table III (BERT-base): eta → published word-replacement probability, for reference columns.
RAPT_TABLE_III = {25.0: 0.94, 75.0: 0.85, 125.0: 0.45, 150.0: 0.14, 175.0: 0.05}


@dataclass(frozen=True)
class CalibrationRow:
    """Measured replacement probability at one η, the share of units no η could leave unchanged (forced),
    and the replacement probability of the others (``held``: it falls to 0 as η grows, as T2T's does)."""

    eta: float
    replacement: Estimate
    units: int
    forced: Estimate | None = None
    held: Estimate | None = None

    def to_dict(self) -> dict[str, object]:
        """JSON form."""
        return {"eta": "inf" if math.isinf(self.eta) else self.eta, "replacement": self.replacement.to_dict(),
                "units": self.units, "forced": None if self.forced is None else self.forced.to_dict(),
                "replacement_of_held_units": None if self.held is None else self.held.to_dict(),
                "rapt_table_iii_bert_base": RAPT_TABLE_III.get(self.eta)}


def replacement_probability(counter: Counter, eta: float, *, seed: int) -> CalibrationRow:
    """Replacement probability at ``eta`` with a Wilson interval over privatized units."""
    count = counter(eta, np.random.default_rng(seed))
    if count.perturbed == 0:
        raise UsageError("the calibration corpus produced no privatizable units")
    finite, held = not math.isinf(eta), count.perturbed - count.forced
    return CalibrationRow(eta, wilson(count.replaced, count.perturbed), count.perturbed,
                          wilson(count.forced, count.perturbed) if finite else None,
                          wilson(count.replaced - count.forced, held) if finite and held else None)


def check_target(target: float) -> float:
    """A target replacement probability must lie strictly between 0 and 1."""
    if isinstance(target, bool) or not isinstance(target, (int, float)) or not 0.0 < float(target) < 1.0:
        raise UsageError(f"replacement={target!r} must be a probability strictly between 0 and 1")
    return float(target)


def find_eta(counter: Counter, target: float, *, seed: int, start: float = 100.0, iterations: int = 12) -> float:
    """The η whose measured replacement probability is closest to ``target`` (bisection on log η).

    The bracket grows geometrically from ``start`` until it contains the target (so no time is
    spent at absurdly small η, where every candidate is equally far and search is slowest), then
    at most ``iterations`` bisection steps narrow it to a factor of about ``2**(-iterations)`` in log η.
    Bisection stops earlier once the rates measured at the bracket's two ends differ by less than one
    standard error of a rate at the target, √(t(1 − t)/n) over the n privatized units: past that the
    measurement cannot tell the two ends apart, and each step privatizes the whole calibration corpus again
    (on the demo corpus T2T's calibration to 0.5 takes 11 passes instead of 15; a larger corpus, whose standard
    error is smaller, stops later).

    Raises:
        UsageError: when ``target`` is unreachable for η between 1e-3 and 1e7.
    """
    target = check_target(target)
    measured: dict[float, tuple[float, int]] = {}  # log η -> (rate, privatized units); every point is one pass

    def rate(log_eta: float) -> float:
        if log_eta not in measured:
            count = counter(math.exp(log_eta), np.random.default_rng(seed))
            measured[log_eta] = (count.rate, count.perturbed)
        return measured[log_eta][0]

    lo = hi = math.log(start)
    step = math.log(4.0)
    while rate(lo) < target:  # too few replacements: more noise, smaller eta
        lo -= step
        if lo < math.log(1e-3):
            raise UsageError(f"replacement={target} is not reachable: even eta=1e-3 replaces less")
    while rate(hi) > target:
        hi += step
        if hi > math.log(1e7):
            count = counter(1e7, np.random.default_rng(seed))
            floor = count.forced / count.perturbed if count.perturbed else math.nan
            raise UsageError(f"replacement={target} is not reachable: even eta=1e7 replaces more. {floor:.1%} of the "
                             "calibration units have no candidate equal to them (names, misspellings, words no public "
                             "list gives their category) and are replaced at every eta; choose a target above that floor")
    units = measured[hi][1]
    standard_error = math.sqrt(target * (1.0 - target) / units) if units else 0.0
    for _ in range(iterations):
        if abs(rate(lo) - rate(hi)) < standard_error:
            break
        mid = (lo + hi) / 2
        if rate(mid) > target:
            lo = mid  # too many replacements: less noise, larger eta
        else:
            hi = mid
    return float(math.exp((lo + hi) / 2))


@dataclass(frozen=True)
class Deniability:
    """Plausible deniability of token-level T2T (Qu et al. 2021, Sec. 5.3).

    For each sampled regular token w, perturbed ``repeats`` times: ``n_w`` counts outputs equal to w
    and ``s_w`` counts distinct outputs.
    """

    eta: float
    repeats: int
    tokens: tuple[str, ...]
    n_w: np.ndarray
    s_w: np.ndarray

    def summary(self) -> dict[str, object]:
        """Quantiles of N_w and S_w plus the raw per-token values (for histograms)."""
        q = [0.05, 0.25, 0.5, 0.75, 0.95]
        return {"eta": "inf" if math.isinf(self.eta) else self.eta, "repeats": self.repeats,
                "tokens_sampled": len(self.tokens),
                "n_w_quantiles": dict(zip(map(str, q), np.quantile(self.n_w, q).tolist())),
                "s_w_quantiles": dict(zip(map(str, q), np.quantile(self.s_w, q).tolist())),
                "n_w_mean": float(self.n_w.mean()), "s_w_mean": float(self.s_w.mean()),
                "n_w": self.n_w.tolist(), "s_w": self.s_w.tolist()}


def plausible_deniability(privatize_rows: Callable[[np.ndarray, np.random.Generator], np.ndarray],
                          rows: np.ndarray, tokens: Sequence[str], *, eta: float, repeats: int,
                          rng: np.random.Generator) -> Deniability:
    """N_w and S_w for each row in ``rows`` (rows into the regular table), ``repeats`` draws each.

    ``privatize_rows(rows, rng)`` must return the released row for each input row.
    """
    if repeats < 1:
        raise UsageError(f"repeats must be at least 1, got {repeats}")
    n_w = np.empty(len(rows), dtype=np.int64)
    s_w = np.empty(len(rows), dtype=np.int64)
    for i, row in enumerate(rows):
        released = privatize_rows(np.full(repeats, row, dtype=np.int64), rng)
        n_w[i] = int((released == row).sum())
        s_w[i] = len(np.unique(released))
    return Deniability(eta, repeats, tuple(tokens), n_w, s_w)
