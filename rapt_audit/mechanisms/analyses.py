"""spaCy's analyses of clean texts (POS tags, words, named entities), computed once per set of texts and cached.

Neither the tags PCT2T reads nor the entities the verbatim accounting counts depend on η, the seed
or the defense: every cell of a sweep (η × seed × defense) and every adaptive attacker analyses the
same splits again, at about 12,000 words/s for the tags and 10,000 for the entities on one core
(SST-2's 67,000 training sentences: over a minute per cell). So an audit stores each analysis
on disk, keyed by the texts' sha256 and the tagger's version, and later cells read it back.

Only an audit stores them (:attr:`RunContext.cache_analyses
<rapt_audit.pipeline.context.RunContext>`, off with ``--no-release-cache``): the user's side never
writes a user's text to disk. Tags are stored as spaCy produced them (Penn Treebank), so a change of
our PTB→UPOS mapping never reads stale categories. An entry that cannot be read, or does not
rebuild its own texts exactly, is recomputed with a warning; one that cannot be written leaves the
analysis in memory (:func:`rapt_audit.api.files.write_cache_json_gz`). On a miss, the texts are looked
up in a pack of analyses when the cache holds one (:mod:`rapt_audit.mechanisms.analysis_pack`), which
is how a machine without spaCy runs; only then is spaCy loaded.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any, Callable, Sequence

from rapt_audit.api.context import RunContext
from rapt_audit.api.files import read_cache_json_gz, write_cache_json_gz
from rapt_audit.mechanisms import analysis_pack
from rapt_audit.mechanisms.analysis_pack import texts_digest
from rapt_audit.mechanisms.engines import tagger
from rapt_audit.mechanisms.pos import (TaggedWord, mentions_of, new_words_forgotten, ptb_tags, spacy_entity_spans,
                                       tagged_words)


__all__ = ["analysis_path", "entity_spans", "pos_tags", "text_entities", "words"]

#: Bumped whenever what an entry holds, or how spaCy is configured to produce it, changes
#: (2: entities are ``[label, start, end]`` character spans, so silver NER references read them too).
FORMAT = "rapt-audit/spacy-analysis/2"


def analysis_path(ctx: RunContext, kind: str, texts: Sequence[str]) -> Path:
    """Where the ``kind`` analysis of ``texts`` is cached."""
    key = analysis_pack.tagger_key(ctx)  # the format's number too: an older entry is not a damaged one
    return ctx.cache_dir / "analyses" / f"{kind}-{key}-{FORMAT[-1]}-{texts_digest(texts)[:40]}.json.gz"


def pos_tags(ctx: RunContext, texts: Sequence[str]) -> list[list[TaggedWord]]:
    """Each text's words with their trailing whitespace and Universal POS.

    The same as :func:`rapt_audit.mechanisms.pos.tag_texts` with the run's tagger.
    """

    return tagged_words(_cached(ctx, "tags", texts, lambda: ptb_tags(tagger(ctx), texts), _rebuild(texts)))


def words(ctx: RunContext, texts: Sequence[str]) -> list[list[tuple[str, str]]]:
    """Each text's words (spaCy's tokenizer: no tagging) with their trailing whitespace."""

    def compute() -> list[list[tuple[str, str]]]:
        nlp = tagger(ctx)
        with new_words_forgotten(nlp):
            return [[(t.text, t.whitespace_) for t in nlp.make_doc(text)] for text in texts]

    return [[(word, space) for word, space in row] for row in _cached(ctx, "words", texts, compute, _rebuild(texts))]


def _rebuild(texts: Sequence[str]) -> Callable[[list[Any]], bool]:
    """Whether rows of words (each ``word, whitespace, ...``) rebuild their own texts exactly."""
    return lambda rows: all(isinstance(row, list) and "".join(w[0] + w[1] for w in row) == text
                            for row, text in zip(rows, texts))


def entity_spans(ctx: RunContext, texts: Sequence[str]) -> list[list[tuple[str, int, int]]]:
    """``(spaCy label, start, end)`` character spans of each named entity spaCy's NER finds in each text."""

    def compute() -> list[list[list[Any]]]:
        return spacy_entity_spans(tagger(ctx), texts)

    def valid(rows: list[Any]) -> bool:  # every mention a [label, start, end] inside its text
        return all(isinstance(row, list) and all(
            isinstance(m, list) and len(m) == 3 and isinstance(m[0], str) and 0 <= m[1] <= m[2] <= len(text)
            for m in row) for row, text in zip(rows, texts))

    return [[(label, start, end) for label, start, end in row]
            for row in _cached(ctx, "entities", texts, compute, valid)]


def text_entities(ctx: RunContext, texts: Sequence[str]) -> list[list[tuple[str, str]]]:
    """``(type, text)`` of each named entity spaCy finds in each text.

    The same as :func:`rapt_audit.mechanisms.pos.entity_mentions` with the run's pipeline.
    """
    return mentions_of(entity_spans(ctx, texts), texts)


def _cached(ctx: RunContext, kind: str, texts: Sequence[str], compute: Callable[[], list[Any]],
            valid: Callable[[list[Any]], bool]) -> list[Any]:
    """``compute()`` (one row per text, stored as JSON: tuples come back as lists), read from or stored in
    the cache when the run caches analyses; on a miss, read from a pack of analyses when the cache
    holds one (:mod:`rapt_audit.mechanisms.analysis_pack`: how a machine without spaCy runs)."""
    if not texts:
        return []
    path = analysis_path(ctx, kind, texts) if ctx.cache_analyses else None
    if path is not None:
        rows = _read(path, len(texts))
        if _usable(rows, valid):
            return rows
        if rows is not None or path.exists():
            warnings.warn(f"the cached spaCy {kind} in {path} do not match their texts; analysing them again",
                          stacklevel=3)
    rows = analysis_pack.lookup(ctx, kind, texts)
    if not _usable(rows, valid):
        rows = compute()
    if path is not None:
        write_cache_json_gz(path, {"format": FORMAT, "kind": kind, "n": len(texts), "rows": rows})
    return rows


def _usable(rows: list[Any] | None, valid: Callable[[list[Any]], bool]) -> bool:
    """Whether ``rows`` exist and describe their texts."""
    try:
        return rows is not None and valid(rows)
    except (TypeError, IndexError, ValueError):  # rows of the right shape holding values of the wrong types
        return False


def _read(path: Path, n: int) -> list[Any] | None:
    """The rows of a cache entry, or None when it is missing, unreadable, of another format or size."""
    doc = read_cache_json_gz(path)
    if not isinstance(doc, dict) or doc.get("format") != FORMAT or doc.get("n") != n:
        return None
    rows = doc.get("rows")
    return rows if isinstance(rows, list) and len(rows) == n else None
