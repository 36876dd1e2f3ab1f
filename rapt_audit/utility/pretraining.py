"""Privacy-adaptive pretraining (Qu et al., CIKM 2021, Sec. 3.4): the service adapts its encoder to privatized text.

Before it customizes the public encoder on the users' privatized training texts, the service may
further pretrain the encoder with a masked-language-model loss on *public* text that it privatizes
itself, with the users' mechanism and η. Three objectives differ only in what a masked position
must predict (Qu et al. eqs. 5–7):

* ``vanilla`` — the privatized token at that position (pretraining on fully privatized text);
* ``prob``    — the empirical distribution of several privatizations of that position (10 in the
  paper), each perturbation weighted by its frequency;
* ``denoise`` — the original token, given privatized context.

The user-side component — the token embedding table the user privatizes with — stays frozen, as in
the paper: were it trained, the embeddings would drift to resist the noise, and the mechanism
deployed on users' devices would no longer be the one the privacy analysis covers. The MLM output
layer is tied to that table (BERT's usual tying), so only its transform and bias are trained.

Where we depart from the paper, and why:

* Units are *words* (whitespace-separated units of the privatized text), not WordPieces: PCT2T and
  RAPT privatize words, and token-level T2T is detokenized before release, so a released sequence is
  aligned with the original word by word (:mod:`rapt_audit.mechanisms.align`). A masked word has all
  its sub-tokens masked (whole-word masking) and predicts the first sub-token of its target word.
* Each public text is privatized ``perturbations`` times once, before training; copy k is the input
  of the k-th visit of the text (Qu et al. privatize on the fly — each visit sees fresh noise either
  way), and the same copies supply Prob MLM's distributions.
* No next-sentence loss: MiniLM (a sentence-transformer) has no NSP head, and the downstream tasks
  read mean-pooled states, not [CLS].
* MiniLM ships no MLM head either. Qu et al. start from BERT's trained head; a random one would spend
  the first steps sending noise into the encoder. So the head is first fitted alone, for
  ``head_steps`` steps on the *clean* public text with the encoder frozen (an ordinary MLM head, as a
  public checkpoint would have), and only then does privacy-adaptive pretraining train the encoder.
* Far fewer steps than the paper's 1,000,000 at batch 256 (see :data:`PROFILE_DEFAULTS`).

The BERT masking rule is kept: of the chosen words, 80 % become [MASK], 10 % a random token and 10 %
stay as they are; 15 % of a text's words are chosen, at most 20 (Qu et al.'s settings).

This module trains on what it is given (aligned privatized texts); the text defenses produce those
with their own mechanism (:meth:`rapt_audit.defenses._text.TextDefense.pretraining_texts`).
"""

from __future__ import annotations

import copy
import functools
import math
from dataclasses import asdict, dataclass, replace
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from rapt_audit.api.errors import UnknownNameError, UsageError
from rapt_audit.api.registry import unknown_name_message
from rapt_audit.encoder.encode import to_device
from rapt_audit.utility.on_device import autocast
from rapt_audit.utility.training import DeviceSum, Epochs, adam, fit

#: ``none`` keeps the public encoder as it is.
OBJECTIVES = ("none", "vanilla", "prob", "denoise")

#: Qu et al.'s masking settings (Sec. 5.1).
MASK_RATE, MAX_PREDICTIONS, PERTURBATIONS = 0.15, 20, 10

#: Per profile. ``paper`` keeps Qu et al.'s batch 256, lr 2e-5, length 128 and warm-up share (10,000 of
#: 1,000,000 steps) but runs 10,000 steps, not a million. ``cpu`` and ``smoke`` fit 2 CPU cores: short
#: inputs, small batches and a learning rate usual for so few steps; fixed before any measurement.
PROFILE_DEFAULTS: Mapping[str, Mapping[str, Any]] = {
    "paper": {"steps": 10_000, "head_steps": 1_000, "batch_size": 256, "max_length": 128, "lr": 2e-5, "warmup": 0.01},
    "cpu": {"steps": 150, "head_steps": 100, "batch_size": 16, "max_length": 64, "lr": 1e-4, "warmup": 0.1},
    "smoke": {"steps": 8, "head_steps": 4, "batch_size": 8, "max_length": 32, "lr": 1e-4, "warmup": 0.1},
}
#: The MLM head alone learns fast at a larger rate (the encoder is frozen meanwhile).
HEAD_LR = 1e-3


def check_objective(name: str) -> str:
    """Return ``name`` if it is a pretraining objective, else raise an error listing them."""
    if name in OBJECTIVES:
        return name
    raise UnknownNameError(unknown_name_message("pretraining objective", name, list(OBJECTIVES)))


