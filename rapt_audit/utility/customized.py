"""Utility of a text defense under a customization method: train on privatized text, test on the release."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np

from rapt_audit.api.types import Estimate
from rapt_audit.scoring.classification import classification_utility
from rapt_audit.utility.customize import PlainTokens, resolve_settings, train_classifier

if TYPE_CHECKING:  # pragma: no cover - the pipeline creates the context and hands it down
    from rapt_audit.pipeline.context import RunContext


def customized_utility(train_texts: Sequence[str], y_train: np.ndarray, test_texts: Sequence[str], y_test: np.ndarray,
                       *, method: str, overrides: Mapping[str, Any], ctx: RunContext, key: str,
                       plain: PlainTokens | None = None, reconstruction: bool = True,
                       extra_settings: Mapping[str, Any] | None = None,
                       loaded: Any = None) -> tuple[dict[str, Estimate], dict[str, Any]]:
    """Customize the public encoder on the privatized training texts; score it on the privatized test texts.

    ``loaded`` replaces the run's public encoder (e.g. one adapted by privacy-adaptive pretraining).

    Returns:
        The estimates (accuracy, macro-F1 and ROC AUC — macro one-vs-rest beyond two classes — with bootstrap CIs) and a
        record of the training (resolved settings, per-epoch losses, wall time) for the result file.
    """
    settings = resolve_settings(method, ctx.profile, {**overrides, **(extra_settings or {})})
    n_labels = int(max(np.max(y_train), np.max(y_test))) + 1
    loaded = loaded if loaded is not None else ctx.encoder()
    started = time.perf_counter()
    bar = None
    if ctx.progress:
        from tqdm.auto import tqdm  # lazy (tqdm)

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
    estimates = classification_utility(probabilities, y_test, rng=ctx.rng("utility", key))
    record = {"settings": settings.to_dict(), "history": trained.history, "train_examples": len(train_texts),
              "train_seconds": round(train_seconds, 2), "plain_tokens": len(plain.words) if plain else 0,
              "reconstruction": bool(plain and reconstruction)}
    return estimates, record
