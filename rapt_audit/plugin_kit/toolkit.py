"""What PCT2T is built from, in the shapes a third-party defense needs: a POS category's public lexicon with its
vectors and exact nearest-neighbour index, and the embedding of any word the way PCT2T embeds its input words.

The built-ins reach these through :mod:`rapt_audit.mechanisms.engines`, whose shapes serve the engines (rows into
a candidate table that spans two arrays, an index looked up by an internal key). These wrappers hand a plugin the
same objects, built once per run and shared with the built-ins of the same run (PCT2T's index over the nouns *is*
:func:`pos_lexicon`'s ``index`` for ``"noun"``), in a shape that needs no knowledge of how they are stored.

They live here, with the plugin author's other tools, rather than beside the engines: nothing a built-in defense
runs changes, so the code digest that makes results comparable (:func:`rapt_audit.api.files.package_code_digest`,
which leaves the plugin kit out) stays the same, and published cells stay joinable. :mod:`rapt_audit.plugin`
re-exports them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from rapt_audit.api.context import RunContext
from rapt_audit.api.errors import UnknownNameError
from rapt_audit.api.registry import unknown_name_message
from rapt_audit.encoder.vocab import embedding_space
from rapt_audit.mechanisms.engines import nearest_index, pos_candidates
from rapt_audit.mechanisms.nn_search import NearestNeighbourIndex
from rapt_audit.mechanisms.pos import CATEGORIES
from rapt_audit.mechanisms.privatize import mean_piece_vectors

__all__ = ["CategoryLexicon", "pos_lexicon", "word_vectors"]


@dataclass(frozen=True, eq=False)
class CategoryLexicon:
    """The public candidate words of one POS category, as PCT2T draws its replacements from them.

    Attributes:
        category: The category's name (a key of :data:`rapt_audit.mechanisms.pos.CATEGORIES`, e.g. ``"noun"``).
        words: The candidate words, normalised as the model's vocabulary stores them (lower-case, no accents,
            for MiniLM; compare with :func:`rapt_audit.mechanisms.privatize.normalize_word`). Built from the
            model's vocabulary, public text and spaCy's string table, never from the data being protected.
        vectors: float32 ``(len(words), d)``, read-only: row ``i`` is ``words[i]``'s embedding, the mean of its
            sub-token input embeddings (as :func:`word_vectors` embeds any word).
        index: Exact L2 nearest-neighbour search over ``vectors``; the rows it returns index ``words``.
    """

    category: str
    words: tuple[str, ...]
    vectors: np.ndarray
    index: NearestNeighbourIndex


def pos_lexicon(ctx: RunContext, category: str) -> CategoryLexicon:
    """The run's public lexicon of ``category`` (PCT2T's candidates), built once per run.

    The lexicon of all categories is cached on disk (about 20 s to build the first time on one core); the
    category's index is the one PCT2T searches in the same run.

    Raises:
        UnknownNameError: for a name that is not a category, listing the valid ones.
    """
    if category not in CATEGORIES:
        raise UnknownNameError(unknown_name_message("POS category", category, list(CATEGORIES)))

    def build() -> CategoryLexicon:
        candidates = pos_candidates(ctx)
        rows = candidates.groups[category]
        # The key PCT2T's word engine gives this group's index (engines.word_engine), so both share one index.
        index = nearest_index(ctx, f"pos:{category}", candidates.vectors_of(rows))
        vectors = index.table.view()
        vectors.flags.writeable = False  # a read-only view: the index searches the array it shares
        return CategoryLexicon(category, tuple(candidates.words[row] for row in rows.tolist()), vectors, index)

    return ctx.shared(("plugin_kit", "pos_lexicon", ctx.model, category), build)


def word_vectors(ctx: RunContext, words: Sequence[str]) -> np.ndarray:
    """float32 ``(len(words), d)``: each word's mean sub-token input embedding, as PCT2T embeds an input word.

    Any string works (a name, a misspelling, a word no lexicon holds); a lexicon's word gets its row of
    :attr:`CategoryLexicon.vectors`, so a search for a listed word finds the word itself first, at distance 0.
    """
    return mean_piece_vectors(embedding_space(ctx), ctx.tokenizer(), list(words))