@dataclass(frozen=True)
class PretrainSettings:
    """Resolved settings of one privacy-adaptive pretraining run (recorded in the result)."""

    objective: str
    steps: int
    head_steps: int
    batch_size: int
    max_length: int
    lr: float
    warmup: float
    mask_rate: float = MASK_RATE
    max_predictions: int = MAX_PREDICTIONS
    perturbations: int = PERTURBATIONS

    @property
    def texts_needed(self) -> int:
        """Public texts to privatize so that every (text, copy) pair is visited about once."""
        return max(1, math.ceil(self.steps * self.batch_size / self.perturbations))

    def to_dict(self) -> dict[str, Any]:
        """Plain-JSON form."""
        return asdict(self)


def resolve_pretrain_settings(objective: str, profile: str,
                              overrides: Mapping[str, Any] | None = None) -> PretrainSettings:
    """Profile defaults for ``objective`` with the user's non-None ``overrides`` on top, checked.

    Raises:
        UnknownNameError: unknown objective. UsageError: a non-positive number of steps or size.
    """
    objective = check_objective(objective)
    d = PROFILE_DEFAULTS.get(profile, PROFILE_DEFAULTS["cpu"])
    settings = PretrainSettings(objective=objective, **d)
    given = {k: v for k, v in (overrides or {}).items() if v is not None}
    settings = replace(settings, **given)
    for key in ("steps", "head_steps", "batch_size", "max_length", "max_predictions", "perturbations"):
        value = getattr(settings, key)
        if not isinstance(value, int) or value < (0 if key == "head_steps" else 1):
            name = "pretrain_steps" if key == "steps" else key
            raise UsageError(f"{name} must be a positive integer, got {value!r}")
    if not settings.lr > 0:
        raise UsageError(f"the pretraining lr must be > 0, got {settings.lr}")
    if not 0 < settings.mask_rate < 1 or not 0 <= settings.warmup < 1:
        raise UsageError(f"mask_rate must lie in (0, 1) and warmup in [0, 1); got {settings.mask_rate}, "
                         f"{settings.warmup}")
    return settings


@dataclass(frozen=True)
class AlignedText:
    """One public text and several privatizations of it, aligned unit by unit.

    Attributes:
        original: The original units (words).
        copies: Each privatization's released units.
        source: For each copy, for each released unit, the index of the original unit it replaces
            (None where the alignment found none).
    """

    original: tuple[str, ...]
    copies: tuple[tuple[str, ...], ...]
    source: tuple[tuple[int | None, ...], ...]

    def __post_init__(self) -> None:
        if len(self.copies) != len(self.source) or any(len(c) != len(s) for c, s in zip(self.copies, self.source)):
            raise ValueError("each privatized copy needs one source index per released unit")


