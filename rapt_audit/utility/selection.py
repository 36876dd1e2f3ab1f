"""Choosing the service's learning rate and epoch on validation data carved from its training texts.

RAPT and Qu et al. fix their hyper-parameters (Adam lr 6e-5 for every parameter-efficient method,
2e-5 for full fine-tuning). Those values were tuned for BERT-base; copied to prompt tuning on a 384-d
MiniLM they leave a method under-trained (on an H100 the ``paper`` profile trained RAPT's prompt to
0.59 accuracy at lr 6e-5, 0.85 at 3e-3), which would compare methods by how well a borrowed setting
suits them. So each method gets its own, chosen the way the service itself could choose it:

1. **Validation split.** :func:`carve_validation` holds out ``VALID_FRACTION`` of the privatized
   training texts (at least ``VALID_MIN``, at most half), stratified by label, in an order drawn from
   the run seed. The service only ever holds privatized text, so validation texts are privatized too.
2. **Grid.** :func:`resolve_grid`: ``lr=X`` pins one value; ``lr_grid=a,b,…`` searches those; otherwise
   the profile's grid — :data:`LR_GRIDS` at ``paper`` (each holds the paper's value), and at ``cpu`` and
   ``smoke`` the one learning rate of :data:`~rapt_audit.utility.customize.PROFILE_DEFAULTS`, so that a
   CPU run costs one training (see *Measured* below for prompt tuning's).
3. **Epoch.** Every grid entry trains with the same seed (same initialisation and batch order) for at
   most the profile's epochs, stopping after ``patience`` epochs without a better validation accuracy,
   and keeps its best epoch.
4. **Choice.** The entry with the highest validation accuracy; ties go to the lower validation loss,
   then to the earlier entry of the grid. An entry whose loss became NaN or infinite is recorded as
   ``diverged`` and never chosen; if every entry diverged, :class:`~rapt_audit.api.errors.UsageError`
   names the grid.

:func:`select_and_train` receives training texts only; the caller scores the returned model on the
test split afterwards, so no test text or label can influence the choice. The final model is trained
on the training texts minus the validation split (not retrained on all of them: that would cost one
more training and its epoch count would no longer be the validated one).

*Measured* (cpu profile, SST-2, ``data.victim_train=1000`` → 900 training and 100 validation texts,
``epochs=3 patience=3``, seed 0): validation accuracy per epoch of prompt tuning ::

    lr       T2T η = ∞           T2T η = 100         RAPT η = 100
    3e-4     .58 .58 .61         .58 .58 .60         -
    1e-3     .60 .69 .68         .60 .63 .65         -
    3e-3     .66 .82 .76         .61 .78 .70         .66 .66 .75
    1e-2     .75 .82 .77         .83 .81 .75         .77 .75 .71

1e-2 wins all three (at η = ∞ tied with 3e-3 at .82, lower validation loss) and peaks by epoch 2,
hence the ``cpu``/``smoke`` prompt lr 1e-2 and at most 2 epochs. The margins are within the noise of
100 validation texts (± 4 points); 1e-2 was never behind. Only validation curves were compared (a run
scores its chosen model alone on the test split, so no test score exists per learning rate).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from rapt_audit.api.errors import DataError, UsageError
from rapt_audit.utility.customize import PROFILE_DEFAULTS, PlainTokens, TrainedClassifier, train_classifier
from rapt_audit.utility.decision import decision_record, fit_class_bias
from rapt_audit.utility.on_device import ServiceInput, tokenize
from rapt_audit.utility.task_model import TrainSettings
from rapt_audit.utility.training import Diverged

#: Share of the training texts held out for validation, and its floor (a 20-example validation split
#: moves in steps of 5 % accuracy, too coarse to rank learning rates).
VALID_FRACTION, VALID_MIN = 0.1, 50

#: Learning-rate grids of the ``paper`` profile, roughly log-spaced, each holding the paper's value
#: (RAPT: 6e-5 for prompt, prefix and LoRA; Qu et al.: 2e-5 for full fine-tuning). Upper ends are
#: the usual ranges of each method with Adam: prompt tuning needs large steps (Lester et al. train
#: prompts at 0.3 with Adafactor), peft's prefix tuning (no reparameterisation MLP) somewhat less,
#: LoRA is usually run at 1e-4–1e-3, and full fine-tuning of a small encoder at 2e-5–1e-4.
LR_GRIDS: Mapping[str, tuple[float, ...]] = {
    "prompt": (6e-5, 3e-4, 3e-3, 1e-2),
    "prefix": (6e-5, 3e-4, 1e-3, 3e-3),
    "lora": (6e-5, 2e-4, 5e-4, 1e-3),
    "full": (2e-5, 5e-5, 1e-4),
}

#: Profiles that search :data:`LR_GRIDS`; the others train the profile's one learning rate.
GRID_PROFILES = ("paper",)


def check_lr_grid(values: Sequence[float]) -> tuple[float, ...]:
    """``values`` as a tuple of distinct, finite, positive learning rates (in the order given).

    Raises:
        UsageError: an empty grid, a repeated value, or a value that is not a finite number > 0.
    """
    grid = tuple(float(v) for v in values)
    if not grid:
        raise UsageError("lr_grid is empty; give at least one learning rate, e.g. lr_grid=3e-4,3e-3")
    bad = [v for v in grid if not 0 < v < math.inf]
    if bad:
        raise UsageError(f"lr_grid entries must be finite numbers > 0, got {', '.join(map(str, bad))}")
    if len(set(grid)) != len(grid):
        raise UsageError(f"lr_grid repeats a value: {', '.join(f'{v:g}' for v in grid)}")
    return grid


def resolve_grid(method: str, profile: str, *, lr: float | None = None,
                 lr_grid: Sequence[float] | None = None) -> tuple[tuple[float, ...], bool]:
    """The learning rates to search for ``method`` at ``profile`` and whether the user pinned one.

    ``lr`` pins a single value (a grid of one, nothing chosen); ``lr_grid`` replaces the profile's grid.

    Raises:
        UsageError: both ``lr`` and ``lr_grid`` set, or a bad grid (:func:`check_lr_grid`).
    """
    if lr is not None and lr_grid is not None:
        raise UsageError(f"set either lr (pins one value; here {lr:g}) or lr_grid (searched on validation data), "
                         "not both")
    if lr is not None:
        return check_lr_grid([lr]), True
    if lr_grid is not None:
        return check_lr_grid(lr_grid), False
    if profile in GRID_PROFILES:
        return LR_GRIDS[method], False
    return (float(PROFILE_DEFAULTS.get(profile, PROFILE_DEFAULTS["cpu"])["lr"][method]),), False


def carve_validation(labels: np.ndarray, *, rng: np.random.Generator, fraction: float = VALID_FRACTION,
                     minimum: int = VALID_MIN) -> tuple[np.ndarray, np.ndarray]:
    """Split training indices into (train, validation), stratified by label, in ``rng``'s order.

    The validation split has ``max(minimum, ceil(fraction · n))`` examples, but at most half of the
    ``n``; each label gets its share (largest remainders), so a rare label is not left out by chance.
    Both index arrays are sorted (the training order is drawn later, per epoch).

    Raises:
        DataError: fewer than 2 training examples (nothing to hold out).
    """
    labels = np.asarray(labels)
    n = len(labels)
    size = min(max(minimum, math.ceil(fraction * n)), n // 2)
    if size < 1:
        raise DataError(f"{n} training example(s) cannot be split into training and validation data; the "
                        "learning rate and epoch are chosen on a validation split, which needs at least 2")
    order = rng.permutation(n)
    classes, counts = np.unique(labels, return_counts=True)
    exact = counts * size / n
    quota = np.floor(exact).astype(int)
    for i in np.argsort(-(exact - quota), kind="stable")[:size - int(quota.sum())]:
        quota[i] += 1
    valid = np.concatenate([order[labels[order] == c][:q] for c, q in zip(classes, quota)])
    mask = np.zeros(n, dtype=bool)
    mask[valid] = True
    return np.flatnonzero(~mask), np.flatnonzero(mask)


@dataclass
class Candidate:
    """One grid entry's training: its curve (per epoch: training loss, validation accuracy and loss)."""

    lr: float
    curve: list[dict[str, float]] = field(default_factory=list)
    diverged: bool = False
    diverged_epoch: int | None = None
    reason: str = ""
    best_epoch: int = 0

    @property
    def best(self) -> dict[str, float]:
        """The curve's entry of the best epoch (empty when diverged or untrained)."""
        return next((c for c in self.curve if c.get("epoch") == self.best_epoch), {})

    def rank(self) -> tuple[float, float]:
        """Sort key: higher validation accuracy first, then lower validation loss."""
        return -self.best.get("valid_accuracy", -math.inf), self.best.get("valid_loss", math.inf)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON (a non-finite loss written as null, ``diverged`` tells why)."""
        curve = [{k: (v if isinstance(v, int) or math.isfinite(v) else None) for k, v in c.items()} for c in self.curve]
        return {"lr": self.lr, "diverged": self.diverged, "diverged_epoch": self.diverged_epoch,
                **({"diverged_reason": self.reason} if self.diverged else {}),
                "best_epoch": None if self.diverged else self.best_epoch,
                "valid_accuracy": None if self.diverged else self.best.get("valid_accuracy"), "curve": curve}


def choose(candidates: Sequence[Candidate]) -> Candidate:
    """The best candidate that did not diverge (ties: lower validation loss, then grid order).

    Raises:
        UsageError: every candidate diverged; the message names the grid.
    """
    alive = [c for c in candidates if not c.diverged]
    if not alive:
        grid = ", ".join(f"{c.lr:g}" for c in candidates)
        raise UsageError(f"training diverged (NaN or infinite loss) at every learning rate of the grid ({grid}); "
                         "try smaller values with lr_grid=… or pin one with lr=…")
    return min(alive, key=Candidate.rank)  # min is stable: the earlier grid entry wins a full tie


def select_and_train(loaded: Any, texts: ServiceInput, labels: np.ndarray, settings: TrainSettings, *,
                     grid: Sequence[float], pinned: bool, n_labels: int, seed: int, split_rng: np.random.Generator,
                     plain: PlainTokens | None = None, reconstruction: bool = True,
                     progress: Callable[[int, int], None] | None = None) -> tuple[TrainedClassifier, dict[str, Any]]:
    """Train every learning rate of ``grid`` with early stopping on a validation split; keep the best model.

    Args:
        loaded, plain, reconstruction, n_labels, progress: As for
            :func:`~rapt_audit.utility.customize.train_classifier`.
        texts, labels: The privatized training texts (or token-embedding release) and their labels — never
            test data.
        settings: Resolved settings; ``epochs`` is the maximum, ``settings.lr`` is ignored.
        grid, pinned: From :func:`resolve_grid`.
        seed: Training seed, the same for every grid entry (only the learning rate differs).
        split_rng: Draws the validation split.

    Returns:
        The chosen model (at its best epoch, settings holding the chosen lr) and the selection record
        for the result file: validation size, grid, per-lr curves, divergence flags and the choice.

    Raises:
        DataError: too few training texts to hold out a validation split.
        UsageError: every grid entry diverged.
    """
    labels = np.asarray(labels, dtype=np.int64)
    train_idx, valid_idx = carve_validation(labels, rng=split_rng)
    # Tokenized once, on the model's device, for every entry of the grid.
    tokens = tokenize(loaded.tokenizer, texts, plain_count=len(plain.words) if plain is not None else 0,
                      max_length=settings.max_length, device=loaded.device)
    train_texts = tokens.take(train_idx)
    validation = (tokens.take(valid_idx), labels[valid_idx])
    candidates: list[Candidate] = []
    best: TrainedClassifier | None = None
    for lr in grid:
        try:
            trained = train_classifier(loaded, train_texts, labels[train_idx], replace(settings, lr=lr),
                                       n_labels=n_labels, seed=seed, plain=plain, reconstruction=reconstruction,
                                       validation=validation, progress=progress)
        except Diverged as exc:  # recorded, never chosen; the curve ends with the epoch it diverged in
            curve = [*exc.history, {"epoch": exc.epoch, "diverged": True}]
            candidates.append(Candidate(lr, curve, diverged=True, diverged_epoch=exc.epoch, reason=str(exc)))
            continue
        candidates.append(Candidate(lr, trained.history, best_epoch=trained.best_epoch))
        if best is None or candidates[-1] is choose(candidates):
            best = trained  # only the best model so far is kept in memory
        else:
            del trained
    chosen = choose(candidates)
    assert best is not None and best.settings.lr == chosen.lr
    # The decision rule is set on the same validation split, after the model is final (see decision.py).
    valid_probabilities = best.predict_proba(validation[0])
    best.class_bias = fit_class_bias(valid_probabilities, validation[1])
    record = {"criterion": "validation accuracy (ties: lower validation loss, then grid order)",
              "validation_examples": len(valid_idx), "trained_on_examples": len(train_idx),
              "validation_fraction": VALID_FRACTION, "validation_minimum": VALID_MIN, "stratified": True,
              "max_epochs": settings.epochs, "patience": settings.patience, "lr_grid": list(grid), "pinned": pinned,
              "candidates": [c.to_dict() for c in candidates],
              "chosen": {"lr": chosen.lr, "epoch": chosen.best_epoch, "valid_accuracy": chosen.best["valid_accuracy"],
                         "valid_loss": chosen.best["valid_loss"]},
              "decision": decision_record(valid_probabilities, validation[1], best.class_bias)}
    return best, record


__all__ = ["GRID_PROFILES", "LR_GRIDS", "VALID_FRACTION", "VALID_MIN", "Candidate", "carve_validation",
           "check_lr_grid", "choose", "resolve_grid", "select_and_train"]
