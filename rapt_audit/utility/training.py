"""The one training loop: mini-batch gradient steps on a torch model until a stopping rule says stop.

Every model the suite trains goes through :func:`fit` — the customized encoder
(:mod:`~rapt_audit.utility.customize`), the learned attacks (MLP and autoencoder inversion, NER,
attribute inference), CAPE's adversarial training, SnD's denoiser and the representation defenses'
utility classifier. What differs between them is passed in, not forked:

* the **loss** of one batch, a function of the batch's indices (it may tally statistics on the side);
* the **batches** of one epoch, drawn from the caller's seeded generator (:func:`shuffled`,
  :func:`shuffled_even`, or :func:`length_batches` for texts: batches of similar length);
* the **optimizer** (and, through ``after_step``, a learning-rate schedule);
* the **stopping rule**: :class:`Epochs` (a fixed number) or :class:`EarlyStopping` (a validation
  score after every epoch, optional patience, the best epoch's state restored).

Random numbers are drawn in one fixed order — each epoch's batch order first, then whatever the
forward passes draw (dropout) batch by batch — so the same seed gives the same weights.

Imports from the package only :func:`~rapt_audit.encoder.encode.to_device`, which moves batch
indices to the device without waiting for it (the encoder feeds its own inputs with it). torch is imported lazily by the
helpers that build tensors (the loop itself needs none of it), so importing this module stays light.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, ContextManager, Iterable, Mapping, Sequence

import numpy as np

from rapt_audit.encoder.encode import to_device

#: One epoch's batches: index arrays into the training data, in training order.
Batches = Callable[[], Iterable[np.ndarray]]


class Diverged(ArithmeticError):
    """Training diverged: a loss (or a prediction) became NaN or infinite.

    Raised by a caller's ``loss`` or ``score`` (:func:`fit` itself checks nothing, so that losses that
    are never read cost no device synchronisation); ``history`` holds the per-epoch statistics of the
    epochs that finished before it, and ``epoch`` the epoch in which it happened.
    """

    def __init__(self, message: str, *, epoch: int, history: list[Any] | None = None) -> None:
        super().__init__(message)
        self.epoch = epoch
        self.history = list(history or [])


@dataclass(frozen=True)
class Epochs:
    """Stopping rule: train exactly ``epochs`` epochs and keep the last state."""

    epochs: int


@dataclass(frozen=True)
class EarlyStopping:
    """Stopping rule: score the model on held-out data after every epoch and keep the best epoch.

    Attributes:
        epochs: At most this many epochs.
        score: ``score(model)`` → the validation score, called with the model in eval mode; it must
            read the trainer's own held-out data only (an attacker's validation data; the service's
            validation split carved from its training texts), never a test split.
        maximize: True when a higher score is better.
        patience: Stop after this many epochs in a row without a strictly better score; None runs
            all ``epochs``.
        untrained: The untrained model (epoch 0) is a candidate too, so training that never beats
            the initialisation on validation data is not kept.
        untrained_score: Epoch 0's score when the caller knows it without evaluating the model
            (``untrained`` only; None: ``score`` is called on the untrained model).
    """

    epochs: int
    score: Callable[[Any], float]
    maximize: bool = True
    patience: int | None = None
    untrained: bool = False
    untrained_score: float | None = None

    def better(self, score: float, best: float | None) -> bool:
        """Whether ``score`` strictly improves on ``best`` (anything improves on no score)."""
        return best is None or (score > best if self.maximize else score < best)


@dataclass
class TrainOutcome:
    """What :func:`fit` returns (the model itself is trained in place).

    Attributes:
        best_epoch: The epoch whose state the model now holds (0: untrained; the last epoch run
            under :class:`Epochs`).
        best_score: Its validation score (None under :class:`Epochs`).
        scores: Validation score after each epoch, starting at epoch 0 when the untrained model
            is a candidate, else at epoch 1 (empty under :class:`Epochs`).
        history: What ``end_epoch`` returned after each epoch (empty without it).
        epochs_run: How many epochs were trained (fewer than asked when patience ran out).
    """

    best_epoch: int
    best_score: float | None
    scores: list[float] = field(default_factory=list)
    history: list[Any] = field(default_factory=list)
    epochs_run: int = 0


def fit(model: Any, *, loss: Callable[[np.ndarray], Any], batches: Batches, optimizer: Any,
        stop: Epochs | EarlyStopping, after_step: Callable[[], Any] | None = None,
        end_epoch: Callable[[int], Any] | None = None,
        autocast: Callable[[], ContextManager[Any]] = contextlib.nullcontext) -> TrainOutcome:
    """Train ``model`` in place: for each epoch, one optimizer step per batch, then the stopping rule.

    Args:
        model: A torch module (for several parts, an ``nn.ModuleList`` of them): put in train mode
            for each epoch and in eval mode to be scored and at the end.
        loss: ``loss(indices)`` → the scalar loss tensor of one batch, or None for a batch with
            nothing to learn (no step is taken).
        batches: Called once per epoch, before its first step: that epoch's batches of indices.
        optimizer: A torch optimizer over the trainable parameters.
        stop: :class:`Epochs` or :class:`EarlyStopping`.
        after_step: Called after every optimizer step (a learning-rate schedule, a progress bar).
        end_epoch: Called with the epoch number (from 1) after its last step; what it returns is
            appended to :attr:`TrainOutcome.history` (per-epoch training statistics).
        autocast: A fresh context for every forward pass (each ``loss`` call and each validation
            ``score``): ``functools.partial(rapt_audit.utility.on_device.autocast, device, precision)``
            runs them in the run's precision; the backward pass and the optimizer step stay outside it,
            as torch's mixed-precision recipe has it. Default: float32, nothing changes.

    Returns:
        The :class:`TrainOutcome`; under :class:`EarlyStopping` the model holds the best epoch's state.
    """
    early = stop if isinstance(stop, EarlyStopping) else None
    outcome = TrainOutcome(best_epoch=0, best_score=None)
    best_state = None
    if early is not None and early.untrained:
        if early.untrained_score is None:
            model.eval()
            with autocast():
                outcome.best_score = early.score(model)
        else:
            outcome.best_score = early.untrained_score
        outcome.scores.append(outcome.best_score)
        best_state = _snapshot(model)
    since = 0  # epochs since the last improvement
    for epoch in range(1, stop.epochs + 1):
        model.train()
        for indices in batches():
            with autocast():
                value = loss(indices)
            if value is None:
                continue
            optimizer.zero_grad(set_to_none=True)
            value.backward()
            optimizer.step()
            if after_step is not None:
                after_step()
        outcome.epochs_run = epoch
        if end_epoch is not None:
            outcome.history.append(end_epoch(epoch))
        if early is None:
            outcome.best_epoch = epoch
            continue
        model.eval()
        with autocast():
            score = early.score(model)
        outcome.scores.append(score)
        if early.better(score, outcome.best_score):
            outcome.best_score, outcome.best_epoch, since = score, epoch, 0
            best_state = _snapshot(model)
        else:
            since += 1
            if early.patience is not None and since >= early.patience:
                break
    if best_state is not None:
        model.load_state_dict(best_state)
    model.eval()
    return outcome


def _snapshot(model: Any) -> dict[str, Any]:
    """A detached copy of the model's state (parameters and buffers)."""
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def shuffled(n: int, size: int, *, rng: np.random.Generator) -> Batches:
    """Each epoch, a fresh permutation of ``range(n)`` cut into consecutive batches of ``size`` (the last shorter)."""
    def epoch() -> list[np.ndarray]:
        order = rng.permutation(n)
        return [order[start:start + size] for start in range(0, n, size)]

    return epoch


