"""Utility of a defense under a customization method: train on the privatized release, test on the release.

Two steps, in this order, so that the test split cannot reach the choice of the model:
:func:`customize_service` chooses the learning rate and epoch on validation data carved from the
privatized training texts and returns the final model (:mod:`rapt_audit.utility.selection`);
:func:`score_customized` then scores that model on the privatized test texts. A token-embedding
release (:class:`~rapt_audit.utility.token_vectors.TokenVectors`) takes the place of the texts in
both steps; the stored service's key then holds a digest of the released vectors themselves.
"""

from __future__ import annotations

import time
from typing import Any, Mapping, Sequence

import numpy as np

from rapt_audit.api.context import RunContext
from rapt_audit.api.digests import code_digest
from rapt_audit.api.files import stable_hash
from rapt_audit.api.types import Estimate
from rapt_audit.scoring.classification import classification_utility
from rapt_audit.utility import customize, decision, on_device, selection, task_model, token_vectors, training
from rapt_audit.utility.customize import PlainTokens, TrainedClassifier, resolve_settings
from rapt_audit.utility.on_device import ServiceInput
from rapt_audit.utility.selection import resolve_grid, select_and_train
from rapt_audit.utility.state_cache import cached_state
from rapt_audit.utility.task_model import TrainSettings, build_task_model
from rapt_audit.utility.token_vectors import TokenVectors


#: The code that customizes the service: its stored weights are reused only by this code.
CODE_VERSION = code_digest(__file__, customize.__file__, decision.__file__, on_device.__file__, selection.__file__,
                           task_model.__file__, token_vectors.__file__, training.__file__)


def inputs_digest(inputs: Sequence[str] | TokenVectors) -> str:
    """A digest of what the service trains on: the texts, or the released vectors' bytes (other noise, other key)."""
    return inputs.digest if isinstance(inputs, TokenVectors) else stable_hash(list(inputs))


def trained_parameters(model: Any) -> dict[str, Any]:
    """The parameters training changed (prompt, prefix, LoRA weights and heads; everything under ``full``)."""
    trainable = {name for name, parameter in model.named_parameters() if parameter.requires_grad}
    return {name: value for name, value in model.state_dict().items() if name in trainable}


