"""Running the encoder on (possibly noisy) input embeddings and pooling the output.

Used for the utility of embedding-release defenses: the service receives noisy token embeddings,
adds the public [CLS]/[SEP] embeddings itself, runs the rest of the model, and mean-pools the last
hidden states. The same path gives the clean pooled vectors of the sentence-representation defenses
(:func:`encode_pooled`, memoised per run by :func:`cached_pooled`) and the token ids and input
table that attacks and defenses read (:func:`token_id_lists`, :func:`input_table`).
"""

from __future__ import annotations

import re
from itertools import islice
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from rapt_audit.api.types import Record, uid_key
from rapt_audit.encoder.models import LoadedModel

if TYPE_CHECKING:  # pragma: no cover
    from rapt_audit.pipeline.context import RunContext

MAX_TOKENS = 126  # 128 positions minus [CLS] and [SEP] (the papers' maximum length)


def pad_embeddings(seqs: Sequence):  # noqa: ANN201 - (torch.Tensor, torch.Tensor)
    """Right-pad ``(n_i, d)`` tensors into one ``(batch, max n, d)`` tensor and its attention mask."""
    import torch  # lazy (torch)

    first = seqs[0]
    length = max(x.shape[0] for x in seqs)
    embeds = torch.zeros(len(seqs), length, first.shape[1], device=first.device)
    mask = torch.zeros(len(seqs), length, dtype=torch.long, device=first.device)
    for row, x in enumerate(seqs):
        embeds[row, :x.shape[0]] = x
        mask[row, :x.shape[0]] = 1
    return embeds, mask


def pooled_from_embeddings(model: LoadedModel, sequences: Sequence[np.ndarray], *, batch_size: int = 64) -> np.ndarray:
    """Mean-pooled last hidden states for each sequence of input embeddings ``(n_i, d)``.

    Sequences longer than ``MAX_TOKENS`` are truncated; empty sequences pool [CLS] and [SEP] only.
    """
    import torch  # lazy (torch)

    tok = model.tokenizer
    table = model.model.get_input_embeddings().weight
    cls_vec = table[tok.cls_token_id].detach() if tok.cls_token_id is not None else None
    sep_vec = table[tok.sep_token_id].detach() if tok.sep_token_id is not None else None
    out = np.empty((len(sequences), model.model.config.hidden_size), dtype=np.float32)
    order = np.argsort([len(s) for s in sequences])  # similar lengths together: less padding
    with torch.inference_mode():
        for start in range(0, len(order), batch_size):
            idx = order[start:start + batch_size]
            parts = []
            for i in idx:
                body = torch.as_tensor(np.asarray(sequences[i][:MAX_TOKENS], dtype=np.float32), device=model.device)
                pieces = [v[None] for v in (cls_vec,) if v is not None] + [body.reshape(-1, table.shape[1])]
                pieces += [v[None] for v in (sep_vec,) if v is not None]
                parts.append(torch.cat(pieces))
            embeds, mask = pad_embeddings(parts)
            hidden = model.model(inputs_embeds=embeds, attention_mask=mask).last_hidden_state
            weights = mask.unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * weights).sum(1) / weights.sum(1).clamp(min=1)
            out[idx] = pooled.float().cpu().numpy()
    return out


def token_id_lists(ctx: RunContext, texts: Sequence[str], *, limit: int | None = None) -> list[np.ndarray]:
    """Model token ids of each text (no special tokens), int64; the first ``limit`` of each when given."""
    if not texts:
        return []
    tokenizer = ctx.encoder().tokenizer
    if limit is None:
        return [np.asarray(ids, dtype=np.int64)
                for ids in tokenizer(list(texts), add_special_tokens=False, verbose=False)["input_ids"]]
    return [np.asarray(_first_ids(tokenizer, text, limit), dtype=np.int64) for text in texts]


def _first_ids(tokenizer: Any, text: str, limit: int) -> list[int]:
    """The first ``limit`` token ids of ``text``, tokenizing only a whole-word prefix of it.

    The tokenizer builds every token's encoding (offsets, strings) before it truncates: 225 MB for a
    100,000-word text of which 126 tokens are kept. The words before a whitespace boundary tokenize
    the same alone as in the whole text (normalisation is per character and pre-tokenization splits
    at whitespace), so a prefix of whole words that already yields ``limit`` tokens gives exactly the
    first ``limit`` ids; the prefix doubles until it does or covers the text.
    """
    words = 4 * limit
    while True:
        ends = [m.end() for m in islice(re.finditer(r"\S+", text), words)]
        prefix = text[:ends[-1]] if len(ends) == words else text
        ids = tokenizer(prefix, add_special_tokens=False, verbose=False)["input_ids"]
        if len(ids) >= limit or prefix is text:
            return list(ids[:limit])
        words *= 2


def input_table(ctx: RunContext) -> np.ndarray:
    """The encoder's full input-embedding matrix as float32 numpy (shared per run)."""
    return ctx.shared(("input_embedding_table", ctx.model),
                      lambda: ctx.encoder().model.get_input_embeddings().weight.detach().float().cpu().numpy())


def encode_pooled(ctx: RunContext, texts: Sequence[str]) -> np.ndarray:
    """Mean-pooled last hidden states of the frozen encoder, ``(n, d)`` float32.

    Runs the encoder on the texts' clean input embeddings (with [CLS]/[SEP], up to 128 positions),
    the same path the embedding defenses use for their noisy inputs, so clean and noisy outputs are
    directly comparable.
    """
    model = ctx.encoder()
    if not texts:
        return np.zeros((0, model.model.config.hidden_size), dtype=np.float32)
    table = input_table(ctx)
    # Tokenize and gather only what is encoded, so a 100,000-word text costs what a 126-token one does.
    return pooled_from_embeddings(model, [table[ids] for ids in token_id_lists(ctx, texts, limit=MAX_TOKENS)])


def cached_pooled(ctx: RunContext, records: Sequence[Record], *, tag: str,
                  texts: Sequence[str] | None = None) -> np.ndarray:
    """:func:`encode_pooled` of ``texts`` (default: the records' texts), memoised per run under ``tag``.

    The frozen encoder's output does not depend on ε, so a sweep over ε encodes each record once.
    """
    texts = [r.text for r in records] if texts is None else list(texts)
    key = ("pooled", ctx.model, tag, uid_key(records), len(records))
    return ctx.shared(key, lambda: encode_pooled(ctx, texts))
