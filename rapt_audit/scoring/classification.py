"""Scoring a classifier's predictions: accuracy, macro-F1 and AUC with bootstrap intervals."""

from __future__ import annotations

import numpy as np

from rapt_audit.api.types import Estimate
from rapt_audit.scoring.stats import bootstrap_mean, bootstrap_statistic


def classification_utility(probabilities: np.ndarray, labels: np.ndarray, *, rng: np.random.Generator,
                           suffix: str = "") -> dict[str, Estimate]:
    """Accuracy (per-example bootstrap), macro-F1 and AUC (bootstrap over examples) of class probabilities.

    Args:
        probabilities: ``(n, k)`` predicted class probabilities (columns = classes ``0..k-1``).
        labels: ``(n,)`` true class indices.
        rng: Generator for the bootstrap.
        suffix: Appended to the metric names (``".without_denoiser"``).
    """
    from sklearn.metrics import f1_score, roc_auc_score  # lazy (sklearn)

    labels = np.asarray(labels)
    predicted = probabilities.argmax(axis=1)
    k = probabilities.shape[1]

    def auc(idx: np.ndarray) -> float:
        y = labels[idx]
        if len(np.unique(y)) < 2:
            return float("nan")  # undefined on a one-class resample; dropped by the bootstrap
        if k == 2:
            return float(roc_auc_score(y, probabilities[idx, 1]))
        return float(roc_auc_score(y, probabilities[idx], multi_class="ovr", average="macro", labels=list(range(k))))

    def macro_f1(idx: np.ndarray) -> float:
        return float(f1_score(labels[idx], predicted[idx], average="macro", zero_division=0))

    out = {f"accuracy{suffix}": bootstrap_mean((predicted == labels).astype(float), rng=rng),
           f"macro_f1{suffix}": bootstrap_statistic(len(labels), macro_f1, rng=rng, resamples=300)}
    if len(np.unique(labels)) >= 2:
        out[f"auc{suffix}"] = bootstrap_statistic(len(labels), auc, rng=rng, resamples=300)
    return out
