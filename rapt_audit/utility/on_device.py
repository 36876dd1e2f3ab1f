"""The service's training data kept on the model's device, and its losses checked there.

Issue #12: on an H100 the customization left the GPU mostly idle, because every training step
re-tokenized its batch on the host and read its losses back (``float(loss)`` waits until the device
has run every queued kernel). Here each split is tokenized once (:func:`tokenize`), a batch is cut
from the device tensors by indexing and trimmed to its longest row (:meth:`DeviceSplit.batch <rapt_audit.utility.training.DeviceSplit.batch>`: the
same input ids and masks that tokenizing the batch alone with ``padding=True`` gives), and a
non-finite loss is noticed on the device (:class:`FirstNonFinite`); the epoch's statistics are summed
there too (:class:`rapt_audit.utility.training.DeviceSum`) and both are read once per epoch.

:func:`autocast` is the mixed precision of training and prediction, for every network a run trains
(``ctx.precision``: bf16 by default where the hardware has it, see :mod:`rapt_audit.encoder.precision`).
"""

from __future__ import annotations

import contextlib
import sys
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, Sequence, Union, get_args

import numpy as np

from rapt_audit.api.errors import DataError, UsageError
from rapt_audit.utility.token_vectors import Embedded, TokenVectors, embed
from rapt_audit.utility.training import DeviceSplit

#: Training precisions: ``fp32``, or ``bf16`` (torch.autocast with bfloat16 on the model's device;
#: parameters, gradients and optimizer state stay fp32). Which one a run uses by default is decided per
#: machine (:func:`rapt_audit.encoder.precision.resolve_precision`): bf16 where the CPU or GPU computes
#: it natively, fp32 elsewhere (a CPU without native bf16 emulates it 3–4× slower).
#: The type of the ``precision`` setting, and its values.
Precision = Literal["fp32", "bf16"]
PRECISIONS: tuple[str, ...] = get_args(Precision)


def check_precision(value: str) -> str:
    """Return ``value`` if it is a training precision, else raise a UsageError listing them."""
    if value not in PRECISIONS:
        raise UsageError(f"precision must be one of {', '.join(PRECISIONS)}, got {value!r}")
    return value


def autocast(device: str, precision: str) -> contextlib.AbstractContextManager:
    """A context in which forward passes run at ``precision`` on ``device``.

    ``bf16``: ``torch.autocast`` with bfloat16 (products in bfloat16, reductions and losses in float32).
    ``fp32``: float32, also inside an enclosing bf16 region (a mechanism's part of a training step, such
    as CAPE's noise, stays exact); where torch is not even imported nothing can be in autocast.
    """
    if check_precision(precision) == "fp32" and "torch" not in sys.modules:
        return contextlib.nullcontext()
    import torch  # lazy (torch)

    kind = torch.device(device).type
    if precision == "fp32":
        return torch.autocast(device_type=kind, enabled=False)
    return torch.autocast(device_type=kind, dtype=torch.bfloat16)


@dataclass(frozen=True)
class Tokenized(DeviceSplit):
    """A split's texts tokenized once, as tensors on the model's device padded to the split's longest text.

    A batch (:meth:`~rapt_audit.utility.training.DeviceSplit.batch`) is trimmed to its longest row; padding
    is right-aligned, so the trimmed rows equal what tokenizing these texts alone with ``padding=True``
    gives: the model sees the same input as a per-batch tokenization.

    Attributes:
        input_ids, attention_mask: ``(n, width)`` tensors, as the tokenizer returns them.
        task_mask: Attended positions that are not plain tokens (the task head's mean reads these).
        lengths: Tokens per text, on the host.
        chars: Characters per text.
        plain_count, max_length: What the texts were tokenized for.
        plain_positions: ``(n, m)`` each plain word's first sub-token, or None without plain tokens.
    """

    plain_positions: Any

    ROWS: ClassVar[tuple[str, ...]] = ("plain_positions",)


#: What the service trains on and answers: texts, a token-embedding release, or either prepared once.
ServiceInput = Union[Sequence[str], Tokenized, TokenVectors, Embedded]


