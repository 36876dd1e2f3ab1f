"""Customizing the public model on privatized text: prompt tuning, prefix tuning, LoRA, fine-tuning.

This is the service side of a text defense's utility (RAPT Sec. III-B). The service holds the public
encoder, receives privatized training texts and labels, and customizes the encoder with one of

* ``prompt`` — prompt tuning (Lester et al.): trainable virtual tokens prepended to the input;
* ``prefix`` — prefix tuning (Li & Liang): trainable key/value prefixes in every layer;
* ``lora``   — LoRA on the attention query and value projections (r 16, α 32, dropout 0.05);
* ``full``   — full fine-tuning (the Qu et al., CIKM 2021 baseline).

The three parameter-efficient methods come from ``peft``; the backbone stays frozen for them. Every
method trains a linear task head on the mean of the input's hidden states. When the defense is RAPT,
the input starts with m privatized *plain tokens*; their hidden states feed a reconstruction head
``softmax(W_down · W_up · g)`` (two bias-free linear layers, hidden size c) that predicts the original
plain tokens, the plain positions are left out of the task head's mean, and the loss is
``L_task + L_rec`` with ``L_rec`` summed over the m plain tokens (RAPT eqs. 5–6). The head is dropped
after training: the model the service keeps is the task model alone. The model itself is built in
:mod:`rapt_audit.utility.task_model`; a token-embedding release trains the same way, its released
vectors standing in for the input embeddings of the text (:mod:`rapt_audit.utility.token_vectors`).

The learning rate and the epoch are chosen on a validation split carved from the privatized training
texts (:mod:`rapt_audit.utility.selection`); here, :func:`train_classifier` trains one learning rate,
with early stopping when it is handed that validation split. The test split is never read here.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable, Mapping

import numpy as np

from rapt_audit.api.errors import DataError, UnknownNameError, UsageError
from rapt_audit.api.registry import closest
from rapt_audit.utility.decision import biased_probabilities
from rapt_audit.utility.on_device import FirstNonFinite, ServiceInput, autocast, check_precision, tokenize
from rapt_audit.utility.task_model import TrainSettings, build_task_model, run_batch
from rapt_audit.utility.training import DeviceSum, Diverged, EarlyStopping, Epochs, adam, fit, length_batches

#: The customization methods, in the order the paper reports them.
METHODS = ("prompt", "prefix", "lora", "full")

#: Per-profile defaults. ``paper`` is RAPT's NLU setting (Adam, lr 6e-5, batch 128, 4 epochs, max
#: length 128, 150 prompt tokens, prefix length 10) and Qu et al.'s fine-tuning setting (lr 2e-5,
#: batch 32, 3 epochs), with two departures: ``epochs`` is a *maximum* (the paper's plus 2) under
#: early stopping on a validation split, and the lr is searched on that split over a grid holding
#: the paper's value (:data:`rapt_audit.utility.selection.LR_GRIDS`): a value tuned for BERT-base
#: need not suit prompt tuning on a 384-d MiniLM. ``cpu`` and ``smoke`` fit one run on 2 CPU cores:
#: shorter inputs and prompts, batch 16, at most 2 epochs, and one lr per method (a grid of one).
#: The prompt lr 1e-2 won on validation data (SST-2, 1,000 training texts: T2T at η = ∞ and 100,
#: RAPT at η = 100; see rapt_audit.utility.selection); the others are usual values, not yet measured.
#: ``patience``: epochs without a better validation accuracy before training stops.
PROFILE_DEFAULTS: Mapping[str, Mapping[str, Any]] = {
    "paper": {"epochs": {"full": 5}, "epochs_default": 6, "batch_size": {"full": 32}, "batch_default": 128,
              "max_length": 128, "lr": {"prompt": 6e-5, "prefix": 6e-5, "lora": 6e-5, "full": 2e-5},
              "virtual_tokens": {"prompt": 150, "prefix": 10}, "patience": 2},
    "cpu": {"epochs": {}, "epochs_default": 2, "batch_size": {}, "batch_default": 16, "max_length": 64,
            "lr": {"prompt": 1e-2, "prefix": 1e-3, "lora": 5e-4, "full": 5e-5},
            "virtual_tokens": {"prompt": 20, "prefix": 10}, "patience": 1},
    "smoke": {"epochs": {}, "epochs_default": 2, "batch_size": {}, "batch_default": 16, "max_length": 32,
              "lr": {"prompt": 1e-2, "prefix": 1e-3, "lora": 5e-4, "full": 5e-5},
              "virtual_tokens": {"prompt": 8, "prefix": 4}, "patience": 1},
}

#: Steps between reads of the device's "a loss was not finite" flag (also read at each epoch's end).
DIVERGENCE_CHECK_STEPS = 50
#: Prediction batch: this many texts, or 2× the training batch when larger (no gradients, less memory).
EVAL_BATCH_MIN = 64


def check_method(name: str) -> str:
    """Return ``name`` if it is a customization method, else raise an error listing them."""
    if name in METHODS:
        return name
    hint = closest(name, list(METHODS))
    suggestion = f" (did you mean {hint[0]!r}?)" if hint else ""
    raise UnknownNameError(f"unknown customization method {name!r}{suggestion}; choose one of: "
                           f"{', '.join(METHODS)} (or 'bow' for the quick bag-of-words probe of T2T/PCT2T)")


def resolve_settings(method: str, profile: str, overrides: Mapping[str, Any] | None = None) -> TrainSettings:
    """Profile defaults for ``method`` with the user's non-None ``overrides`` on top, checked.

    Raises:
        UnknownNameError: unknown method. UsageError: a non-positive size or learning rate.
    """
    method = check_method(method)
    d = PROFILE_DEFAULTS.get(profile, PROFILE_DEFAULTS["cpu"])
    settings = TrainSettings(method=method, epochs=d["epochs"].get(method, d["epochs_default"]),
                             lr=d["lr"][method], batch_size=d["batch_size"].get(method, d["batch_default"]),
                             max_length=d["max_length"], virtual_tokens=d["virtual_tokens"].get(method, 0),
                             patience=d["patience"])
    given = {k: v for k, v in (overrides or {}).items() if v is not None}
    settings = replace(settings, **given)
    for key in ("epochs", "batch_size", "max_length", "rec_hidden", "lora_r", "patience"):
        if getattr(settings, key) < 1:
            raise UsageError(f"{key} must be a positive integer, got {getattr(settings, key)}")
    if settings.method in ("prompt", "prefix") and settings.virtual_tokens < 1:
        raise UsageError(f"virtual_tokens must be >= 1 for {settings.method} tuning, got {settings.virtual_tokens}")
    if not settings.rec_weight >= 0:
        raise UsageError(f"rec_weight must be >= 0 (1 in the paper), got {settings.rec_weight}")
    if not 0 < settings.lr < float("inf"):
        raise UsageError(f"lr must be a finite number > 0, got {settings.lr}")
    if not 0 <= settings.lora_dropout < 1:
        raise UsageError(f"lora_dropout must be in [0, 1), got {settings.lora_dropout}")
    check_precision(settings.precision)
    return settings


@dataclass(frozen=True)
class PlainTokens:
    """RAPT's plain tokens: the fixed word sequence k and each word's index in the head's vocabulary."""

    words: tuple[str, ...]
    targets: tuple[int, ...]
    vocabulary_size: int

    def __post_init__(self) -> None:
        if len(self.words) != len(self.targets):
            raise ValueError("one target index per plain word is needed")