def shuffled_even(n: int, size: int, *, rng: np.random.Generator) -> Batches:
    """Each epoch, a fresh permutation of ``range(n)`` split into ``ceil(n / size)`` batches of near-equal size."""
    return lambda: np.array_split(rng.permutation(n), max(1, math.ceil(n / size)))


def length_batches(lengths: Sequence[int] | np.ndarray, size: int, *, rng: np.random.Generator) -> Batches:
    """Each epoch, batches of texts of similar length in a fresh random order (issue #29: less padding).

    A batch is cut to its own longest row (:func:`padded_rows`), so a random batch of short texts pays
    for the one long text in it. Here the texts are sorted by length plus a uniform jitter of up to 4
    tokens (so equal lengths mix differently each epoch), cut into consecutive batches of ``size``,
    and the batches are shuffled. On SST-2 at the ``cpu`` profile this cuts the positions a prompt-tuning
    epoch computes roughly in half; which texts share a batch is no longer uniform, a known and small
    effect on SGD (the order of batches stays random).
    """
    lengths = np.asarray(lengths, dtype=float)

    def epoch() -> list[np.ndarray]:
        order = np.argsort(lengths + rng.uniform(0, 4, size=len(lengths)), kind="stable")
        batches = [order[i:i + size] for i in range(0, len(order), size)]
        return [batches[i] for i in rng.permutation(len(batches))]

    return epoch


