"""Text that lies word for word inside other text: what keeps a victim's test record out of every other part.

A text lies *inside* another when, both padded with one space, the first is a substring of the second: the
same run of whole words ("no wit" is inside "contains no wit , only labored gags", "no w" is not). A text is
*whole* when it lies inside no other (longer) text of the dataset. GLUE's SST-2 train file holds every phrase
of a review sentence beside the sentence (``reports/sst2-overlap.md``); the sentence is the whole text its
phrases lie inside, and :func:`whole_texts` finds it for each text.

:func:`~rapt_audit.data.base.make_splits` tests only whole texts whose copies all share one group
(:func:`testable_uids`), so no victim-test record lies inside a record of another part, whatever the groups.
"""

from __future__ import annotations

from typing import Iterable, Sequence

from rapt_audit.api.types import Record

#: Whole texts of at most this many words are indexed by their word windows (a dictionary look-up per text);
#: longer ones are searched as strings, which is cheaper than their windows (a 1,000-word blog post has 500k).
WINDOW_WORDS = 64


def inside(victims: Sequence[Record], others: Sequence[Record]) -> list[bool]:
    """For each of ``victims``, whether its text lies inside the text of one of ``others`` (whole words).

    The count ``reports/sst2-overlap.md`` reports and ``tests/test_group_splits.py`` checks: the texts padded
    with a space on each side, the others joined by newlines, one substring search per victim.
    """
    joined = "\n".join(f" {r.text} " for r in others)
    return [f" {v.text} " in joined for v in victims]


def whole_texts(texts: Iterable[str]) -> tuple[list[str], dict[str, int]]:
    """The whole texts, and each text → the index of the first whole text it lies inside (itself if whole).

    Texts are taken longest first, then in character order (a set's order varies between runs; this one does
    not), so the result depends only on the texts. A text's containers are all longer than it, so they are
    known by the time it is reached; that one pass is exact. SST-2's 67,850 texts take about 2 s.
    """
    wholes: list[str] = []
    windows: dict[str, int] = {}  # every word window of a short whole text → the first whole holding it
    long: list[tuple[int, str]] = []  # the longer whole texts, padded, with their index
    first: dict[str, int] = {}
    for text in sorted(set(texts), key=lambda s: (-len(s), s)):
        found = windows.get(text)
        padded = f" {text} "
        for index, whole in long:
            if found is not None and index > found:
                break  # a short whole text earlier in the order already holds it
            if padded in whole:
                found = index
                break
        if found is None:
            found = len(wholes)
            wholes.append(text)
            words = text.split(" ")
            if len(words) > WINDOW_WORDS:
                long.append((found, padded))
            else:
                for i in range(len(words)):
                    for j in range(i + 1, len(words) + 1):
                        windows.setdefault(" ".join(words[i:j]), found)
        first[text] = found
    return wholes, first


def group_key(record: Record) -> tuple[bool, str]:
    """The group a record is split with: its ``group``, else itself (a uid never equals a named group)."""
    return (True, record.group) if record.group is not None else (False, record.uid)


def testable_uids(records: Sequence[Record]) -> frozenset[str]:
    """The records a victim test may hold: a whole text (:func:`whole_texts`) whose copies share one group.

    A record whose text lies inside another text could meet that text in another part; a whole text copied
    into two groups could meet itself there. Neither is tested; both may still be trained on.
    """
    wholes, first = whole_texts(r.text for r in records)
    owners: dict[str, set[tuple[bool, str]]] = {}
    for r in records:
        owners.setdefault(r.text, set()).add(group_key(r))
    return frozenset(r.uid for r in records if wholes[first[r.text]] == r.text and len(owners[r.text]) == 1)


__all__ = ["WINDOW_WORDS", "group_key", "inside", "testable_uids", "whole_texts"]