def tokenize(tokenizer: Any, texts: ServiceInput, *, plain_count: int, max_length: int,
             device: str) -> Tokenized | Embedded:
    """Tokenize ``texts`` once, locating the m plain tokens (the first m words) and the task-head positions.

    ``texts`` already tokenized are returned as they are (after checking they were tokenized for the
    same ``plain_count`` and ``max_length``). A token-embedding release (:class:`TokenVectors`) is
    prepared the same once-only way by :func:`~rapt_audit.utility.token_vectors.embed`.

    Raises:
        DataError: a text that does not start with ``plain_count`` words.
        ValueError: ``texts`` tokenized for other settings, plain tokens asked of released vectors, or a
            tokenizer that pads on the left.
    """
    if isinstance(texts, (Tokenized, Embedded)):
        if (texts.plain_count, texts.max_length) != (plain_count, max_length):
            raise ValueError(f"texts tokenized for {texts.plain_count} plain tokens and max_length "
                             f"{texts.max_length}, not {plain_count} and {max_length}")
        return texts
    if isinstance(texts, TokenVectors):
        if plain_count:
            raise ValueError("a token-embedding release has no plain tokens to locate")
        return embed(tokenizer, texts, max_length=max_length, device=device)
    if getattr(tokenizer, "padding_side", "right") != "right":  # Tokenized.batch trims padding on the right
        raise ValueError(f"the tokenizer pads on the {tokenizer.padding_side}; customization needs right padding")
    import torch  # lazy (torch)

    texts = list(texts)
    encoded = tokenizer(texts, truncation=True, max_length=max_length + plain_count + 2, padding=True,
                        return_tensors="pt")
    attention = encoded["attention_mask"]
    task_mask = attention.clone()
    positions = None
    if plain_count:
        positions = torch.as_tensor(_plain_positions(encoded, texts, plain_count))
        task_mask.scatter_(1, positions, 0)
        positions = positions.to(device)
    return Tokenized(input_ids=encoded["input_ids"].to(device), attention_mask=attention.to(device),
                     task_mask=task_mask.to(device), lengths=attention.sum(1).numpy(),
                     chars=np.array([len(t) for t in texts], dtype=np.int64), plain_count=plain_count,
                     max_length=max_length, plain_positions=positions)


def _plain_positions(encoded: Any, texts: Sequence[str], plain_count: int) -> np.ndarray:
    """``(n, m)``: the position of each plain word's first sub-token (word ids grow along a row)."""
    # None (special tokens, padding) becomes NaN, which equals no word index.
    words = np.array([encoding.word_ids for encoding in encoded.encodings], dtype=np.float64)
    positions = np.zeros((len(texts), plain_count), dtype=np.int64)
    found = np.zeros((len(texts), plain_count), dtype=bool)
    for word in range(plain_count):
        hits = words == word
        found[:, word] = hits.any(1)
        positions[:, word] = hits.argmax(1)
    missing = np.flatnonzero(~found.all(1))
    if len(missing):
        row = int(missing[0])
        raise DataError(f"text {row} does not start with {plain_count} plain words (found {int(found[row].sum())}): "
                        f"{texts[row][:80]!r}")
    return positions


class FirstNonFinite:
    """The first non-finite loss of a run, remembered on the device and read when asked.

    ``bool(torch.isfinite(loss))`` at every step waits for the device; this keeps the check on the
    device (a flag and the value) so that the caller reads it once per epoch or every N steps.
    """

    def __init__(self, device: str) -> None:
        import torch  # lazy (torch)

        self._state = torch.zeros(2, dtype=torch.float64, device=device)  # [seen one (0/1), its value]

    def watch(self, loss: Any) -> None:
        """Remember ``loss`` if it is the first non-finite one."""
        import torch  # lazy (torch)

        value = loss.detach().double()
        fresh = (self._state[0] == 0) & ~torch.isfinite(value)
        self._state.copy_(torch.where(fresh, torch.stack([torch.ones_like(value), value]), self._state))

    def read(self) -> float | None:
        """The first non-finite loss watched, or None (one device read)."""
        seen, value = self._state.tolist()
        return value if seen else None


__all__ = ["PRECISIONS", "Precision", "FirstNonFinite", "ServiceInput", "Tokenized", "autocast", "check_precision",
           "tokenize"]