def padded_rows(tensors: Mapping[str, Any], lengths: np.ndarray, idx: np.ndarray,
                device: str) -> tuple[Any, dict[str, Any]]:
    """Rows ``idx`` of right-padded ``(n, width)`` tensors on ``device``, cut to the longest of those rows.

    Texts tokenized once with ``padding=True`` give, cut this way, exactly the tensors that
    tokenizing the batch alone gives, so no tokenizer runs per step. ``lengths`` (on the host) are
    the rows' token counts. Returns the rows as a device tensor (:func:`to_device`) and the cut tensors.
    """
    rows, width = to_device(idx, device), int(lengths[idx].max())
    return rows, {key: value[rows, :width] for key, value in tensors.items()}


@dataclass(frozen=True)
class DeviceSplit:
    """A split prepared once on the model's device, from which every batch is cut by indexing.

    The ``(n, width)`` tensors named in :attr:`WIDE` are right-padded to the split's longest row and a
    batch is trimmed to its own longest (:func:`padded_rows`); :attr:`ROWS` names other per-row tensors
    (taken by row, never trimmed; ``None`` where absent). What differs between a split of texts
    (:class:`~rapt_audit.utility.on_device.Tokenized`) and one of released vectors
    (:class:`~rapt_audit.utility.token_vectors.Embedded`) are the extra tensors a subclass adds and names.

    Attributes:
        input_ids, attention_mask: ``(n, width)`` tensors.
        task_mask: Attended positions the task head's mean reads.
        lengths: Attended positions per row, on the host (a batch is trimmed without reading the device).
        chars: The size of each row's source (prediction batches rows of similar length together).
        plain_count, max_length: What the split was prepared for.
    """

    input_ids: Any
    attention_mask: Any
    task_mask: Any
    lengths: np.ndarray
    chars: np.ndarray
    plain_count: int
    max_length: int

    WIDE: ClassVar[tuple[str, ...]] = ("input_ids", "attention_mask", "task_mask")
    ROWS: ClassVar[tuple[str, ...]] = ()

    def __len__(self) -> int:
        return len(self.lengths)

    def batch(self, idx: np.ndarray) -> dict[str, Any]:
        """Rows ``idx``: the :attr:`WIDE` tensors trimmed to their longest row, the :attr:`ROWS` tensors
        present, and ``rows`` (``idx`` as a device tensor)."""
        rows, out = padded_rows({k: getattr(self, k) for k in self.WIDE}, self.lengths, np.asarray(idx),
                                self.input_ids.device)
        out["rows"] = rows
        out.update({k: getattr(self, k)[rows] for k in self.ROWS if getattr(self, k) is not None})
        return out

    def take(self, idx: np.ndarray) -> Any:
        """The rows ``idx`` as a split of their own (same padding width, which :meth:`batch` trims; what is
        not per row, such as a shared table of vectors, is shared, not copied)."""
        idx = np.asarray(idx, dtype=np.int64)
        rows = to_device(idx, self.input_ids.device)
        per_row = {k: None if getattr(self, k) is None else getattr(self, k)[rows] for k in (*self.WIDE, *self.ROWS)}
        return dataclasses.replace(self, **per_row, lengths=self.lengths[idx], chars=self.chars[idx])



