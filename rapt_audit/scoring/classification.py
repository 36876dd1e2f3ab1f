"""Scoring a classifier's predictions: accuracy, macro-F1 and AUC with bootstrap intervals.

Every accuracy, macro-F1 and AUC in rapt-audit (task utility and attribute inference alike) comes
from here. Each scorer draws its bootstrap resamples from the generator it is given, so callers
that score several metrics keep their numbers reproducible by calling the scorers in a fixed
order (accuracy, then macro-F1, then AUC: :func:`label_scores` and :func:`classification_utility`).
:func:`chance_scores` measures predictions against a chance guess of the same records (attribute inference's
majority guess): the advantage over it and the chance-normalised privacy.
"""

from __future__ import annotations

import dataclasses
import numpy as np

from rapt_audit.api.types import Estimate, PerRecord
from rapt_audit.scoring.stats import bootstrap_mean, bootstrap_statistic

#: Bootstrap resamples of macro-F1 and AUC (each resample refits nothing, but re-counts every class).
STATISTIC_RESAMPLES = 300


def accuracy_estimate(predicted: np.ndarray, truth: np.ndarray, *, rng: np.random.Generator) -> Estimate:
    """Fraction of correct predictions, with a per-example bootstrap interval.

    The estimate keeps each example's outcome as its per-record parts (1 when correct, else 0, over 1):
    two defenses scored on the same test records are then compared paired, record by record.
    """
    return bootstrap_mean((np.asarray(predicted) == np.asarray(truth)).astype(float), rng=rng)


def chance_scores(predicted: np.ndarray, guessed: np.ndarray, truth: np.ndarray, *,
                  rng: np.random.Generator) -> tuple[Estimate, Estimate]:
    """``(advantage, privacy)`` of ``predicted`` over a chance guess ``guessed`` of the same records.

    * advantage = accuracy − the guess's accuracy, in [−1, 1]: the mean of each record's
      ``correct − guess correct``, so its bootstrap interval resamples the same records for both (paired);
    * privacy = 1 − max(0, advantage / (1 − guess accuracy)) = min(1, errors / the guess's errors):
      1 at or below the guess (no information leaked), 0 for an attacker that is always right. It is
      computed on every bootstrap resample of the records, so the clipping at 1 holds for the point and
      both ends of the interval; a resample where the guess is always right counts as 1 (no attacker can
      beat it). Unlike ``1 − accuracy``, it reads the same for two classes and for six: chance is 1.

    The privacy keeps per-record parts (errors over the guess's errors) for paired comparisons when its
    value is that ratio, i.e. when it is not clipped; the advantage keeps its per-record differences.
    Both draw their resamples from ``rng`` in that order.
    """
    truth = np.asarray(truth)
    hit = (np.asarray(predicted) == truth).astype(float)
    guess_hit = (np.asarray(guessed) == truth).astype(float)
    advantage = bootstrap_mean(hit - guess_hit, rng=rng)
    miss, guess_miss = 1.0 - hit, 1.0 - guess_hit

    def statistic(idx: np.ndarray) -> float:
        room = guess_miss[idx].sum()
        return 1.0 if room == 0 else min(1.0, float(miss[idx].sum() / room))

    privacy = bootstrap_statistic(len(truth), statistic, rng=rng)
    parts = PerRecord(tuple(miss.tolist()), tuple(guess_miss.tolist()))
    if guess_miss.sum() > 0 and abs(parts.value - privacy.value) <= 1e-12:
        privacy = dataclasses.replace(privacy, per_record=parts)
    return advantage, privacy


def macro_f1(predicted: np.ndarray, truth: np.ndarray, *, n_classes: int | None = None) -> float:
    """Macro-averaged F1 of integer class codes, equal to scikit-learn's ``f1_score(average="macro")``.

    Args:
        predicted: Predicted class codes, ``>= 0``.
        truth: True class codes, ``>= 0``; with ``n_classes``, -1 marks a value the classifier
            never saw (a miss for every class).
        n_classes: Average over the classes ``0..n_classes-1`` (as scikit-learn with
            ``labels=range(n_classes)``); without it, over the classes present in ``truth`` or
            ``predicted`` (scikit-learn's default).

    Per-class F1 is ``2·tp / (predicted + actual)``, 0 when a class is neither predicted nor
    present (``zero_division=0``). Written with ``bincount`` because the bootstrap calls it
    hundreds of times and scikit-learn's input validation costs a hundred times more.
    """
    width = n_classes if n_classes is not None else int(max(truth.max(initial=-1), predicted.max(initial=-1))) + 1
    tp = np.bincount(truth[truth == predicted], minlength=width)[:width]
    guessed = np.bincount(predicted, minlength=width)[:width]
    actual = np.bincount(truth[truth >= 0], minlength=width)[:width]
    denominator = guessed + actual
    f1 = np.divide(2.0 * tp, denominator, out=np.zeros(width), where=denominator > 0)
    return float(f1.mean() if n_classes is not None else f1[denominator > 0].mean())