def check_positions(settings: TrainSettings, plain_count: int, max_positions: int) -> None:
    """Fail early when prompt + plain tokens + text + [CLS]/[SEP] exceed the model's positions.

    Prompt tuning's virtual tokens take positions in the input; prefix tuning's prefixes shift the
    position ids of the input by their length, so both count.
    """
    total = settings.virtual_tokens + plain_count + settings.max_length + 2
    if total > max_positions:
        raise UsageError(
            f"{settings.virtual_tokens} virtual tokens + {plain_count} plain tokens + {settings.max_length} text "
            f"tokens + 2 special tokens = {total} positions, more than the model's maximum of {max_positions}; "
            "lower virtual_tokens, plain_tokens or max_length")


@dataclass
class TrainedClassifier:
    """A customized task model, its settings and its training history.

    ``history`` has one entry per epoch run: the mean training losses and, with a validation split,
    ``valid_accuracy`` and ``valid_loss``. ``best_epoch`` is the epoch whose state the model holds.
    ``class_bias`` is the decision rule set on the validation split (:mod:`rapt_audit.utility.decision`),
    added to the logits of every prediction; None predicts from the logits as they are.
    """

    model: Any
    tokenizer: Any
    settings: TrainSettings
    plain_count: int
    device: str
    history: list[dict[str, float]] = field(default_factory=list)
    best_epoch: int = 0
    class_bias: np.ndarray | None = None

    def predict_proba(self, texts: ServiceInput) -> np.ndarray:
        """Class probabilities for privatized ``texts`` (eval mode, no reconstruction head needed).

        ``texts`` are tokenized once (or come tokenized); batches of ``max(64, 2 × training batch)``
        texts of similar length run on the device and the probabilities are read back once.
        """
        import torch  # lazy (torch)

        self.model.eval()
        n_labels = self.model.task_head.out_features
        if len(texts) == 0:
            return np.zeros((0, n_labels), dtype=np.float32)
        tokens = tokenize(self.tokenizer, texts, plain_count=self.plain_count, max_length=self.settings.max_length,
                          device=self.device)
        size = max(EVAL_BATCH_MIN, 2 * self.settings.batch_size)
        order = np.argsort(tokens.chars)
        out = torch.zeros((len(tokens), n_labels), dtype=torch.float32, device=self.device)
        with torch.inference_mode(), autocast(self.device, self.settings.precision):
            for start in range(0, len(order), size):
                batch = tokens.batch(order[start:start + size])
                logits, _ = run_batch(self.model, batch)
                out[batch["rows"]] = torch.softmax(logits.float(), -1)
        probabilities = out.cpu().numpy()
        if self.class_bias is None:
            return probabilities
        return biased_probabilities(probabilities, self.class_bias).astype(np.float32)


