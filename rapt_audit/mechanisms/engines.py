"""Run-scoped construction of the privatization engines (built once per run, shared by defenses
and by adaptive attackers that re-run the mechanism on their own data)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from rapt_audit.api.context import RunContext
from rapt_audit.encoder.vocab import EmbeddingSpace, embedding_space
from rapt_audit.mechanisms.analysis_pack import tagger_key, texts_digest
from rapt_audit.mechanisms.nn_search import NearestNeighbourIndex
from rapt_audit.mechanisms.pos import PUBLIC_MIN_COUNT, load_tagger, vocabulary_lexicon
from rapt_audit.mechanisms.privatize import TokenEngine, WordEngine


def nearest_index(ctx: RunContext, table_key: str, table: np.ndarray) -> NearestNeighbourIndex:
    """The run's shared index over ``table`` (built once per ``table_key`` and device)."""
    return ctx.shared(("nn_index", table_key, ctx.device),
                      lambda: NearestNeighbourIndex(table, device=ctx.device, cold_queries=ctx.cold_queries))


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


def pos_groups(ctx: RunContext) -> dict[str, np.ndarray]:
    """POS category → rows of its candidate words (the vocabulary lexicon, cached on disk)."""

    def build() -> dict[str, np.ndarray]:
        space = embedding_space(ctx)
        lexicon = vocabulary_lexicon(lambda: tagger(ctx), lexicon_words(space), public_text=lambda: ctx.public_text()[1],
                                     cache_file=lexicon_file(ctx))
        row_of = {token: row for row, token in enumerate(space.tokens)}
        return {category: np.array([row_of[w] for w in members if w in row_of], dtype=np.int64)
                for category, members in lexicon.items()}

    return ctx.shared(("pos_groups", ctx.model), build)


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
            f"-min{PUBLIC_MIN_COUNT}-{tagger_key(ctx)}.json")


def whole_word_rows(space: EmbeddingSpace) -> np.ndarray:
    """Rows of regular tokens that are whole words (not continuation pieces)."""
    return np.flatnonzero(~space.is_continuation).astype(np.int64)


def word_engine(ctx: RunContext, grouping: str) -> WordEngine:
    """Word-level engine whose groups are POS categories (``"pos"``) or all whole words (``"word"``)."""

    def build() -> WordEngine:
        space = embedding_space(ctx)
        groups = pos_groups(ctx) if grouping == "pos" else {"word": whole_word_rows(space)}

        def index_for(group: str):  # noqa: ANN202
            return nearest_index(ctx, f"{grouping}:{group}", space.vectors[groups[group]])

        return WordEngine(space, ctx.tokenizer(), groups, index_for)

    return ctx.shared(("word_engine", ctx.model, grouping), build)
