"""Aligning original and released units (words or tokens): for scoring, adaptive attacks and pretraining.

Text defenses do not always keep unit counts: token-level T2T is detokenized, so ``un ##bel``
becomes one word and a released ``##ing`` at a word start re-tokenizes differently. Scoring
therefore aligns the two sequences instead of assuming equal positions:

* equal lengths → position i aligns with position i (PCT2T and the identity keep word counts);
* otherwise → a longest-matching-blocks alignment (difflib), and inside each unequal block the
  first ``min(len_a, len_b)`` positions are paired in order; the rest stay unaligned.

An unaligned original unit counts as *not recovered*, which can only lower an attack's measured
success when the sequence lengths differ; results record how many units were aligned.
"""

from __future__ import annotations

import difflib
from typing import Sequence


def align(original: Sequence[str], released: Sequence[str]) -> list[int | None]:
    """For each original unit, the index of its released counterpart (``None`` if unaligned)."""
    if len(original) == len(released):
        return list(range(len(original)))
    pairs: list[int | None] = [None] * len(original)
    matcher = difflib.SequenceMatcher(a=list(original), b=list(released), autojunk=False)
    for tag, a0, a1, b0, b1 in matcher.get_opcodes():
        for offset in range(min(a1 - a0, b1 - b0)):
            pairs[a0 + offset] = b0 + offset
        del tag  # equal and replace blocks are paired the same way; insert/delete leave gaps
    return pairs


def aligned_pairs(original: Sequence[str], released: Sequence[str]) -> list[tuple[int, int]]:
    """``(original index, released index)`` for every aligned unit."""
    return [(i, j) for i, j in enumerate(align(original, released)) if j is not None]
