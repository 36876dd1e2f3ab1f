"""Run-scoped construction of the privatization engines (built once per run, shared by defenses
and by adaptive attackers that re-run the mechanism on their own data)."""

from __future__ import annotations

import itertools
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from rapt_audit.api.context import RunContext
from rapt_audit.api.files import write_cache_atomic
from rapt_audit.encoder.vocab import EmbeddingSpace, embedding_space
from rapt_audit.mechanisms.analysis_pack import tagger_key, texts_digest
from rapt_audit.mechanisms.nn_search import NearestNeighbourIndex
from rapt_audit.mechanisms.pos import LEXICON_VERSION, PUBLIC_MIN_COUNT, load_tagger, model_strings, vocabulary_lexicon
from rapt_audit.mechanisms.privatize import TokenEngine, WordEngine, mean_piece_vectors


#: Indexes over read-only tables, kept for the process by the table's identity: the embedding space is read
#: once a process (``encoder.vocab``), so every run of a sweep or test session searches the same read-only
#: table, whose index took a copy and a sort of 30k rows again per run (118 builds in a test session). A
#: read-only table cannot change under its index; a writable one (a run's own candidate rows) is not kept.
_READ_ONLY_INDEXES: dict[tuple[str, str, int], tuple[weakref.ref, NearestNeighbourIndex]] = {}
_READ_ONLY_INDEXES_MAX = 4


def nearest_index(ctx: RunContext, table_key: str, table: np.ndarray) -> NearestNeighbourIndex:
    """The run's shared index over ``table`` (built once per ``table_key`` and device; over a read-only table,
    once a process while that table lives, unless the run starts cold: ``ctx.cold_queries``)."""

    def build() -> NearestNeighbourIndex:
        if table.flags.writeable or ctx.cold_queries:  # a cold start's index changes as it answers: its own
            return NearestNeighbourIndex(table, device=ctx.device, cold_queries=ctx.cold_queries)
        key = (table_key, str(ctx.device), id(table))
        kept = _READ_ONLY_INDEXES.get(key)
        if kept is not None and kept[0]() is table:
            return kept[1]
        index = NearestNeighbourIndex(table, device=ctx.device)
        if len(_READ_ONLY_INDEXES) >= _READ_ONLY_INDEXES_MAX:
            _READ_ONLY_INDEXES.pop(next(iter(_READ_ONLY_INDEXES)))
        _READ_ONLY_INDEXES[key] = (weakref.ref(table), index)
        return index

    return ctx.shared(("nn_index", table_key, ctx.device), build)


def vocabulary_index(ctx: RunContext) -> NearestNeighbourIndex:
    """The run's shared index over the regular vocabulary of its embedding space.

    T2T decodes to this table, and the white-box attacker (who holds the public model) searches it.
    """
    return nearest_index(ctx, "regular", embedding_space(ctx).vectors)


def tagger(ctx: RunContext):  # noqa: ANN201 - spacy.Language
    """spaCy's tagger, loaded once per run."""
    return ctx.shared(("tagger",), load_tagger)


def token_engine(ctx: RunContext) -> TokenEngine:
    """Token-level T2T over the model's regular vocabulary."""

    def build() -> TokenEngine:
        return TokenEngine(embedding_space(ctx), ctx.tokenizer(), vocabulary_index(ctx))

    return ctx.shared(("token_engine", ctx.model), build)


@dataclass(frozen=True)
class Candidates:
    """The words a word-level engine may release, and its groups of them.

    Rows ``0 … V−1`` are the embedding space's own (its tokens and vectors); PCT2T's lexicon adds after
    them the public words the vocabulary holds only as sub-word pieces (``extra_vectors``: each the mean
    of its pieces, the same way an input word is embedded, RAPT Eq. 2).
    """

    words: tuple[str, ...]
    space_vectors: np.ndarray
    extra_vectors: np.ndarray
    groups: dict[str, np.ndarray]  # group name → rows of its candidate words

    def space_rows(self, group: str) -> np.ndarray:
        """The rows of ``group`` that are the embedding space's own tokens (its vocabulary words)."""
        rows = self.groups[group]
        return rows[rows < self.space_vectors.shape[0]]

    def vectors_of(self, rows: np.ndarray) -> np.ndarray:
        """float32 vectors of candidate ``rows`` (no whole table of both parts is ever built: 93 MB for MiniLM)."""
        size = self.space_vectors.shape[0]
        out = np.empty((len(rows), self.space_vectors.shape[1]), dtype=np.float32)
        own = rows < size
        out[own] = self.space_vectors[rows[own]]
        out[~own] = self.extra_vectors[rows[~own] - size]
        return out


