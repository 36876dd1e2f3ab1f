"""Token-level views of a release, shared by the inversion attacks (whitebox, MLP, AE, MI).

An inversion attack scores *original tokens*: the model tokenizer's tokens of the original text
(no special tokens). A :class:`TokenView` pairs one record's original tokens with what the
adversary observed for them:

* ``token_embeddings`` releases are 1:1 with the original tokens (the embedding defense releases
  one noisy vector per tokenizer token), so original position i aligns with released position i;
* ``texts`` releases are re-tokenized with the same tokenizer and aligned to the original tokens
  with :func:`rapt_audit.mechanisms.align.align` (positional when the lengths match, difflib otherwise). The
  released vector of a released token is its (clean) input embedding — all a text release carries.

Scoring counts *regular* original tokens only (those with a row in the embedding space;
``[UNK]`` and special-token strings typed in the text have none and cannot be released by any
defense). An original token without a released counterpart counts as not recovered.

:func:`content_prior` and :func:`content_metrics` put the attacks' per-token guesses in the unit every
inversion attack reports beside its own, content-token recovery (:mod:`rapt_audit.scoring.content_tokens`).
The helpers at the bottom (features with contextual states, nearest rows) serve the learned
attacks (``attacks/_inversion.py``); torch is imported lazily inside them.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from rapt_audit.api.context import RunContext
from rapt_audit.api.digests import array_digest
from rapt_audit.api.types import AttackerData, Estimate, Record, Release, Skip, pair_text
from rapt_audit.mechanisms.align import align
from rapt_audit.encoder.encode import input_rows, padded_inputs, to_device, token_id_lists
from rapt_audit.encoder.vocab import embedding_space
from rapt_audit.scoring.content_tokens import ContentPrior, content_scores, content_tokens, fit_prior, join_pieces
from rapt_audit.scoring.metrics import metric
from rapt_audit.scoring.stats import bootstrap_mean


metric("token_accuracy_top5", "attack", False,
       "fraction of original tokens among the attacker's five best guesses (top-5 token recovery)")

#: Release kinds the token-level attacks can read, in order of preference (the richer one first).
TOKEN_KINDS = ("token_embeddings", "texts")

#: Longest window the encoder sees at once when computing contextual states (512 minus [CLS]/[SEP]).
CONTEXT_WINDOW = 510


@dataclass(frozen=True)
class TokenView:
    """One record's original tokens and what the adversary observed for them.

    Attributes:
        uid: The record's uid.
        original_ids: Model token ids of the original text (no special tokens), int64.
        original_rows: Rows of those tokens in the embedding space (``-1``: not a regular token).
        released_ids: Model ids of the re-tokenized released text (``None`` for vector releases).
        released_vectors: ``(n_released, d)`` float32: released vectors, or the input embeddings
            of the released tokens for text releases.
        alignment: For each original position, the index of its released unit (``-1``: unaligned).
    """

    uid: str
    original_ids: np.ndarray
    original_rows: np.ndarray
    released_ids: np.ndarray | None
    released_vectors: np.ndarray
    alignment: np.ndarray

    @property
    def regular(self) -> np.ndarray:
        """Mask of original positions that are scored (regular tokens)."""
        return self.original_rows >= 0

    @property
    def n_regular(self) -> int:
        """Number of scored original tokens."""
        return int(self.regular.sum())


def release_kind(release_kinds: frozenset[str] | set[str], *, attack: str,
                 supported: Sequence[str] = TOKEN_KINDS) -> str:
    """The release kind the attack reads: the first of ``supported`` present, else :class:`Skip`."""
    for kind in supported:
        if kind in release_kinds:
            return kind
    raise Skip(f"attack {attack!r} needs a per-token release ({' or '.join(supported)}), but the release "
               f"holds only {', '.join(sorted(release_kinds)) or 'nothing'}")


def original_text(record: Record, kind: str) -> str:
    """The text the defense privatized for ``record`` (text defenses join pairs; embeddings do not)."""
    if kind == "texts":
        return pair_text(record.text, record.text_pair)
    return record.text


def build_views(release: Release, records: Sequence[Record], *, ctx: RunContext, kind: str) -> list[TokenView]:
    """One :class:`TokenView` per record, reading the release kind ``kind``.

    Raises:
        ValueError: when the release and the records do not match (order, count, token lengths).
    """
    if tuple(release.uids) != tuple(r.uid for r in records):
        raise ValueError("the release's uids do not match the records' uids in order; attack the release "
                         "with exactly the records it was made from")
    # The vocabulary and the tokenizer come from the encoder layer: what an attacker holding the
    # public model has, independent of any defense's privatization engine.
    space = embedding_space(ctx)
    originals = token_id_lists(ctx, [original_text(r, kind) for r in records])
    views = []
    if kind == "token_embeddings":
        for record, ids, vectors in zip(records, originals, release.token_embeddings):
            vectors = np.asarray(vectors, dtype=np.float32)
            if vectors.ndim != 2 or vectors.shape != (len(ids), space.dim):
                raise ValueError(f"record {record.uid}: the release holds {vectors.shape} token vectors but the "
                                 f"text has {len(ids)} tokenizer tokens of width {space.dim}")
            views.append(TokenView(record.uid, ids, space.rows_of(ids), None, vectors,
                                   np.arange(len(ids), dtype=np.int64)))
        return views
    if kind != "texts":
        raise ValueError(f"unsupported release kind {kind!r}")
    released = token_id_lists(ctx, list(release.user_texts()))
    for record, ids, out in zip(records, originals, released):
        pairs = align(ids.tolist(), out.tolist())
        alignment = np.array([-1 if j is None else j for j in pairs], dtype=np.int64)
        views.append(TokenView(record.uid, ids, space.rows_of(ids), out,
                               np.asarray(space.all_vectors[out], dtype=np.float32).reshape(len(out), space.dim),
                               alignment))
    return views


def views_for(release: Release, records: Sequence[Record], *, ctx: RunContext, attack: str,
              supported: Sequence[str] = TOKEN_KINDS) -> tuple[str, list[TokenView]]:
    """:func:`release_kind` then :func:`build_views`; a :class:`Skip` when nothing is scorable."""
    kind = release_kind(release.kinds, attack=attack, supported=supported)
    views = build_views(release, records, ctx=ctx, kind=kind)
    if sum(v.n_regular for v in views) == 0:
        raise Skip(f"attack {attack!r}: the records hold no regular vocabulary tokens to recover")
    return kind, views


@dataclass(frozen=True)
class Units:
    """Scored original tokens of a list of views, flattened.

    Attributes:
        record: Index of the view each unit belongs to.
        target_row: The original token's row in the embedding space.
        source: Index into :func:`stack_released` of the aligned released unit (``-1``: unaligned).
    """

    record: np.ndarray
    target_row: np.ndarray
    source: np.ndarray

    @property
    def aligned(self) -> np.ndarray:
        """Mask of units with a released counterpart."""
        return self.source >= 0


def units_of(views: Sequence[TokenView]) -> Units:
    """Every regular original token of ``views`` with the flat index of its released unit."""
    offsets = np.cumsum([0] + [len(v.released_vectors) for v in views])
    rec, rows, src = [], [], []
    for i, v in enumerate(views):
        keep = v.regular
        rec.append(np.full(int(keep.sum()), i, dtype=np.int64))
        rows.append(v.original_rows[keep])
        a = v.alignment[keep]
        src.append(np.where(a >= 0, a + offsets[i], -1))
    cat = (lambda xs: np.concatenate(xs).astype(np.int64)) if views else (lambda xs: np.zeros(0, np.int64))
    return Units(cat(rec), cat(rows), cat(src))


def stack_released(views: Sequence[TokenView], states: Sequence[np.ndarray] | None = None) -> np.ndarray:
    """Released vectors of all views stacked (with contextual states appended when given)."""
    parts = [v.released_vectors for v in views]
    if states is not None:
        parts = [np.concatenate([p, s], axis=1) for p, s in zip(parts, states)]
    if not parts:
        return np.zeros((0, 0), dtype=np.float32)
    return np.concatenate(parts).astype(np.float32, copy=False)


def aligned_fraction(units: Units) -> float:
    """Fraction of scored original tokens that have a released counterpart."""
    return float(units.aligned.mean()) if units.source.size else 0.0


def accuracy(hits: np.ndarray, units: Units, n_views: int, *, rng: np.random.Generator) -> Estimate:
    """Token accuracy with records as the bootstrap unit and tokens as weights.

    Args:
        hits: Boolean per unit (unaligned units must already be ``False``).
        units: The units ``hits`` refers to.
        n_views: Number of records (views).
    """
    counts = np.bincount(units.record, minlength=n_views).astype(float)
    correct = np.bincount(units.record, weights=hits.astype(float), minlength=n_views)
    rate = np.divide(correct, counts, out=np.zeros_like(correct), where=counts > 0)
    return bootstrap_mean(rate, weights=counts, rng=rng)


def per_record_mean(values: np.ndarray, units: Units, n_views: int, *, rng: np.random.Generator) -> Estimate:
    """Mean of a per-unit quantity (an MSE) with records as the bootstrap unit, tokens weighted."""
    counts = np.bincount(units.record, minlength=n_views).astype(float)
    sums = np.bincount(units.record, weights=values.astype(float), minlength=n_views)
    means = np.divide(sums, counts, out=np.zeros_like(sums), where=counts > 0)
    return bootstrap_mean(means, weights=counts, rng=rng)


def content_prior(aux: AttackerData, kind: str) -> ContentPrior:
    """The release-ignoring prior of the content-token unit, fitted on the attacker's texts as the defense
    privatizes them for a release of ``kind`` (:func:`original_text`)."""
    return fit_prior(aux, text=functools.partial(original_text, kind=kind))


def content_metrics(guess_rows: np.ndarray, units: Units, truth: Sequence[Record], *, kind: str,
                    prior: ContentPrior, attack: str, ctx: RunContext) -> dict[str, Estimate]:
    """Content-token recovery (:func:`~rapt_audit.scoring.content_tokens.content_scores`) of top-1 guesses.

    Each record's guessed tokens (``guess_rows``: a regular-vocabulary row per unit, ``-1`` for no guess),
    in position order, are joined into words (sub-word pieces glued back by the vocabulary's own
    continuation rule) and scored against the content tokens of the text the defense privatized.
    Bootstrap draws come from a generator of their own, so adding these metrics moves no other number.
    """
    guesses = guessed_content_tokens(guess_rows, units, len(truth), ctx=ctx)
    truths = [content_tokens(original_text(r, kind)) for r in truth]
    return content_scores(guesses, truths, prior, rng=ctx.rng("attack", attack, "content"))


def guessed_content_tokens(guess_rows: np.ndarray, units: Units, n_records: int, *,
                           ctx: RunContext) -> list[frozenset[str]]:
    """Each record's content tokens in its top-1 guesses (``guess_rows``: a regular-vocabulary row per unit,
    ``-1`` for no guess): the guessed tokens, in position order, joined into words with sub-word pieces glued
    back by the vocabulary's own continuation rule."""
    space = embedding_space(ctx)
    rows: list[list[int]] = [[] for _ in range(n_records)]
    for record, row in zip(units.record.tolist(), np.asarray(guess_rows).tolist()):
        rows[record].append(row)
    return [content_tokens(join_pieces([space.tokens[r] if r >= 0 else None for r in seq],
                                       [r >= 0 and bool(space.is_continuation[r]) for r in seq])) for seq in rows]


