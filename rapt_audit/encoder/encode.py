"""Running the encoder on (possibly noisy) input embeddings and pooling the output.

Used for the utility of embedding-release defenses: the service receives noisy token embeddings,
adds the public [CLS]/[SEP] embeddings itself, runs the rest of the model, and mean-pools the last
hidden states. The same path gives the clean pooled vectors of the sentence-representation defenses
(:func:`encode_pooled`, memoised per run and kept on disk by :func:`cached_pooled`) and the token ids and input
table that attacks and defenses read (:func:`token_id_lists`, :func:`input_table`). A batch of
ragged sequences is fed one way, here and in the attacks' contextual states: the vectors on the
device once (:func:`input_rows`), the padded batch one gather of them (:func:`padded_inputs`).
"""

from __future__ import annotations

import re
from itertools import islice
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from rapt_audit.api.context import RunContext
from rapt_audit.api.digests import code_digest, state_key
from rapt_audit.api.files import stable_hash, write_cache_atomic
from rapt_audit.api.types import Record, uid_key
from rapt_audit.encoder.models import LoadedModel, model_fingerprint
from rapt_audit.encoder.vocab import embedding_space


MAX_TOKENS = 126  # 128 positions minus [CLS] and [SEP] (the papers' maximum length)


def to_device(array: Any, device: Any) -> Any:
    """A host array (numpy or CPU tensor) as a tensor on ``device``, without waiting for the device.

    A plain host-to-CUDA copy synchronises with the device, so a batch's indices copied that way at
    every step would stall the queue of GPU work once per step. On CUDA the array goes through pinned
    memory with a non-blocking copy (torch's pinned-memory cache keeps the buffer alive until the copy
    is done); on CPU it is the array itself as a tensor (no copy for numpy). It lives in the encoder
    layer so that the encoder's own inputs travel with it too (the encoder may not import
    :mod:`rapt_audit.utility`).
    """
    import torch  # lazy (torch)

    tensor = torch.as_tensor(array)
    if not str(device).startswith("cuda"):
        return tensor
    return tensor.contiguous().pin_memory().to(device, non_blocking=True)


def input_rows(model: LoadedModel, vectors: np.ndarray):  # noqa: ANN201 - (torch.Tensor, ndarray, ndarray, int)
    """The rows :func:`padded_inputs` gathers from: ``vectors``, the public [CLS] and [SEP] embeddings, a zero row.

    Args:
        model: The encoder; the rows go to its device.
        vectors: ``(n, d)`` input embeddings (any array of ``n * d`` values).

    Returns:
        The ``(n + k + 1, d)`` float32 row tensor on the device (``k``: how many of [CLS] and [SEP] the
        model has); the row indices to put before each sequence ([CLS]) and after it ([SEP]), int64
        arrays that are empty where the model has no such token; the zero row's index (padding).
    """
    import torch  # lazy (torch)

    tok, table = model.tokenizer, model.model.get_input_embeddings().weight.detach()
    ends = [i for i in (tok.cls_token_id, tok.sep_token_id) if i is not None]
    body = to_device(np.asarray(vectors, dtype=np.float32).reshape(-1, table.shape[1]), model.device)
    rows = torch.cat([body, table[ends].float() if ends else table[:0].float(),
                      torch.zeros(1, table.shape[1], device=model.device)])
    n = body.shape[0]
    head = np.arange(n, n + (tok.cls_token_id is not None), dtype=np.int64)
    tail = np.arange(n + len(head), n + len(ends), dtype=np.int64)
    return rows, head, tail, len(rows) - 1


def padded_inputs(rows: Any, sequences: Sequence[np.ndarray], pad_row: int):  # noqa: ANN201 - (Tensor, Tensor)
    """One batch's right-padded ``inputs_embeds`` and attention mask, with one gather of device rows.

    Args:
        rows: ``(r, d)`` tensor of input-embedding rows on the model's device (:func:`input_rows`).
        sequences: Per sequence of the batch, the indices into ``rows`` of its positions in order
            ([CLS] and [SEP] included).
        pad_row: Index of a zero row, gathered at the padded positions.

    Returns:
        ``(len(sequences), longest, d)`` embeddings and the int64 ``(len(sequences), longest)`` mask,
        both on ``rows``' device; the indices and the mask travel with :func:`to_device`, so the
        device is not waited for.
    """
    width = max(len(seq) for seq in sequences)
    gather = np.full((len(sequences), width), pad_row, dtype=np.int64)
    mask = np.zeros((len(sequences), width), dtype=np.int64)
    for row, seq in enumerate(sequences):
        gather[row, :len(seq)] = seq
        mask[row, :len(seq)] = 1
    return rows[to_device(gather, rows.device)], to_device(mask, rows.device)


