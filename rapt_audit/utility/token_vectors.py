"""A token-embedding release as the service's training and test input (Qu et al., CIKM 2021, Fig. 1.c).

The user sends one noisy vector per token; the service "assembles the input sequence to the encoder
by adding other necessary embeddings (e.g., positional embeddings) and injecting special tokens
(e.g., [CLS])" (Qu et al., Sec. 3.3). :class:`TokenVectors` is that release as received (with a
digest of its bytes, so that a stored service is reused only for the very same vectors);
:func:`embed` prepares it once for training, like :func:`~rapt_audit.utility.on_device.tokenize`
prepares texts: [CLS] before and [SEP] after each sequence (as the encoder's own
:func:`~rapt_audit.encoder.encode.input_rows` adds them), truncated to ``max_length`` released
vectors, as the text path truncates to ``max_length`` tokens. :class:`Embedded` keeps the released
vectors on the model's device and cuts batches from them; the task model
(:mod:`rapt_audit.utility.task_model`) looks up the positions the service adds in its own table and
takes the released vectors, unchanged, as the input embeddings of all the others.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import cached_property
from typing import Any, ClassVar, Sequence

import numpy as np

from rapt_audit.utility.training import DeviceSplit


@dataclass(frozen=True)
class TokenVectors:
    """Released token vectors, as the service receives them: per text, a float32 ``(n_i, d)`` array."""

    sequences: tuple[np.ndarray, ...]

    @classmethod
    def of(cls, sequences: Sequence[np.ndarray]) -> TokenVectors:
        """``sequences`` as float32 arrays (no copy where they already are)."""
        return cls(tuple(np.asarray(s, dtype=np.float32) for s in sequences))

    def __len__(self) -> int:
        return len(self.sequences)

    @cached_property
    def digest(self) -> str:
        """sha256 of every sequence's shape and bytes: other noise, other digest."""
        hasher = hashlib.sha256()
        for sequence in self.sequences:
            hasher.update(np.asarray(sequence.shape, dtype=np.int64).tobytes())
            hasher.update(np.ascontiguousarray(sequence, dtype=np.float32).tobytes())
        return hasher.hexdigest()


@dataclass(frozen=True)
class Embedded(DeviceSplit):
    """A split of released vectors on the model's device, with the ids of the positions the service adds.

    Attributes:
        input_ids: ``(n, width)``: [CLS], the unknown token as a placeholder where a released vector
            goes (never read), [SEP], then padding.
        attention_mask, task_mask: ``(n, width)``; the task head's mean reads every attended position,
            as on the text path without plain tokens.
        at: ``(n, width)`` int64, the row of ``vectors`` at each released position, -1 elsewhere.
        vectors: ``(total + 1, d)`` float32, every released vector of the split and a zero row last
            (shared by :meth:`take`).
        lengths: Attended positions per sequence, on the host (a batch is trimmed to its longest).
        chars: Released vectors per sequence (prediction batches sequences of similar length together).
        plain_count, max_length: What the split was prepared for (no plain tokens; at most ``max_length``
            released vectors per sequence).
    """

    at: Any
    vectors: Any

    WIDE: ClassVar[tuple[str, ...]] = (*DeviceSplit.WIDE, "at")

    def batch(self, idx: np.ndarray) -> dict[str, Any]:
        """Rows ``idx`` trimmed to their longest row, with ``released`` ``(b, w, d)`` and ``released_mask``."""
        out = super().batch(idx)
        at = out.pop("at")
        out["released_mask"] = at >= 0
        out["released"] = self.vectors[at]  # -1 reads the zero row kept last (never used: masked out)
        return out


def embed(tokenizer: Any, release: TokenVectors, *, max_length: int, device: str) -> Embedded:
    """Prepare a release once: at most ``max_length`` vectors per sequence between [CLS] and [SEP], on ``device``."""
    import torch  # lazy (torch)

    bodies = [s[:max_length] for s in release.sequences]
    counts = np.array([len(b) for b in bodies], dtype=np.int64)
    head = [tokenizer.cls_token_id] if tokenizer.cls_token_id is not None else []
    tail = [tokenizer.sep_token_id] if tokenizer.sep_token_id is not None else []
    lengths = counts + len(head) + len(tail)
    width = int(lengths.max()) if len(lengths) else 0
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    ids = np.full((len(bodies), width), pad, dtype=np.int64)
    at = np.full((len(bodies), width), -1, dtype=np.int64)
    firsts = np.concatenate([[0], np.cumsum(counts)[:-1]]) if len(counts) else counts
    for row, (count, first) in enumerate(zip(counts, firsts)):
        ids[row, :len(head)] = head
        ids[row, len(head):len(head) + count] = tokenizer.unk_token_id if tokenizer.unk_token_id is not None else pad
        ids[row, len(head) + count:lengths[row]] = tail
        at[row, len(head):len(head) + count] = first + np.arange(count)
    mask = (np.arange(width)[None, :] < lengths[:, None]).astype(np.int64)
    dim = bodies[0].shape[1] if bodies else 0
    flat = np.concatenate([*bodies, np.zeros((1, dim), dtype=np.float32)])
    attention = torch.as_tensor(mask, device=device)
    return Embedded(input_ids=torch.as_tensor(ids, device=device), attention_mask=attention,
                    task_mask=attention.clone(), lengths=lengths, chars=counts.copy(), plain_count=0,
                    max_length=max_length, at=torch.as_tensor(at, device=device),
                    vectors=torch.as_tensor(flat, dtype=torch.float32, device=device))


__all__ = ["Embedded", "TokenVectors", "embed"]