def abstain_unsure_words(guess_rows: np.ndarray, confidence: np.ndarray, units: Units, threshold: float, *,
                         ctx: RunContext) -> np.ndarray:
    """``guess_rows`` with every guessed word whose least sure piece has ``confidence`` under ``threshold`` taken
    back (``-1``, no guess); words are the guessed pieces glued as :func:`guessed_content_tokens` glues them.

    Content tokens are scored by set F1, which a wrong guess costs as much as a missed word: an attacker that
    names only the words it is sure of is the stronger one. A word is kept or dropped whole; dropping one
    piece would leave a different word."""
    rows = np.asarray(guess_rows)
    if threshold <= 0 or not rows.size:
        return rows
    glued = np.zeros(rows.size, dtype=bool)
    regular = rows >= 0
    glued[regular] = np.asarray(embedding_space(ctx).is_continuation)[rows[regular]]
    glued[1:] &= (units.record[1:] == units.record[:-1]) & regular[:-1]
    glued[0] = False
    starts = np.flatnonzero(~glued)  # each word's first unit; a word runs to the next start
    least = np.minimum.reduceat(np.where(regular, confidence, 0.0), starts)
    unsure = np.repeat(least < threshold, np.diff(np.r_[starts, rows.size]))
    return np.where(unsure, -1, rows)


