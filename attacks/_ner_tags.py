"""IOB2 helpers for the NER attacks: words with character offsets, spans ↔ word tags, spaCy labels.

The NER attacks score at the level of *words*: :func:`tokenize_words` splits a text into runs of
word characters and single punctuation marks, each with its character offsets. The same rule is
applied to original and released texts, so the two word sequences can be aligned with
:func:`rapt_audit.mechanisms.align.align`. CoNLL-2003 texts are tokens joined by single spaces; a CoNLL token
such as ``U.S.`` becomes several words here, all inside the same entity, so entity counts are
unchanged.

Conventions (IOB2, as seqeval's default mode reads it):

* a word belongs to an entity span when their character ranges overlap;
* the first word of each span is ``B-<type>``, the following words ``I-<type>``, every other word
  ``O`` (so two adjacent spans of one type stay two entities);
* :func:`tags_to_spans` reads tags back leniently: an ``I-X`` that does not continue an ``X``
  entity starts a new one (the conlleval reading), so round trips are exact for proper IOB2.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

from rapt_audit.api.types import Span

#: A word: a run of letters/digits/underscores, or one other non-space character.
_WORD = re.compile(r"\w+|[^\w\s]", re.UNICODE)

#: spaCy (OntoNotes) entity label → CoNLL-2003 type; labels not listed (DATE, CARDINAL, MONEY,
#: PERCENT, QUANTITY, ORDINAL, TIME) are not CoNLL entities and are ignored.
SPACY_TO_CONLL: Mapping[str, str] = {
    "PERSON": "PER",
    "GPE": "LOC", "LOC": "LOC", "FAC": "LOC",
    "ORG": "ORG",
    "NORP": "MISC", "EVENT": "MISC", "PRODUCT": "MISC", "WORK_OF_ART": "MISC", "LAW": "MISC",
    "LANGUAGE": "MISC",
}


@dataclass(frozen=True)
class Word:
    """One word of a text with its character offsets ``[start, end)``."""

    text: str
    start: int
    end: int


def tokenize_words(text: str) -> list[Word]:
    """Split ``text`` into words (runs of ``\\w`` characters, or single other non-space characters)."""
    return [Word(m.group(), m.start(), m.end()) for m in _WORD.finditer(text)]


def spans_to_tags(words: Sequence[Word], spans: Iterable[Span]) -> list[str]:
    """IOB2 tags of ``words`` for the entity ``spans`` (a word is inside a span when they overlap).

    Spans are applied in order of their start; a word already claimed by an earlier span keeps
    that span's tag (gold data never overlaps; this only makes the function total).
    """
    tags = ["O"] * len(words)
    for span in sorted(spans, key=lambda s: (s.start, s.end)):
        inside = [i for i, w in enumerate(words) if w.start < span.end and span.start < w.end and tags[i] == "O"]
        for k, i in enumerate(inside):
            tags[i] = ("B-" if k == 0 else "I-") + span.label
    return tags


def _split_tag(tag: str) -> tuple[str, str]:
    prefix, _, label = tag.partition("-")
    if prefix not in {"B", "I"} or not label:
        return "O", ""
    return prefix, label


def tags_to_entities(tags: Sequence[str]) -> list[tuple[str, int, int]]:
    """Entities ``(type, first word, last word + 1)`` read from IOB tags (lenient IOB2 reading)."""
    entities: list[tuple[str, int, int]] = []
    current: list | None = None  # [type, start, end]
    for i, tag in enumerate(tags):
        prefix, label = _split_tag(tag)
        if prefix == "I" and current is not None and current[0] == label and current[2] == i:
            current[2] = i + 1
            continue
        if current is not None:
            entities.append(tuple(current))
            current = None
        if prefix in {"B", "I"}:
            current = [label, i, i + 1]
    if current is not None:
        entities.append(tuple(current))
    return entities


def tags_to_spans(words: Sequence[Word], tags: Sequence[str]) -> list[Span]:
    """Character spans of the entities in ``tags`` over the text ``words`` came from."""
    if len(words) != len(tags):
        raise ValueError(f"{len(words)} words but {len(tags)} tags")
    return [Span(words[a].start, words[b - 1].end, label) for label, a, b in tags_to_entities(tags)]


def iob_labels(types: Iterable[str]) -> list[str]:
    """The IOB2 label list for entity ``types``: ``O`` first, then ``B-X``/``I-X`` for sorted types."""
    return ["O"] + [f"{p}-{t}" for t in sorted(set(types)) for p in "BI"]


def spacy_spans(mentions: Iterable[Sequence[Any]]) -> list[Span]:
    """CoNLL-typed character spans of spaCy's ``(label, start, end)`` entities (unmapped labels dropped)."""
    return [Span(start, end, SPACY_TO_CONLL[label]) for label, start, end in mentions
            if label in SPACY_TO_CONLL and end > start]