def customize_service(train_texts: Sequence[str] | TokenVectors, y_train: np.ndarray, *, method: str,
                      overrides: Mapping[str, Any], ctx: RunContext, key: str, plain: PlainTokens | None = None,
                      reconstruction: bool = True, extra_settings: Mapping[str, Any] | None = None,
                      lr_grid: Sequence[float] | None = None, loaded: Any = None) -> tuple[TrainedClassifier, dict[str, Any]]:
    """Customize the public encoder on the privatized training texts, choosing lr and epoch on validation data.

    ``overrides["lr"]`` pins the learning rate; ``lr_grid`` replaces the profile's grid. ``loaded``
    replaces the run's public encoder (e.g. one adapted by privacy-adaptive pretraining). The
    validation split and the training seed derive from the run seed and ``key``. The trained model is
    stored under ``$RAPT_AUDIT_CACHE/services`` by everything it depends on and read back when the
    same training comes again (counted in ``env.release_cache.services``): the very weights, so the
    same numbers.

    Returns:
        The chosen model and a record of the training for the result file: resolved settings with the
        chosen lr, the chosen model's per-epoch history, ``train_examples`` (all training texts received;
        ``selection`` says how many of them were held out for validation), wall time and ``selection``.
    """
    given = {**overrides, **(extra_settings or {})}
    if given.get("precision") is None:  # the defense did not pin one: the run's (bf16 where native)
        given["precision"] = ctx.precision
    settings = resolve_settings(method, ctx.profile, given)
    grid, pinned = resolve_grid(settings.method, ctx.profile, lr=overrides.get("lr"), lr_grid=lr_grid)
    # Classes come from the training labels only: the test split is not read before the model is final.
    n_labels = int(np.max(y_train)) + 1
    loaded = loaded if loaded is not None else ctx.service()
    started = time.perf_counter()
    bar = None
    if ctx.progress:
        from tqdm.auto import tqdm  # lazy (tqdm)

        bar = tqdm(desc=f"{settings.method} training", unit="step", leave=False)

    def advance(step: int, total: int) -> None:
        if bar is not None:
            if step == 1:  # a new grid entry
                bar.reset(total=total)
            bar.update(step - bar.n)

    fresh: list[TrainedClassifier] = []  # the model trained here, when the store did not hold it

    def train() -> tuple[Any, dict[str, Any]]:
        trained, choice = select_and_train(
            loaded, train_texts, y_train, settings, grid=grid, pinned=pinned, n_labels=n_labels,
            seed=ctx.seed_for("customize", key), split_rng=ctx.rng("validation-split", key), plain=plain,
            reconstruction=reconstruction, progress=advance)
        fresh.append(trained)
        return trained.model, {"settings": trained.settings.to_dict(), "history": trained.history,
                               "best_epoch": trained.best_epoch, "train_examples": len(train_texts),
                               "train_seconds": round(time.perf_counter() - started, 2),
                               "plain_tokens": len(plain.words) if plain else 0,
                               "reconstruction": bool(plain and reconstruction), "selection": choice}

    def restore(state: dict[str, Any]) -> Any:
        model = build_task_model(loaded, settings, n_labels)  # the reconstruction head was dropped after training
        unexpected = model.load_state_dict(state, strict=False).unexpected_keys
        if unexpected:
            raise ValueError(f"stored service weights do not fit the task model: {unexpected[:3]}")
        return model.eval()

    # The trained service is stored by everything it depends on, so a run again (or a cell that changes
    # only its attacks) reads it back instead of training again; only what training changed is stored.
    signature = {"kind": "service", "code": CODE_VERSION, "model": loaded.fingerprint, "device": loaded.device,
                 "texts": stable_hash([inputs_digest(train_texts), np.asarray(y_train).tolist()]),
                 "settings": settings.to_dict(), "grid": list(grid), "pinned": pinned, "n_labels": n_labels,
                 "seed": ctx.seed, "key": key, "reconstruction": reconstruction,
                 "plain": None if plain is None else [list(plain.words), list(plain.targets), plain.vocabulary_size]}
    try:
        model, record, cached = cached_state(ctx.cache_dir / "services", signature, train=train, restore=restore,
                                             device=loaded.device, state=trained_parameters)
    finally:
        if bar is not None:
            bar.close()
    ctx.tally("services", "hit" if cached else "miss")
    trained = fresh[0] if fresh else TrainedClassifier(
        model, loaded.tokenizer, TrainSettings(**record["settings"]), len(plain.words) if plain else 0,
        loaded.device, record["history"], record["best_epoch"],
        np.asarray(record["selection"]["decision"]["bias"]))
    return trained, record


def score_customized(trained: TrainedClassifier, test_texts: ServiceInput, y_test: np.ndarray, *, ctx: RunContext,
                     key: str) -> dict[str, Estimate]:
    """Accuracy, macro-F1 and ROC AUC (macro one-vs-rest beyond two classes) of ``trained`` on the test texts.

    A test label the training data never showed gets a probability column of zeros: the model cannot
    predict a class it never saw, and that is scored as the error it is.
    """
    return score_probabilities(trained.predict_proba(test_texts), y_test, ctx=ctx, key=key)


def score_probabilities(probabilities: np.ndarray, y_test: np.ndarray, *, ctx: RunContext,
                        key: str) -> dict[str, Estimate]:
    """The service's utility from its class probabilities on the test inputs (any service: customized, or the frozen
    model's head), a test label the training data never showed given a probability column of zeros."""
    y_test = np.asarray(y_test)
    missing = int(np.max(y_test)) + 1 - probabilities.shape[1] if len(y_test) else 0
    if missing > 0:
        probabilities = np.pad(probabilities, ((0, 0), (0, missing)))
    return classification_utility(probabilities, y_test, rng=ctx.rng("utility", key))


__all__ = ["CODE_VERSION", "customize_service", "inputs_digest", "score_customized", "score_probabilities",
           "trained_parameters"]