def macro_f1_estimate(predicted: np.ndarray, truth: np.ndarray, *, rng: np.random.Generator,
                   n_classes: int | None = None) -> Estimate:
    """Macro-F1 of ``predicted`` against ``truth`` with a bootstrap interval over examples.

    Labels may be any sortable values unless ``n_classes`` is given, in which case they must be
    class codes (see :func:`macro_f1`).
    """
    truth, predicted = np.asarray(truth), np.asarray(predicted)
    if n_classes is None:
        # Codes in sorted label order, so the per-class average runs in scikit-learn's order.
        codes = np.unique(np.concatenate([truth, predicted]), return_inverse=True)[1].reshape(2, -1)
        truth, predicted = codes[0], codes[1]
    truth, predicted = truth.astype(np.int64), predicted.astype(np.int64)

    def statistic(idx: np.ndarray) -> float:
        return macro_f1(predicted[idx], truth[idx], n_classes=n_classes)

    return bootstrap_statistic(len(truth), statistic, rng=rng, resamples=STATISTIC_RESAMPLES)


def label_scores(predicted: np.ndarray, truth: np.ndarray, *, rng: np.random.Generator,
                 suffix: str = "") -> dict[str, Estimate]:
    """Accuracy then macro-F1 of predicted labels (``accuracy<suffix>``, ``macro_f1<suffix>``)."""
    return {f"accuracy{suffix}": accuracy_estimate(predicted, truth, rng=rng),
            f"macro_f1{suffix}": macro_f1_estimate(predicted, truth, rng=rng)}


def auc_estimate(probabilities: np.ndarray, truth: np.ndarray, *, rng: np.random.Generator) -> Estimate:
    """ROC AUC of class probabilities (macro one-vs-rest beyond two classes), bootstrapped over examples.

    Resamples without a positive and a negative example of every class have no AUC and are dropped by the
    bootstrap. Each resample is scored by :class:`RankedScores` (the same value as scikit-learn's
    ``roc_auc_score``): scikit-learn's own call spends about 4 ms a resample validating its input, which made
    this estimate a fifth of a smoke cell's time.
    """
    truth = np.asarray(truth)
    ranked = RankedScores(probabilities, truth)
    return bootstrap_statistic(len(truth), ranked.auc, rng=rng, resamples=STATISTIC_RESAMPLES)


class RankedScores:
    """Class scores of a fixed set of examples, ranked once, so that the AUC of any resample is counting.

    For one class c, AUC = P(score of a c example > score of a non-c example) + ½ P(tie), which is what the
    trapezoidal area under the ROC curve computes; with the scores replaced by their tie-aware rank levels,
    it is a sum over levels of (c examples at the level) × (others below + ½ others at the level), exact in
    integers. Two classes: the AUC of class 1's column; more: the unweighted mean over classes (macro OvR).
    """

    def __init__(self, probabilities: np.ndarray, truth: np.ndarray) -> None:
        probabilities, self.truth = np.asarray(probabilities), np.asarray(truth).astype(np.int64)
        self.classes = (1,) if probabilities.shape[1] == 2 else tuple(range(probabilities.shape[1]))
        # Each class's column as rank levels 0..L-1 (equal scores share a level), and L.
        self.levels = {c: np.unique(probabilities[:, c], return_inverse=True)[1].reshape(-1) for c in self.classes}
        self.n_levels = {c: int(self.levels[c].max()) + 1 if self.levels[c].size else 0 for c in self.classes}

    def auc(self, idx: np.ndarray) -> float:
        """AUC over the examples ``idx`` (repeats count as often as they occur); NaN where a class lacks a
        positive or a negative example."""
        y = self.truth[idx]
        per_class = []
        for c in self.classes:
            positive, levels = y == c, self.levels[c][idx]
            pos = np.bincount(levels[positive], minlength=self.n_levels[c])
            neg = np.bincount(levels[~positive], minlength=self.n_levels[c])
            n_pos, n_neg = int(pos.sum()), int(neg.sum())
            if n_pos == 0 or n_neg == 0:
                return float("nan")
            below = np.cumsum(neg) - neg
            per_class.append(int((pos * (2 * below + neg)).sum()) / (2 * n_pos * n_neg))
        return float(np.mean(per_class))


def classification_utility(probabilities: np.ndarray, labels: np.ndarray, *, rng: np.random.Generator,
                           suffix: str = "") -> dict[str, Estimate]:
    """Accuracy, macro-F1 and AUC of the most probable class, with bootstrap intervals.

    Args:
        probabilities: ``(n, k)`` predicted class probabilities (columns = classes ``0..k-1``).
        labels: ``(n,)`` true class indices.
        rng: Generator for the bootstrap.
        suffix: Appended to the metric names (``".without_denoiser"``).

    Returns:
        ``accuracy``, ``macro_f1`` and, when ``labels`` hold two classes or more, ``auc``.
    """
    labels = np.asarray(labels)
    out = label_scores(probabilities.argmax(axis=1), labels, rng=rng, suffix=suffix)
    if len(np.unique(labels)) >= 2:
        out[f"auc{suffix}"] = auc_estimate(probabilities, labels, rng=rng)
    return out
