"""CoNLL-2003 English NER (``conll2003``): sentences with gold PER/LOC/ORG/MISC spans.

The shared copy is the IOB2 conversion of the official column files (``TOKEN POS CHUNK NER`` per
line, a blank line between sentences, ``-DOCSTART-`` lines between documents). Each sentence
becomes one record whose text is its tokens joined by single spaces; entity spans are character
offsets into that text, computed from the IOB2 tags while the text is assembled, so
``text[span.start:span.end]`` is exactly the entity's tokens joined by spaces.

A sentence's group is its document (``conll2003/<split>/doc<k>``, the k-th ``-DOCSTART-``): a Reuters
article names the same people, places and firms sentence after sentence, so an NER attacker that trained on
one sentence of an article would meet its entities again in the victim's test (issue #61). The recurring
boilerplate lines ("Scorers :", "NEW YORK 1996-08-22") lie in many documents; the split tests only whole texts
whose copies share one group, so those are trained on but never tested.
"""

from __future__ import annotations

from pathlib import Path

from rapt_audit.api.errors import DataError
from rapt_audit.api.types import Record, Span
from rapt_audit.data.base import catalog, register_split_files

#: The gold entity types (catalog.toml), which the IOB2 tags of a split file must use.
ENTITY_LABELS = tuple(catalog()["conll2003"]["entity_labels"])


def sentence_record(uid: str, tokens: list[str], tags: list[str], group: str | None = None) -> Record:
    """Build one record from a sentence's tokens and IOB2 tags.

    A stray ``I-X`` that does not continue an ``X`` entity starts a new entity (the usual lenient
    IOB reading); the shared files are proper IOB2, so this never triggers on them.
    """
    text_parts: list[str] = []
    spans: list[Span] = []
    offset = 0
    current: list = []  # [start, end, label] of the open entity, or empty
    for token, tag in zip(tokens, tags):
        start = offset + (1 if text_parts else 0)
        text_parts.append(token)
        offset = start + len(token)
        prefix, _, label = tag.partition("-")
        if prefix == "I" and current and current[2] == label:
            current[1] = offset
            continue
        if current:
            spans.append(Span(*current))
            current = []
        if prefix in ("B", "I"):
            current = [start, offset, label]
    if current:
        spans.append(Span(*current))
    return Record(uid=uid, text=" ".join(text_parts), entities=tuple(spans), group=group)


def read_split(path: Path, split: str) -> list[Record]:
    """Parse one CoNLL-2003 IOB2 file into records with uids ``conll2003/<split>/<sentence>``, grouped by document.

    Raises:
        DataError: when a token line has fewer than two columns or an unknown NER tag.
    """
    records: list[Record] = []
    tokens: list[str] = []
    tags: list[str] = []
    valid = {"O"} | {f"{p}-{label}" for p in "BI" for label in ENTITY_LABELS}
    documents = [0]  # -DOCSTART- lines seen: the current document's number

    def flush() -> None:
        if tokens:
            records.append(sentence_record(f"conll2003/{split}/{len(records)}", tokens, tags,
                                           group=f"conll2003/{split}/doc{documents[0]}"))
            tokens.clear()
            tags.clear()

    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            columns = line.split()
            if not columns:
                flush()
                continue
            if columns[0] == "-DOCSTART-":
                flush()
                documents[0] += 1
                continue
            if len(columns) < 2 or columns[-1] not in valid:
                raise DataError(f"{path}:{number}: expected 'TOKEN POS CHUNK NER' with an IOB2 tag, got {line!r}")
            tokens.append(columns[0])
            tags.append(columns[-1])
    flush()
    return records


register_split_files("conll2003", read_split)