def supervised_loss(model: Any, x: np.ndarray, y: np.ndarray, criterion: Callable[[Any, Any], Any], *,
                    device: str) -> Callable[[np.ndarray], Any]:
    """``loss(indices) = criterion(model(x[indices]), y[indices])``, with ``x`` and ``y`` moved to ``device`` once
    (each batch's indices follow without a device synchronisation, see :func:`to_device`)."""
    import torch  # lazy (torch)

    xt, yt = torch.as_tensor(x, device=device), torch.as_tensor(y, device=device)

    def loss(indices: np.ndarray) -> Any:
        rows = to_device(indices, device)
        return criterion(model(xt[rows]), yt[rows])

    return loss


class DeviceSum:
    """Per-epoch training statistics summed on the device and read once, at the end of the epoch.

    ``float(loss)`` at every step waits for the device; adding the detached value to a float64 tensor
    on the device does not, and gives the same sum as Python floats (float32 → float64 is exact, and
    the additions happen in the same order in float64).
    """

    def __init__(self, names: Iterable[str], device: str) -> None:
        import torch  # lazy (torch)

        self._zero = lambda: torch.zeros((), dtype=torch.float64, device=device)
        self._sums = {name: self._zero() for name in names}

    def add(self, name: str, value: Any, weight: Any = 1) -> None:
        """Add ``value × weight`` (a tensor or a number; ``weight`` a number or a count tensor) to ``name``."""
        if hasattr(value, "detach"):
            value = value.detach().double()
        self._sums[name] = self._sums[name] + value * weight

    def read(self) -> dict[str, float]:
        """The sums as Python floats (one device synchronisation), then start again from zero."""
        import torch  # lazy (torch)

        names = list(self._sums)
        values = torch.stack([self._sums[n] for n in names]).tolist()
        self._sums = {name: self._zero() for name in names}
        return dict(zip(names, values))


def adam(parameters: Iterable[Any], *, lr: float | None = None, weight_decay: float = 0.0,
         decoupled: bool = False) -> Any:
    """The optimizer every trainer uses: Adam (``decoupled``: AdamW), on torch's fused kernel where it runs.

    ``parameters`` are tensors or param groups (dicts with their own ``lr``; then ``lr`` may be None).
    The fused kernel applies the same update rule in one pass per tensor (measured: the parameters after
    30 steps agree with the per-tensor loop to 1e-8); the per-tensor loop torch picks on CPU otherwise
    re-reads each moment several times, and the fused kernel cut a full fine-tuning of MiniLM from 61 to
    41 s (``reports/benchmarks.md``, "The fused optimizer and the plan's order"). Where torch has no
    fused kernel for the device (an older torch, another backend), the per-tensor loop runs: the same rule.
    """
    import torch  # lazy (torch)

    kind = torch.optim.AdamW if decoupled else torch.optim.Adam
    parameters = list(parameters)
    options: dict[str, Any] = {"weight_decay": weight_decay}
    if lr is not None:
        options["lr"] = lr
    try:
        return kind(parameters, fused=True, **options)
    except (RuntimeError, TypeError, ValueError):  # pragma: no cover - older torch or unsupported device
        return kind(parameters, **options)


__all__ = ["Batches", "DeviceSplit", "DeviceSum", "Diverged", "EarlyStopping", "Epochs", "TrainOutcome", "adam", "fit",
           "length_batches", "padded_rows", "shuffled", "shuffled_even", "supervised_loss"]
