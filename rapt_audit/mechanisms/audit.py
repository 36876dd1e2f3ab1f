"""Black-box privacy audits: an empirical lower bound on a mechanism's privacy loss for a pair of inputs.

A dχ mechanism claims ``P[M(x) ∈ S] <= exp(η·d(x, x')) · P[M(x') ∈ S]`` for every output event S; a
Laplace release claims the same with its ε. The audit runs the released mechanism as a black box
(as DP-Sniper, Bichsel et al., S&P 2021, and Delta-Siege, Lokna et al., S&P 2023, do):

1. draw ``2n`` releases of x and of x'; the first ``n`` of each choose an event, the other ``n``
   evaluate it (no selection bias, no multiplicity penalty);
2. choose the event on the selection half, in both directions (x against x', x' against x):
   * word outputs (T2T): the union of the k output words most over-represented under one input
     (smoothed log-ratio ranking), k chosen to maximise the bound;
   * vector outputs: ``{w : s(w) >= t}`` with s the claimed mechanism's log-likelihood ratio
     (Neyman–Pearson optimal if the claim holds), t among quantiles of the selection scores;
3. turn the evaluation counts into ``ε_LB`` (:func:`rapt_audit.scoring.bounds.epsilon_lower_bound`),
   each direction at ``alpha / 2``, so the reported bound holds at confidence ``1 − alpha``.

The verdict is ``VIOLATION`` when ε_LB exceeds the claim (proof of a bug at that confidence),
``unauditable`` when the claim is above the largest bound ``n`` samples can give (about
``ln(n / ln(2/alpha))``: such a claim cannot be falsified, and says little), else ``ok`` —
which is not a proof of privacy: an audit can only find violations. In high dimension a correct
T2T realises far less than ``η·d`` (decoding to the nearest word is post-processing), so ``ok``
with a small ε_LB is expected.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Callable, Sequence

import numpy as np

from rapt_audit.api.errors import UsageError
from rapt_audit.scoring.bounds import check_alpha, epsilon_ceiling, epsilon_lower_bound

__all__ = ["PairAudit", "audit_pair", "audit_support", "dchi_log_ratio", "minimum_samples", "verdict_of"]

#: ``sample(n, rng)``: ``n`` independent releases of one fixed input (word rows, or vectors as rows).
Sampler = Callable[[int, np.random.Generator], np.ndarray]
#: ``score(releases)``: one number per release; high values are events favouring the first input.
Score = Callable[[np.ndarray], np.ndarray]

_QUANTILES = np.linspace(0.02, 0.98, 49)  # thresholds tried for vector events
_MAX_PREFIX = 64  # largest number of output words in a word event


@dataclass(frozen=True)
class PairAudit:
    """The audit of one pair of inputs.

    Attributes:
        label: What the pair is (``"nearest neighbour: good / great"``).
        distance: ``d(x, x')`` in the mechanism's metric.
        claim: The privacy loss the mechanism claims for the pair (``η·d`` or ε).
        lower_bound: ε_LB, valid at confidence ``1 − alpha``.
        ceiling: The largest ε_LB these sample sizes can give.
        verdict: ``VIOLATION``, ``unauditable`` or ``ok``.
        alpha: The pair's error level (already divided among the pairs of an audit).
        n_select: Releases per input used to choose the event.
        n_eval: Releases per input used to evaluate it.
        event: The chosen event, in words.
        counts: Evaluation releases in the event, under the favoured input and the other one.
    """

    label: str
    distance: float
    claim: float
    lower_bound: float
    ceiling: float
    verdict: str
    alpha: float
    n_select: int
    n_eval: int
    event: str
    counts: tuple[int, int]

    def to_json(self) -> dict:
        """A JSON-able dict (an infinite claim becomes ``"inf"``)."""
        doc = asdict(self)
        for key in ("claim", "lower_bound", "ceiling"):
            doc[key] = "inf" if math.isinf(doc[key]) else doc[key]
        return doc


def verdict_of(lower_bound: float, claim: float, ceiling: float) -> str:
    """``VIOLATION`` if the bound exceeds the claim, else ``unauditable`` above the ceiling, else ``ok``."""
    if lower_bound > claim * (1 + 1e-9) + 1e-12:
        return "VIOLATION"
    return "unauditable" if claim >= ceiling else "ok"


def minimum_samples(alpha: float, *, reach: float = 1.0) -> int:
    """Fewest evaluation releases per input whose ceiling reaches ``reach`` nats at ``alpha``."""
    n = 1
    while epsilon_ceiling(n, alpha) < reach:
        n *= 2
    low, high = n // 2, n
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (mid, high) if epsilon_ceiling(mid, alpha) < reach else (low, mid)
    return high


def dchi_log_ratio(x: np.ndarray, x_other: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
    """``s(w) = ‖w − x'‖ − ‖w − x‖``: the claimed L2 dχ log-likelihood ratio of x over x', divided by η."""
    x, x_other = np.asarray(x, np.float64), np.asarray(x_other, np.float64)

    def log_ratio(w: np.ndarray) -> np.ndarray:
        """claimed dχ log-likelihood ratio / η"""
        return np.linalg.norm(w - x_other, axis=1) - np.linalg.norm(w - x, axis=1)

    return log_ratio


def _word_event(favoured: np.ndarray, other: np.ndarray, alpha: float) -> tuple[np.ndarray, str]:
    """Output words over-represented under ``favoured`` (selection samples): the best prefix union."""
    values, inverse = np.unique(np.concatenate([favoured, other]), return_inverse=True)
    c1 = np.bincount(inverse[:len(favoured)], minlength=len(values))
    c0 = np.bincount(inverse[len(favoured):], minlength=len(values))
    order = np.argsort(-np.log((c1 + 0.5) / (c0 + 0.5)), kind="stable")
    best, best_k = -1.0, 1
    k1 = np.cumsum(c1[order])[:_MAX_PREFIX]
    k0 = np.cumsum(c0[order])[:_MAX_PREFIX]
    for k in range(1, len(k1) + 1):
        bound = epsilon_lower_bound(int(k1[k - 1]), len(favoured), int(k0[k - 1]), len(other), alpha=alpha)
        if bound > best:
            best, best_k = bound, k
    chosen = values[order[:best_k]]
    return chosen, f"output in a set of {best_k} word(s)"


def _vector_event(favoured_scores: np.ndarray, other_scores: np.ndarray, alpha: float) -> float:
    """The threshold t (among quantiles of the selection scores) that maximises the bound for ``{s >= t}``."""
    candidates = np.quantile(np.concatenate([favoured_scores, other_scores]), _QUANTILES)
    best, best_t = -1.0, float(candidates[0])
    for t in candidates:
        bound = epsilon_lower_bound(int((favoured_scores >= t).sum()), len(favoured_scores),
                                    int((other_scores >= t).sum()), len(other_scores), alpha=alpha)
        if bound > best:
            best, best_t = bound, float(t)
    return best_t


def audit_pair(sample_x: Sampler, sample_other: Sampler, *, claim: float, n: int, alpha: float,
               rng: np.random.Generator, label: str, distance: float,
               score: Score | Sequence[Score] | None = None) -> PairAudit:
    """Audit one pair: ``2n`` releases of each input, an event chosen on half, bounded on the other half.

    Args:
        sample_x: Releases of x (``(n,)`` word rows or ``(n, d)`` vectors).
        sample_other: Releases of x'.
        claim: The claimed privacy loss of the pair (``η·d(x, x')`` or ε).
        n: Evaluation releases per input (as many again choose the event).
        alpha: Error level of this pair's bound.
        rng: Generator of every release (split between the inputs and halves in a fixed order).
        label: What the pair is.
        distance: ``d(x, x')``.
        score: For vector releases, the score whose high values favour x (for example the claimed
            log-likelihood ratio, :func:`dchi_log_ratio`), or several such families of events
            (``alpha`` is then divided among them); ``None`` for word releases.

    Raises:
        UsageError: for an ``alpha`` outside (0, 1) or an ``n`` too small for any bound.
    """
    alpha = check_alpha(alpha)
    needed = minimum_samples(alpha / 4)
    if n < needed:
        raise UsageError(f"{n} evaluation samples per input cannot give any bound above 1 nat at this pair's "
                         f"share of alpha ({alpha:.3g}); use --samples {needed} or more")
    releases = [sample(2 * n, rng) for sample in (sample_x, sample_other)]
    families: list[Score | None] = [None] if score is None else ([score] if callable(score) else list(score))
    level = alpha / (2 * len(families))  # two directions per family (Bonferroni)
    results = []
    for family, favoured in ((f, d) for f in families for d in (0, 1)):
        other = 1 - favoured
        sel_f, eval_f = releases[favoured][:n], releases[favoured][n:]
        sel_o, eval_o = releases[other][:n], releases[other][n:]
        if family is None:
            words, event = _word_event(sel_f, sel_o, level)
            k1, k0 = int(np.isin(eval_f, words).sum()), int(np.isin(eval_o, words).sum())
        else:
            sign = 1.0 if favoured == 0 else -1.0  # x' is favoured by low scores
            t = _vector_event(sign * family(sel_f), sign * family(sel_o), level)
            k1, k0 = int((sign * family(eval_f) >= t).sum()), int((sign * family(eval_o) >= t).sum())
            name = getattr(family, "__doc__", None) or "score"
            event = f"{'' if favoured == 0 else '-'}[{name.strip().splitlines()[0]}] >= {t:.4g}"
        bound = epsilon_lower_bound(k1, n, k0, n, alpha=level)
        results.append((bound, event + (" (favours x)" if favoured == 0 else " (favours x')"), (k1, k0)))
    bound, event, counts = max(results, key=lambda r: r[0])
    ceiling = epsilon_ceiling(n, level)
    return PairAudit(label, float(distance), float(claim), float(bound), float(ceiling),
                     verdict_of(bound, claim, ceiling), alpha, n, n, event, counts)


def audit_support(sample: Sampler, allowed: np.ndarray, *, n: int, rng: np.random.Generator, label: str,
                  claim: float = 0.0) -> PairAudit:
    """Check that ``n`` releases stay inside the outputs the mechanism claims it can give (``allowed``).

    PCT2T claims to release a word of the input's own POS category: a release outside it has
    probability 0 under the claim, so a single one proves that the mechanism is not the one stated
    (the privacy loss of telling categories apart is then unbounded). No statistics are needed:
    the verdict is certain, and ``lower_bound`` is infinite when it is a violation.
    """
    releases = np.asarray(sample(n, rng))
    outside = int((~np.isin(releases, allowed)).sum())
    return PairAudit(label, 0.0, float(claim), math.inf if outside else 0.0, math.inf,
                     "VIOLATION" if outside else "ok", 0.0, 0, n, "release outside the claimed support",
                     (outside, 0))