def pooled_from_embeddings(model: LoadedModel, sequences: Sequence[np.ndarray], *, batch_size: int = 64) -> np.ndarray:
    """Mean-pooled last hidden states for each sequence of input embeddings ``(n_i, d)``.

    Sequences longer than ``MAX_TOKENS`` are truncated; empty sequences pool [CLS] and [SEP] only.
    Each batch's vectors go to the device at once (:func:`input_rows`), and its padded input is one
    gather of them (:func:`padded_inputs`).
    """
    import torch  # lazy (torch)

    # Pooled vectors stay on the device, in the input order, and come back in one read at the end: a
    # read per batch would wait for the device at every batch.
    order = np.argsort([len(s) for s in sequences])  # similar lengths together: less padding
    with torch.inference_mode():
        out = torch.empty((len(sequences), model.model.config.hidden_size), dtype=torch.float32, device=model.device)
        for start in range(0, len(order), batch_size):
            idx = order[start:start + batch_size]
            bodies = [np.asarray(sequences[i][:MAX_TOKENS], dtype=np.float32).reshape(-1, model.dim) for i in idx]
            rows, head, tail, pad_row = input_rows(model, np.concatenate(bodies))
            firsts = np.cumsum([0] + [len(body) for body in bodies])
            embeds, mask = padded_inputs(rows, [np.concatenate([head, first + np.arange(len(body)), tail])
                                                for first, body in zip(firsts, bodies)], pad_row)
            hidden = model.model(inputs_embeds=embeds, attention_mask=mask).last_hidden_state
            weights = mask.unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * weights).sum(1) / weights.sum(1).clamp(min=1)
            out[to_device(idx, model.device)] = pooled.float()
    return out.cpu().numpy()


def token_id_lists(ctx: RunContext, texts: Sequence[str], *, limit: int | None = None) -> list[np.ndarray]:
    """Model token ids of each text (no special tokens), int64; the first ``limit`` of each when given."""
    if not texts:
        return []
    tokenizer = ctx.tokenizer()  # the model's tokenizer.json where it ships one: no encoder loaded for ids
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
    """The encoder's full input-embedding matrix as float32 numpy (shared per run): the embedding space's
    ``all_vectors``, read from its disk cache when warm, so a run that needs only the table (the attribute
    attack on a warm cache) does not load the encoder."""
    return ctx.shared(("input_embedding_table", ctx.model), lambda: embedding_space(ctx).all_vectors)


def encode_pooled(ctx: RunContext, texts: Sequence[str], *, model: LoadedModel | None = None) -> np.ndarray:
    """Mean-pooled last hidden states of the frozen encoder, ``(n, d)`` float32.

    Runs the encoder on the texts' clean input embeddings (with [CLS]/[SEP], up to 128 positions),
    the same path the embedding defenses use for their noisy inputs, so clean and noisy outputs are
    directly comparable. ``model`` replaces ``ctx.encoder()`` by a model with the same input table (one
    adapted by privacy-adaptive pretraining, which leaves the word embeddings unchanged).
    """
    model = model if model is not None else ctx.encoder()
    if not texts:
        return np.zeros((0, model.model.config.hidden_size), dtype=np.float32)
    table = input_table(ctx)
    # Tokenize and gather only what is encoded, so a 100,000-word text costs what a 126-token one does.
    return pooled_from_embeddings(model, [table[ids] for ids in token_id_lists(ctx, texts, limit=MAX_TOKENS)])


def cached_pooled(ctx: RunContext, records: Sequence[Record], *, tag: str,
                  texts: Sequence[str] | None = None) -> np.ndarray:
    """:func:`encode_pooled` of ``texts`` (default: the records' texts), memoised per run under ``tag`` and kept
    in ``$RAPT_AUDIT_CACHE/pooled/`` by the texts, the model, the device and the precision.

    The frozen encoder's output does not depend on ε, so a sweep over ε encodes each record once, and on disk
    a benchmark's cells of every ε (CAPE, DPNR, the encoder client) and a re-run read the same vectors back:
    encoding Trustpilot's long reviews was most of a cold CAPE or DPNR attribute cell.
    """
    texts = [r.text for r in records] if texts is None else list(texts)
    key = ("pooled", ctx.model, tag, uid_key(records), len(records))
    return ctx.shared(key, lambda: _stored_pooled(ctx, texts))


#: The code whose output :func:`cached_pooled` keeps: this module (its pooling) and the model loader.
_POOLED_CODE = code_digest(__file__, Path(__file__).with_name("models.py"))


def _stored_pooled(ctx: RunContext, texts: Sequence[str]) -> np.ndarray:
    """:func:`encode_pooled`, read from the cache folder when the same texts were encoded there before; an entry
    that cannot be read or has the wrong shape is encoded again."""
    if ctx.cache_dir is None:
        return encode_pooled(ctx, texts)
    signature = {"kind": "pooled", "model": model_fingerprint(ctx.model, cache_dir=ctx.cache_dir),
                 "texts": stable_hash(list(texts)), "n": len(texts), "device": ctx.device,
                 "precision": ctx.precision, "code": _POOLED_CODE}
    path = Path(ctx.cache_dir) / "pooled" / f"{state_key(signature)}.npy"
    try:
        stored = np.load(path, allow_pickle=False)
        if stored.ndim == 2 and stored.shape[0] == len(texts) and stored.dtype == np.float32:
            return stored
    except (OSError, ValueError):
        pass  # missing or unreadable: encoded again below
    pooled = encode_pooled(ctx, texts)
    write_cache_atomic(path, lambda handle: np.save(handle, pooled))
    return pooled
