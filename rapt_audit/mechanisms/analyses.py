"""spaCy's analyses of clean texts (POS tags, named entities), computed once per set of texts and cached.

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
analysis in memory (:func:`rapt_audit.api.files.write_cache_json_gz`).
"""

from __future__ import annotations

import hashlib
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

from rapt_audit.api.files import read_cache_json_gz, write_cache_json_gz
from rapt_audit.mechanisms.engines import tagger
from rapt_audit.mechanisms.pos import TaggedWord, entity_mentions, ptb_tags, spacy_version_key, upos_of

if TYPE_CHECKING:  # pragma: no cover
    from rapt_audit.pipeline.context import RunContext

__all__ = ["analysis_path", "pos_tags", "text_entities", "texts_digest"]

#: Bumped whenever what an entry holds, or how spaCy is configured to produce it, changes.
FORMAT = "rapt-audit/spacy-analysis/1"


def texts_digest(texts: Sequence[str]) -> str:
    """sha256 of the texts in order (each length-prefixed, so no two lists share a digest by concatenation)."""
    digest = hashlib.sha256()
    for text in texts:
        data = text.encode("utf-8", "surrogatepass")
        digest.update(len(data).to_bytes(8, "little"))
        digest.update(data)
    return digest.hexdigest()


def analysis_path(ctx: RunContext, kind: str, texts: Sequence[str]) -> Path:
    """Where the ``kind`` analysis of ``texts`` is cached."""
    return ctx.cache_dir / "analyses" / f"{kind}-{spacy_version_key()}-{texts_digest(texts)[:40]}.json.gz"


def pos_tags(ctx: RunContext, texts: Sequence[str]) -> list[list[TaggedWord]]:
    """Each text's words with their trailing whitespace and Universal POS.

    The same as :func:`rapt_audit.mechanisms.pos.tag_texts` with the run's tagger.
    """

    def compute() -> list[list[tuple[str, str, str]]]:
        return ptb_tags(tagger(ctx), texts)

    def valid(rows: list[Any]) -> bool:  # the words must rebuild their own text exactly
        return all(isinstance(row, list) and "".join(w[0] + w[1] for w in row) == text
                   for row, text in zip(rows, texts))

    rows = _cached(ctx, "tags", texts, compute, valid)
    return [[TaggedWord(text, space, upos_of(text, tag)) for text, space, tag in row] for row in rows]


def text_entities(ctx: RunContext, texts: Sequence[str]) -> list[list[tuple[str, str]]]:
    """``(type, text)`` of each named entity spaCy finds in each text.

    The same as :func:`rapt_audit.mechanisms.pos.entity_mentions` with the run's pipeline.
    """

    def compute() -> list[list[tuple[str, str]]]:
        return entity_mentions(tagger(ctx), texts)

    def valid(rows: list[Any]) -> bool:  # every mention a (type, text) pair whose text occurs in its text
        return all(isinstance(row, list) and all(isinstance(m, list) and len(m) == 2 and m[1] in text for m in row)
                   for row, text in zip(rows, texts))

    return [[(label, text) for label, text in row] for row in _cached(ctx, "entities", texts, compute, valid)]


def _cached(ctx: RunContext, kind: str, texts: Sequence[str], compute: Callable[[], list[Any]],
            valid: Callable[[list[Any]], bool]) -> list[Any]:
    """``compute()`` (one row per text, stored as JSON: tuples come back as lists), read from or stored in
    the cache when the run caches analyses."""
    if not ctx.cache_analyses or not texts:
        return compute()
    path = analysis_path(ctx, kind, texts)
    rows = _read(path, len(texts))
    try:
        if rows is not None and valid(rows):
            return rows
    except (TypeError, IndexError, ValueError):  # an entry of the right shape holding values of the wrong types
        pass
    if rows is not None or path.exists():
        warnings.warn(f"the cached spaCy {kind} in {path} do not match their texts; analysing them again",
                      stacklevel=3)
    rows = compute()
    write_cache_json_gz(path, {"format": FORMAT, "kind": kind, "n": len(texts), "rows": rows})
    return rows


def _read(path: Path, n: int) -> list[Any] | None:
    """The rows of a cache entry, or None when it is missing, unreadable, of another format or size."""
    doc = read_cache_json_gz(path)
    if not isinstance(doc, dict) or doc.get("format") != FORMAT or doc.get("n") != n:
        return None
    rows = doc.get("rows")
    return rows if isinstance(rows, list) and len(rows) == n else None
