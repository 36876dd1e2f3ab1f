"""What a defense author builds from (``rapt_audit.plugin``'s POS tagging, PCT2T's lexicon, nearest-neighbour
search), and the defense guide's example built from them, run exactly as the guide prints it.

The guide's ``NounSwap`` is installed as the third-party plugin ``noun_swap`` (an entry point, loaded as any
installed plugin is), passes the conformance battery, and does what the guide says: each noun becomes one of its
``k`` nearest nouns, every other word stays. The lexicon comes from the POS template (``warm_pos_cache``), so no
test here builds it.
"""

from __future__ import annotations

import re
import types
from pathlib import Path

import numpy as np
import pytest

import rapt_audit.plugin as plugin_api
from rapt_audit.api import plugins
from rapt_audit.api.errors import UnknownNameError
from rapt_audit.api.plugins import DEFENSES
from tests.fake_plugins import guide_module

#: Nouns of several kinds (plural, proper, capitalised) between words of other categories and punctuation.
TEXTS = ["The actors in this movie deliver a warm story about a family and their farm.",
         "Paris has museums, cafes and rivers; the city welcomes tourists every summer.",
         "I bought two books and a lamp at the market yesterday!",
         ""]


@pytest.fixture
def ctx(warm_pos_cache: Path):
    """A smoke-profile run context whose cache holds PCT2T's lexicon (the POS template)."""
    from rapt_audit.pipeline.context import RunContext

    return RunContext(seed=7, profile="smoke", device="cpu", cache_dir=warm_pos_cache)


@pytest.fixture
def noun_swap(monkeypatch: pytest.MonkeyPatch):
    """The guide's ``NounSwap``, installed as the plugin ``noun_swap`` through a (stand-in) entry point."""
    module = guide_module(monkeypatch, "### What your defense can use", "noun_swap")
    found = [types.SimpleNamespace(name="noun_swap", value="noun_swap:NounSwap", dist=None,
                                   load=lambda: module.NounSwap)]
    monkeypatch.setattr(plugins, "_loaded", False)
    monkeypatch.setattr(plugins, "_registered", {})
    monkeypatch.setattr(plugins, "entry_points", lambda group: found if group == "rapt_audit.defenses" else [])
    yield module.NounSwap
    if "noun_swap" in DEFENSES:
        DEFENSES.remove("noun_swap")


def test_the_toolkit_is_public_and_shares_pct2ts_own_objects(ctx):
    from rapt_audit.mechanisms.engines import pos_candidates, word_engine

    names = {"pos_tags", "TaggedWord", "CATEGORIES", "DEFAULT_CATEGORIES", "category_of", "load_tagger",
             "pos_lexicon", "CategoryLexicon", "word_vectors", "embedding_space", "EmbeddingSpace",
             "NearestNeighbourIndex", "vocabulary_index", "normalize_word"}
    assert names <= set(plugin_api.__all__)
    nouns = plugin_api.pos_lexicon(ctx, "noun")
    assert nouns is plugin_api.pos_lexicon(ctx, "noun")  # built once per run
    # The very index PCT2T's engine searches for nouns, over PCT2T's noun candidates, row for row.
    assert nouns.index is word_engine(ctx, "pos").index_for("noun")
    candidates = pos_candidates(ctx)
    assert nouns.words == tuple(candidates.words[r] for r in candidates.groups["noun"].tolist())
    assert len(nouns.words) == nouns.vectors.shape[0] > 1000 and not nouns.vectors.flags.writeable
    with pytest.raises(UnknownNameError, match="noun"):
        plugin_api.pos_lexicon(ctx, "nouns")


def pos_rows(ctx) -> list[int]:
    """The noun lexicon's rows in PCT2T's candidate table."""
    from rapt_audit.mechanisms.engines import pos_groups

    return pos_groups(ctx)["noun"].tolist()


def test_word_vectors_embed_a_lexicon_word_as_its_row(ctx):
    nouns = plugin_api.pos_lexicon(ctx, "noun")
    space_size = len(plugin_api.embedding_space(ctx).tokens)
    own = [i for i, w in enumerate(nouns.words) if w in ("film", "city", "music")]
    # Words the vocabulary holds only as pieces come after the space's own in PCT2T's candidates.
    pieces = [i for i, r in enumerate(pos_rows(ctx)) if r >= space_size][:50]
    assert len(own) == 3 and len(pieces) == 50
    rows = own + pieces
    np.testing.assert_array_equal(plugin_api.word_vectors(ctx, [nouns.words[i] for i in rows]), nouns.vectors[rows])
    assert (nouns.index.search(nouns.vectors[rows]) == rows).all()  # a listed word is nearest to itself


def test_the_guides_noun_swap_passes_the_conformance_battery(noun_swap, ctx):
    report = plugin_api.check_plugin("defense", "noun_swap", ctx=ctx)
    assert report.passed and not report.skipped, report.format()


def test_the_guides_noun_swap_replaces_nouns_by_near_nouns_and_keeps_every_other_word(noun_swap, ctx):
    defense = noun_swap(k=5)
    out, count = defense.privatize(TEXTS, rng=np.random.default_rng(3), ctx=ctx)
    nouns = plugin_api.pos_lexicon(ctx, "noun")
    listed = set(nouns.words)
    tagged = plugin_api.pos_tags(ctx, TEXTS)
    swapped = kept = 0
    for text, words, released in zip(TEXTS, tagged, out):
        is_noun = [plugin_api.category_of(w.upos) == "noun" for w in words]
        # The release, read back along the original's words: every other word verbatim, a noun as any word.
        pattern = "".join(("(.+?)" if noun else re.escape(w.text)) + re.escape(w.whitespace)
                          for w, noun in zip(words, is_noun))
        match = re.fullmatch(pattern, released)
        assert match is not None, (text, released)
        originals = [w.text for w, noun in zip(words, is_noun) if noun]
        nearest, _ = nouns.index.search_topk(plugin_api.word_vectors(ctx, originals), 5) if originals else ([], [])
        for original, new, near in zip(originals, match.groups(), nearest):
            assert new in listed and new in {nouns.words[r] for r in near}, (original, new)
            swapped += new != plugin_api.normalize_word(original)
        kept += sum(not noun and not w.text.isspace() for w, noun in zip(words, is_noun))
    n_nouns = sum(plugin_api.category_of(w.upos) == "noun" for words in tagged for w in words)
    assert n_nouns >= 15 and swapped >= n_nouns // 2, (n_nouns, swapped, out)  # 1 chance in 5 of staying (if listed)
    assert (count.perturbed, count.replaced, count.passed) == (n_nouns, swapped, kept)
    again, _ = defense.privatize(TEXTS, rng=np.random.default_rng(3), ctx=ctx)
    assert again == out  # the run's generator alone decides