def pos_candidates(ctx: RunContext) -> Candidates:
    """PCT2T's candidates: the vocabulary lexicon's words, their vectors and the POS groups (cached on disk)."""

    def build() -> Candidates:
        space = embedding_space(ctx)
        cache_file = lexicon_file(ctx)
        lexicon = vocabulary_lexicon(lambda: tagger(ctx), lexicon_words(space), public_text=lambda: ctx.public_text()[1],
                                     public_words=lambda: model_strings(tagger(ctx)),
                                     admit=lambda words: held_as_pieces(ctx, words), cache_file=cache_file)
        row_of = {token: row for row, token in enumerate(space.tokens)}
        extra = sorted({w for members in lexicon.values() for w in members} - row_of.keys())
        row_of.update((word, len(space.tokens) + i) for i, word in enumerate(extra))
        return Candidates(tuple(space.tokens) + tuple(extra), space.vectors, _piece_vectors(ctx, extra, cache_file),
                          {category: np.array([row_of[w] for w in members if w in row_of], dtype=np.int64)
                           for category, members in lexicon.items()})

    return ctx.shared(("pos_candidates", ctx.model), build)


def _piece_vectors(ctx: RunContext, words: list[str], lexicon: Path) -> np.ndarray:
    """The vectors of the lexicon's words held as pieces, cached beside it for the model (a warm start reads
    them in 30 ms instead of tokenizing and averaging 30,000 words in 0.6 s)."""
    space = embedding_space(ctx)
    path = lexicon.with_name(f"{lexicon.stem}-vectors-{space.model_fingerprint[:16]}.npy")
    try:
        cached = np.load(path, allow_pickle=False)
        if cached.shape == (len(words), space.dim) and cached.dtype == np.float32:
            return cached
    except (OSError, ValueError):
        pass  # missing or unreadable: rebuilt
    vectors = mean_piece_vectors(space, ctx.tokenizer(), words)
    write_cache_atomic(path, lambda handle: np.save(handle, vectors))
    return vectors


def pos_groups(ctx: RunContext) -> dict[str, np.ndarray]:
    """POS category → rows (into :func:`pos_candidates`' words) of its candidate words."""
    return pos_candidates(ctx).groups


def held_as_pieces(ctx: RunContext, words: Sequence[str]) -> list[bool]:
    """Whether the vocabulary holds each word only as two or more regular pieces (no [UNK], no special token)."""
    if not words:
        return []
    encoded = ctx.tokenizer()(list(words), add_special_tokens=False)["input_ids"]
    lengths = np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded))
    ids = np.fromiter(itertools.chain.from_iterable(encoded), dtype=np.int64, count=int(lengths.sum()))
    owner = np.repeat(np.arange(len(encoded)), lengths)  # the word each piece belongs to
    irregular = np.bincount(owner[embedding_space(ctx).rows_of(ids) < 0], minlength=len(encoded))
    return ((lengths >= 2) & (irregular == 0)).tolist()


def lexicon_words(space: EmbeddingSpace) -> list[str]:
    """The vocabulary entries the POS lexicon tags: whole-word regular tokens."""
    return [space.tokens[row] for row in whole_word_rows(space)]


def lexicon_file(ctx: RunContext) -> Path:
    """Where the run's POS lexicon is cached: keyed by the words tagged and the public text tagged, not the
    model, so a bundle's fp16-restored model (another fingerprint, the same vocabulary) reads the lexicon
    packed for the original."""
    words = lexicon_words(embedding_space(ctx))
    corpus, texts = ctx.public_text()
    return (ctx.cache_dir / "pos" / f"words-{texts_digest(words)[:16]}-{corpus}-{texts_digest(texts)[:12]}"
            f"-min{PUBLIC_MIN_COUNT}-v{LEXICON_VERSION}-{tagger_key(ctx)}.json")


def whole_word_rows(space: EmbeddingSpace) -> np.ndarray:
    """Rows of regular tokens that are whole words (not continuation pieces)."""
    return np.flatnonzero(~space.is_continuation).astype(np.int64)


def word_engine(ctx: RunContext, grouping: str) -> WordEngine:
    """Word-level engine whose groups are POS categories (``"pos"``) or all whole words (``"word"``)."""

    def build() -> WordEngine:
        space = embedding_space(ctx)
        candidates = (pos_candidates(ctx) if grouping == "pos" else
                      Candidates(tuple(space.tokens), space.vectors, np.zeros((0, space.dim), np.float32),
                                 {"word": whole_word_rows(space)}))

        def index_for(group: str):  # noqa: ANN202
            return nearest_index(ctx, f"{grouping}:{group}", candidates.vectors_of(candidates.groups[group]))

        return WordEngine(space, ctx.tokenizer(), candidates.words, candidates.groups, index_for)

    return ctx.shared(("word_engine", ctx.model, grouping), build)