def train_classifier(loaded: Any, texts: ServiceInput, labels: np.ndarray, settings: TrainSettings,
                     *, n_labels: int, seed: int, plain: PlainTokens | None = None, reconstruction: bool = True,
                     validation: tuple[ServiceInput, np.ndarray] | None = None,
                     progress: Callable[[int, int], None] | None = None) -> TrainedClassifier:
    """Customize ``loaded``'s encoder on privatized ``texts`` and return the task model.

    Args:
        loaded: The public model (rapt_audit.encoder.models.LoadedModel); it is copied, never modified.
        texts: Privatized training texts; with ``plain``, each starts with the m privatized plain words.
            Tokenized here, or already (:func:`~rapt_audit.utility.on_device.tokenize`, once per grid); or
            a token-embedding release (:class:`~rapt_audit.utility.token_vectors.TokenVectors`), whose
            vectors are the input embeddings of the text positions.
        labels: Integer task labels in ``0..n_labels-1``.
        settings: Method and hyperparameters (:func:`resolve_settings`).
        n_labels: Number of classes.
        seed: Seeds initialisation, dropout and batch order (same seed, same model on the same device).
        plain: RAPT's plain tokens, or None (T2T/PCT2T, or the "without plain tokens" ablation).
        reconstruction: Add L_rec (needs ``plain``); False is the "without reconstruction" ablation.
        validation: Held-out privatized training texts and labels: with them, training stops early on
            validation accuracy (at most ``settings.epochs``, patience ``settings.patience``) and the
            model keeps its best epoch; without them it runs exactly ``settings.epochs`` epochs.
        progress: Called with (step, total steps).

    Raises:
        DataError: empty training split or a label outside ``0..n_labels-1``.
        Diverged: a training loss or a validation prediction became NaN or infinite (its ``history``
            holds the epochs finished before). Losses are checked on the device, read every
            :data:`DIVERGENCE_CHECK_STEPS` steps and at each epoch's end (no synchronisation per step).
    """
    import torch  # lazy (torch)

    if len(texts) == 0:
        raise DataError("the training split is empty; customization needs labelled training examples")
    labels = np.asarray(labels, dtype=np.int64)
    if labels.min() < 0 or labels.max() >= n_labels:
        raise DataError(f"task labels must lie in 0..{n_labels - 1}; found {labels.min()}..{labels.max()}")
    plain_count = len(plain.words) if plain is not None else 0
    check_positions(settings, plain_count, int(loaded.model.config.max_position_embeddings))
    torch.manual_seed(seed)
    use_rec = plain is not None and reconstruction and plain_count > 0
    model = build_task_model(loaded, settings, n_labels, rec_vocabulary=plain.vocabulary_size if use_rec else 0)
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = adam(trainable, lr=settings.lr)  # RAPT: Adam, no weight decay
    targets = torch.tensor(plain.targets, device=loaded.device) if use_rec else None
    y = torch.as_tensor(labels, device=loaded.device)
    tokens = tokenize(loaded.tokenizer, texts, plain_count=plain_count, max_length=settings.max_length,
                      device=loaded.device)
    if validation is not None:
        validation = (tokenize(loaded.tokenizer, validation[0], plain_count=plain_count,
                               max_length=settings.max_length, device=loaded.device), validation[1])
    total, step = settings.epochs * -(-len(tokens) // settings.batch_size), 0
    # Per epoch, weighted by batch size, on the device (read once per epoch: no synchronisation per step).
    sums = DeviceSum(("task_loss", "rec_loss", "rec_accuracy") if use_rec else ("task_loss",), loaded.device)
    nonfinite = FirstNonFinite(loaded.device)
    records: list[dict[str, float]] = []  # per finished epoch: training statistics
    scores: list[dict[str, float]] = []  # per scored epoch: validation accuracy and loss

    def history() -> list[dict[str, float]]:
        return [{**record, **score} for record, score in zip(records, scores)] if validation else list(records)

    def check_finite() -> None:
        bad = nonfinite.read()
        if bad is not None:  # the steps on it turned the weights into NaN: this lr is lost
            raise Diverged(f"the training loss became {bad} in epoch {len(records) + 1} at lr {settings.lr:g}",
                           epoch=len(records) + 1, history=history())

    def loss(idx: np.ndarray) -> torch.Tensor:  # runs inside fit's autocast (the run's precision)
        batch = tokens.batch(idx)
        logits, rec_logits = run_batch(model, batch, plain=True)
        task_loss = torch.nn.functional.cross_entropy(logits, y[batch["rows"]])
        value = task_loss
        sums.add("task_loss", task_loss, len(idx))
        if rec_logits is not None:
            flat = rec_logits.reshape(-1, rec_logits.shape[-1])
            expected = targets.repeat(len(idx))
            # Eq. 6 sums over the m plain tokens; averaged over the examples of the batch.
            rec_loss = torch.nn.functional.cross_entropy(flat, expected, reduction="sum") / len(idx)
            sums.add("rec_loss", rec_loss, len(idx))
            sums.add("rec_accuracy", (flat.argmax(-1) == expected).float().mean(), len(idx))
            value = task_loss + settings.rec_weight * rec_loss
        nonfinite.watch(value)
        if (step + 1) % DIVERGENCE_CHECK_STEPS == 0:  # ``step`` steps were taken before this one
            check_finite()
        return value

    def advance() -> None:
        nonlocal step
        step += 1
        if progress is not None:
            progress(step, total)

    def epoch_record(epoch: int) -> dict[str, float]:
        check_finite()
        record = {"epoch": epoch, **{name: value / len(tokens) for name, value in sums.read().items()}}
        records.append(record)
        return record

    def valid_accuracy(scored: Any) -> float:
        valid_texts, valid_labels = validation
        probabilities = TrainedClassifier(scored, loaded.tokenizer, settings, plain_count,
                                          loaded.device).predict_proba(valid_texts)
        if not np.isfinite(probabilities).all():
            raise Diverged(f"validation predictions became NaN in epoch {len(records)} at lr {settings.lr:g}",
                           epoch=len(records), history=history())
        truth = np.asarray(valid_labels, dtype=np.int64)
        picked = probabilities[np.arange(len(truth)), truth]
        scores.append({"valid_accuracy": float((probabilities.argmax(1) == truth).mean()),
                       "valid_loss": float(-np.log(np.clip(picked, 1e-12, None)).mean())})
        return scores[-1]["valid_accuracy"]

    # Epoch selection maximises validation accuracy, the measure the benchmark reports; a tie keeps the
    # earlier epoch (EarlyStopping needs a strict improvement).
    stop = (EarlyStopping(settings.epochs, valid_accuracy, maximize=True, patience=settings.patience)
            if validation is not None else Epochs(settings.epochs))
    # Batches of similar length (issue #29): short texts no longer pay for a random batch's longest one.
    outcome = fit(model, loss=loss, batches=length_batches(tokens.lengths, settings.batch_size,
                                                           rng=np.random.default_rng(seed)),
                  optimizer=optimizer, stop=stop, after_step=advance, end_epoch=epoch_record,
                  autocast=lambda: autocast(loaded.device, settings.precision))
    trained = TrainedClassifier(model, loaded.tokenizer, settings, plain_count, loaded.device, history(),
                                outcome.best_epoch)
    model.drop_reconstruction()  # the service keeps the task model only
    return trained


__all__ = ["DIVERGENCE_CHECK_STEPS", "EVAL_BATCH_MIN", "METHODS", "PROFILE_DEFAULTS", "PlainTokens", "TrainedClassifier",
           "check_method", "check_positions", "resolve_settings", "train_classifier"]
