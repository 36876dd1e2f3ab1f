"""Utility of a text defense under a customization method: train on privatized text, test on the release."""

from __future__ import annotations

import time
from typing import Any, Mapping, Sequence

import numpy as np

from rapt_audit.context import RunContext
from rapt_audit.customize import PlainTokens, resolve_settings, train_classifier
from rapt_audit.stats import bootstrap_mean, bootstrap_statistic
from rapt_audit.types import Estimate


def customized_utility(train_texts: Sequence[str], y_train: np.ndarray, test_texts: Sequence[str], y_test: np.ndarray,
                       *, method: str, overrides: Mapping[str, Any], ctx: RunContext, key: str,
                       plain: PlainTokens | None = None, reconstruction: bool = True,
                       extra_settings: Mapping[str, Any] | None = None) -> tuple[dict[str, Estimate], dict[str, Any]]:
    """Customize the public encoder on the privatized training texts; score it on the privatized test texts.

    Returns:
        The estimates (accuracy and macro-F1 with bootstrap CIs; ROC AUC for binary tasks) and a
        record of the training (resolved settings, per-epoch losses, wall time) for the result file.
    """
    from sklearn.metrics import f1_score, roc_auc_score

    settings = resolve_settings(method, ctx.profile, {**overrides, **(extra_settings or {})})
    n_labels = int(max(np.max(y_train), np.max(y_test))) + 1
    loaded = ctx.encoder()
    started = time.perf_counter()
    bar = None
    if ctx.progress:
        from tqdm.auto import tqdm

        bar = tqdm(desc=f"{settings.method} training", unit="step", leave=False)

    def advance(step: int, total: int) -> None:
        if bar is not None:
            bar.total = total
            bar.update(step - bar.n)

    try:
        trained = train_classifier(loaded, list(train_texts), y_train, settings, n_labels=n_labels,
                                   seed=ctx.seed_for("customize", key), plain=plain, reconstruction=reconstruction,
                                   progress=advance)
    finally:
        if bar is not None:
            bar.close()
    train_seconds = time.perf_counter() - started
    probabilities = trained.predict_proba(list(test_texts))
    predicted = probabilities.argmax(1)
    rng = ctx.rng("utility", key)
    estimates = {"accuracy": bootstrap_mean((predicted == y_test).astype(float), rng=rng)}

    def macro_f1(idx: np.ndarray) -> float:
        return float(f1_score(y_test[idx], predicted[idx], average="macro", zero_division=0))

    estimates["macro_f1"] = bootstrap_statistic(len(y_test), macro_f1, rng=rng, resamples=300)
    if n_labels == 2 and len(set(y_test.tolist())) == 2:
        scores = probabilities[:, 1]

        def auc(idx: np.ndarray) -> float:
            labels = y_test[idx]
            return float(roc_auc_score(labels, scores[idx])) if len(set(labels.tolist())) == 2 else float("nan")

        estimates["auc"] = bootstrap_statistic(len(y_test), auc, rng=rng, resamples=300)
    record = {"settings": settings.to_dict(), "history": trained.history, "train_examples": len(train_texts),
              "train_seconds": round(train_seconds, 2), "plain_tokens": len(plain.words) if plain else 0,
              "reconstruction": bool(plain and reconstruction)}
    return estimates, record