def features(views: Sequence[TokenView], *, ctx: RunContext, context: bool) -> np.ndarray:
    """Per released unit: its released vector, plus the encoder's contextual state when ``context``."""
    return stack_released(views, contextual_states(views, ctx=ctx) if context else None)


def nearest_rows(table: np.ndarray, queries: np.ndarray, k: int, *, device: str = "cpu",
                 candidates: int = 16, block: int = 1024) -> np.ndarray:
    """The ``k`` L2-nearest table rows per query, nearest first (ties: lowest row).

    A float32 screen (``q·e − ‖e‖²/2``) keeps ``max(candidates, k)`` rows per query, which are
    re-ranked with float64 differences; exact unless the k-th and the last kept candidate are
    within float32 rounding of each other. Used for top-5 guesses (the certified
    :meth:`NearestNeighbourIndex.search` gives the top-1 guess).
    """
    import torch  # lazy (torch)

    t = torch.tensor(np.asarray(table, dtype=np.float32), device=device)  # a copy: the table is read-only
    half_sq = 0.5 * (t.double() ** 2).sum(dim=1).float()
    c = min(max(int(candidates), int(k)), t.shape[0])
    out = np.empty((len(queries), k), dtype=np.int64)
    with torch.inference_mode():
        for s in range(0, len(queries), block):
            q = torch.as_tensor(np.asarray(queries[s:s + block], dtype=np.float32), device=device)
            cand = torch.topk(q @ t.T - half_sq, c, dim=1).indices
            cand = torch.sort(cand, dim=1).values  # stable sort by distance below keeps the lowest row on ties
            diff = t[cand].double() - q.double()[:, None, :]
            order = torch.sort((diff * diff).sum(dim=2), dim=1, stable=True).indices
            out[s:s + block] = cand.gather(1, order)[:, :k].cpu().numpy()
    return out


