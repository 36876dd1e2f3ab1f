"""Word drop: each word of the user's text is dropped with probability ``p`` before the text is sent.

A rapt-audit text defense. The words that survive are released as they were, in order, joined by
single spaces: dropping hides some words and leaves the others in the clear, which is what an attack
such as ``verbatim_share`` measures.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Mapping, Sequence

import numpy as np

from rapt_audit.plugin import Range, ReplacementCount, RunContext, TextDefense


@dataclass
class WordDrop(TextDefense):
    """Drops each word independently with probability ``p``; the surviving words are released verbatim.

    Attributes:
        p: The probability that a word is dropped, strictly between 0 (nothing dropped: no privacy)
            and 1 (nothing sent: no utility).
    """

    #: Shown by ``rapt-audit ls``.
    tags: ClassVar[tuple[str, ...]] = ("text", "dropout")
    #: Overrides per cost profile; ``smoke`` (tests, ``rapt-audit plugin check``) needs none: dropping is cheap.
    profiles: ClassVar[Mapping[str, Mapping[str, Any]]] = {"smoke": {}}

    p: Annotated[float, Range(0, 1, low_open=True, high_open=True)] = 0.3

    def privatize(self, texts: Sequence[str], *, rng: np.random.Generator,
                  ctx: RunContext) -> tuple[list[str], ReplacementCount]:
        """Drop each whitespace-separated word with probability ``p``, drawing from ``rng`` only."""
        released, count = [], ReplacementCount()
        for text in texts:
            words = text.split()
            keep = rng.random(len(words)) >= self.p
            released.append(" ".join(word for word, kept in zip(words, keep) if kept))
            # A kept word went through the mechanism and came out unchanged (perturbed, not replaced);
            # a dropped one is not in the release at all.
            count.perturbed += int(keep.sum())
            count.dropped += int((~keep).sum())
        return released, count