class FirstPieces:
    """The first sub-token id of a word, memoised (a word's prediction target)."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self._ids: dict[str, int | None] = {}

    def __call__(self, word: str) -> int | None:
        if word not in self._ids:
            ids = self.tokenizer(word, add_special_tokens=False)["input_ids"]
            self._ids[word] = int(ids[0]) if ids else None
        return self._ids[word]


def mask_batch(tokenizer: Any, pieces: FirstPieces, texts: Sequence[AlignedText], copies: Sequence[int],
               settings: PretrainSettings, rng: np.random.Generator) -> dict[str, Any]:
    """Inputs and targets of one MLM batch: text ``texts[b]`` as privatized in copy ``copies[b]``.

    Returns ``input_ids`` and ``attention_mask`` (torch tensors), ``rows`` and ``positions`` of the
    masked words' first sub-tokens, and per masked word ``target_ids`` / ``target_weights``
    (``(n, k)`` numpy arrays; one column with weight 1 for ``vanilla`` and ``denoise``, up to
    ``perturbations`` columns of frequencies for ``prob``; zero weights pad).
    """
    import torch  # lazy (torch)

    words = [list(t.copies[c]) for t, c in zip(texts, copies)]
    enc = tokenizer(words, is_split_into_words=True, truncation=True, max_length=settings.max_length,
                    padding=True, return_tensors="pt")
    input_ids = enc["input_ids"].clone()
    vocab = int(len(tokenizer))
    mask_id = int(tokenizer.mask_token_id)
    rows, positions, targets = [], [], []
    for b, (text, c) in enumerate(zip(texts, copies)):
        spans: dict[int, list[int]] = {}
        for pos, word in enumerate(enc.word_ids(b)):
            if word is not None:
                spans.setdefault(word, []).append(pos)
        candidates = [j for j in sorted(spans) if text.source[c][j] is not None]
        if not candidates:
            continue
        n_mask = min(settings.max_predictions, len(candidates), max(1, round(settings.mask_rate * len(spans))))
        for j in sorted(rng.choice(candidates, size=n_mask, replace=False)):
            target = _targets(text, c, int(j), settings.objective, pieces)
            if not target:
                continue
            span, draw = spans[int(j)], rng.random()
            if draw < 0.8:
                input_ids[b, span] = mask_id
            elif draw < 0.9:  # BERT: a random token; the remaining 10 % keep the input
                input_ids[b, span] = torch.as_tensor(rng.integers(0, vocab, size=len(span)), dtype=input_ids.dtype)
            rows.append(b)
            positions.append(span[0])
            targets.append(target)
    width = max((len(t) for t in targets), default=1)
    ids = np.zeros((len(targets), width), dtype=np.int64)
    weights = np.zeros((len(targets), width), dtype=np.float32)
    for k, target in enumerate(targets):
        for col, (token, weight) in enumerate(sorted(target.items())):
            ids[k, col], weights[k, col] = token, weight
    return {"input_ids": input_ids, "attention_mask": enc["attention_mask"], "rows": np.asarray(rows, dtype=np.int64),
            "positions": np.asarray(positions, dtype=np.int64), "target_ids": ids, "target_weights": weights}


def _targets(text: AlignedText, c: int, j: int, objective: str, pieces: FirstPieces) -> dict[int, float]:
    """What released unit ``j`` of copy ``c`` must predict, as ``{token id: weight}`` (empty: nothing)."""
    if objective == "vanilla":
        token = pieces(text.copies[c][j])
        return {token: 1.0} if token is not None else {}
    origin = text.source[c][j]
    if objective == "denoise":
        token = pieces(text.original[origin])
        return {token: 1.0} if token is not None else {}
    # prob: every copy's privatization of the same original unit, weighted by its frequency (eq. 6)
    counts: dict[int, float] = {}
    for k, sources in enumerate(text.source):
        for jk, o in enumerate(sources):
            if o == origin:
                token = pieces(text.copies[k][jk])
                if token is not None:
                    counts[token] = counts.get(token, 0.0) + 1.0
                break
    total = sum(counts.values())
    return {token: n / total for token, n in counts.items()} if total else {}


def load_mlm(loaded: Any, *, seed: int) -> Any:
    """The public encoder with a fresh MLM head whose output layer is tied to the (frozen) word embeddings."""
    import torch  # lazy (torch)
    from transformers import AutoModelForMaskedLM  # lazy (transformers)
    from transformers.utils import logging as hf_logging  # lazy (transformers)

    torch.manual_seed(seed)
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # "some weights were newly initialised": the MLM head, as expected
    try:
        model = AutoModelForMaskedLM.from_pretrained(loaded.path)
    finally:
        hf_logging.set_verbosity(verbosity)
    model.to(loaded.device)
    # The user-side component: the table users privatize with must stay the one they deploy.
    model.get_input_embeddings().weight.requires_grad_(False)
    return model


def pretrain_encoder(loaded: Any, texts: Sequence[AlignedText], settings: PretrainSettings, *, seed: int,
                     progress: Callable[[int, int], None] | None = None,
                     precision: str = "fp32") -> tuple[Any, list[dict[str, float]]]:
    """Further pretrain ``loaded``'s encoder on privatized public ``texts``; return it and its loss curve.

    Args:
        loaded: The public model (``LoadedModel``); it is not modified.
        texts: Public texts with their aligned privatizations (at least one copy each).
        settings: The objective and its settings (:func:`resolve_pretrain_settings`).
        seed: Seeds the head's initialisation, the batch order and the masking.
        progress: Called with (step, total steps), the head's steps included.
        precision: Of the forward passes (:func:`rapt_audit.utility.on_device.autocast`).

    Returns:
        A copy of ``loaded.model`` holding the adapted weights (the word embeddings unchanged), and the
        mean MLM loss of every tenth of each phase (``phase`` ``"head"`` on clean text, then ``"adapt"``).
    """
    if settings.objective == "none":
        raise ValueError("objective 'none' means no pretraining; keep the public encoder")
    if not texts:
        raise UsageError("the pretraining corpus holds no text to privatize")
    model = load_mlm(loaded, seed=seed)
    if not hasattr(model, "cls"):
        raise UsageError(f"privacy-adaptive pretraining needs a BERT-style encoder with an MLM head; {loaded.spec} "
                         f"loads as {type(model).__name__}")
    rng = np.random.default_rng(seed)
    pieces = FirstPieces(loaded.tokenizer)
    done = [0]
    total = settings.head_steps + settings.steps

    def ticked() -> None:
        done[0] += 1
        if progress is not None:
            progress(done[0], total)

    curve: list[dict[str, float]] = []
    encoder_parameters = [p for p in model.base_model.parameters() if p.requires_grad]
    if settings.head_steps:  # the head alone, on clean text (see the module docstring)
        clean = [AlignedText(t.original, (t.original,), (tuple(range(len(t.original))),)) for t in texts]
        for parameter in encoder_parameters:
            parameter.requires_grad_(False)
        curve += _mlm_phase(model, loaded, clean, replace(settings, objective="vanilla", steps=settings.head_steps,
                                                          lr=HEAD_LR), pieces, rng, phase="head", tick=ticked,
                            precision=precision)
        for parameter in encoder_parameters:
            parameter.requires_grad_(True)
    curve += _mlm_phase(model, loaded, texts, settings, pieces, rng, phase="adapt", tick=ticked, precision=precision)
    adapted = copy.deepcopy(loaded.model)
    missing, unexpected = adapted.load_state_dict(model.base_model.state_dict(), strict=False)
    if unexpected or any(not k.startswith("pooler.") for k in missing):
        raise RuntimeError(f"adapted encoder does not match the public one: missing {missing}, unexpected {unexpected}")
    adapted.eval()
    return adapted, curve


def _mlm_phase(model: Any, loaded: Any, texts: Sequence[AlignedText], settings: PretrainSettings,
               pieces: FirstPieces, rng: np.random.Generator, *, phase: str,
               tick: Callable[[], None], precision: str) -> list[dict[str, float]]:
    """``settings.steps`` MLM steps on ``texts`` for the parameters that require gradients; the loss curve."""
    import torch  # lazy (torch)

    copies = len(texts[0].copies)
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = adam(trainable, lr=settings.lr, weight_decay=0.01, decoupled=True)
    warmup = max(1, round(settings.warmup * settings.steps))
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: min(
        (step + 1) / warmup, max(0.0, (settings.steps - step) / max(1, settings.steps - warmup))))
    # One epoch of exactly `steps` batches over the (text, copy) pairs, visited in random order.
    pairs = len(texts) * copies
    order = np.concatenate([rng.permutation(pairs) for _ in range(-(-settings.steps * settings.batch_size // pairs))])
    batches = [order[s * settings.batch_size:(s + 1) * settings.batch_size] for s in range(settings.steps)]
    curve: list[dict[str, float]] = []
    # The loss is summed on the device and read at each point of the curve: a read per step would wait
    # for the device at every step.
    window, window_steps = DeviceSum(("mlm_loss",), loaded.device), 0
    every = max(1, settings.steps // 10)
    step = 0
    frozen_encoder = not any(p.requires_grad for p in model.base_model.parameters())

    def loss(batch: np.ndarray) -> Any:
        nonlocal window_steps
        picked = [texts[i // copies] for i in batch]
        visit = [int(i % copies) for i in batch]
        prepared = mask_batch(loaded.tokenizer, pieces, picked, visit, settings, rng)
        if len(prepared["rows"]) == 0:
            return None
        with torch.set_grad_enabled(not frozen_encoder):
            hidden = model.base_model(input_ids=to_device(prepared["input_ids"], loaded.device),
                                      attention_mask=to_device(prepared["attention_mask"], loaded.device)
                                      ).last_hidden_state
        rows, positions = to_device(prepared["rows"], loaded.device), to_device(prepared["positions"], loaded.device)
        # Only the masked positions go through the vocabulary projection (a 30k-wide matmul).
        log_p = torch.log_softmax(model.cls(hidden[rows, positions]), dim=-1)
        ids = to_device(prepared["target_ids"], loaded.device)
        weights = to_device(prepared["target_weights"], loaded.device)
        value = -(weights * log_p.gather(1, ids)).sum(1).mean()  # eqs. 5–7: one-hot or frequency targets
        window.add("mlm_loss", value)
        window_steps += 1
        return value

    def after_step() -> None:
        nonlocal step, window_steps
        schedule.step()
        step += 1
        if step % every == 0 or step == settings.steps:
            total = window.read()["mlm_loss"]
            mean = total / window_steps if window_steps else math.nan
            curve.append({"phase": phase, "step": step, "mlm_loss": round(mean, 4)})
            window_steps = 0
        tick()

    fit(model, loss=loss, batches=lambda: batches, optimizer=optimizer, stop=Epochs(1), after_step=after_step,
        autocast=functools.partial(autocast, loaded.device, precision))
    return curve


__all__ = ["AlignedText", "FirstPieces", "MASK_RATE", "MAX_PREDICTIONS", "OBJECTIVES", "PERTURBATIONS",
           "PROFILE_DEFAULTS", "PretrainSettings", "check_objective", "load_mlm", "mask_batch", "pretrain_encoder",
           "resolve_pretrain_settings"]