#: The width of a shared search (:func:`shared_nearest_rows`): ``bayes_inversion``'s widest candidate grid. A
#: narrower request reads the first columns, which are the very rows a narrower search returns (the screen keeps
#: ``max(16, k)`` candidates either way, and the exact re-ranking is stable).
SHARED_WIDTH = 10


def shared_nearest_rows(ctx: RunContext, table: np.ndarray, queries: np.ndarray, k: int) -> np.ndarray:
    """:func:`nearest_rows` of ``queries`` (their first ``k`` columns), searched once per run: a cell's attacks
    search the same released vectors (``whitebox``'s top-k, ``bayes_inversion``'s candidates), and each search of
    the 30,522-row table takes seconds on a CPU. Keyed by the table's and the queries' bytes."""
    width = max(int(k), SHARED_WIDTH)
    # The table's digest is memoised by its id; the memo holds the table itself, so no other array can take that
    # id while the run lasts.
    table_key = ctx.shared(("array_digest", id(table)), lambda: (table, array_digest(table)))[1]
    key = ("nearest_rows", table_key, array_digest(queries), width, ctx.device)
    return ctx.shared(key, lambda: nearest_rows(table, queries, width, device=ctx.device))[:, :int(k)]


def contextual_states(views: Sequence[TokenView], *, ctx: RunContext, batch_size: int = 32) -> list[np.ndarray]:
    """The frozen encoder's last hidden state at every released position of every view.

    The released vectors are fed as ``inputs_embeds`` between the public [CLS]/[SEP] embeddings
    (what a server receiving them would compute); text releases feed their tokens' input
    embeddings, which is the same as feeding their ids. Long sequences run in windows of
    :data:`CONTEXT_WINDOW` tokens, in batches of similar length.

    All released vectors go to the device once, after them [CLS], [SEP] and a zero row
    (:func:`~rapt_audit.encoder.encode.input_rows`); a batch's right-padded input is one gather of
    rows (:func:`~rapt_audit.encoder.encode.padded_inputs`), its states are written into one device
    tensor, and that is read once at the end, so no batch waits for the device.
    """
    import torch  # lazy (torch)

    if not views:
        return []
    model = ctx.encoder()
    net = model.model
    sizes = np.array([len(view.released_vectors) for view in views], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    pieces = [(v, s, len(views[v].released_vectors[s:s + CONTEXT_WINDOW]))
              for v in range(len(views)) for s in range(0, max(int(sizes[v]), 1), CONTEXT_WINDOW)]
    pieces.sort(key=lambda p: p[2])
    total, hidden_size = int(offsets[-1]), net.config.hidden_size
    rows, head, tail, pad_row = input_rows(model, stack_released(views))
    with torch.inference_mode():
        states = torch.zeros(total, hidden_size, device=model.device)
        for start in range(0, len(pieces), batch_size):
            bodies = [offsets[v] + s + np.arange(n) for v, s, n in pieces[start:start + batch_size]]
            embeds, mask = padded_inputs(rows, [np.concatenate([head, body, tail]) for body in bodies], pad_row)
            # flat positions in this batch's output → flat rows of ``states``
            source = np.concatenate([row * embeds.shape[1] + len(head) + np.arange(len(body))
                                     for row, body in enumerate(bodies)])
            hidden = net(inputs_embeds=embeds, attention_mask=mask).last_hidden_state
            states[to_device(np.concatenate(bodies), model.device)] = \
                hidden.float().reshape(-1, hidden_size)[to_device(source, model.device)]
    flat = states.cpu().numpy()
    return [flat[offsets[v]:offsets[v + 1]] for v in range(len(views))]
