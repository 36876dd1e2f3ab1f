"""Verbatim share: the share of the original's words found verbatim in the release.

A rapt-audit attack on text releases. The eavesdropper's guess of the original words is simply the
released words: every word of the original that appears in the release of the same record (as
often as it appears there) counts as recovered. It needs no training and no model, so it is the floor
any text defense should be judged against: what it sends in the clear.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from typing import ClassVar, Sequence

import numpy as np

from rapt_audit.plugin import (AttackResult, BaseAttack, Record, Release, RunContext, Skip, ThreatModel,
                               bootstrap_mean, metric, pair_text)

# Every number an attack reports is a declared metric, once, where it is computed: its kind ("attack":
# the attacker's success), its direction for the defender (higher is worse) and its range ([0, 1]).
metric("verbatim_share", "attack", False, "share of the original's words found verbatim in the release")

_WORD = re.compile(r"\w+(?:'\w+)?")


def words(text: str, *, ignore_case: bool) -> list[str]:
    """The words of ``text`` (letters, digits and inner apostrophes), lower-cased when ``ignore_case``."""
    return _WORD.findall(text.lower() if ignore_case else text)


@dataclass
class VerbatimShare(BaseAttack):
    """Counts the original's words present in the release of the same record; privacy is 1 - that share.

    Records are the resampled unit of the interval (the words of one sentence are not independent), and
    each record weighs by its number of words, so the headline is the share over all words.

    Attributes:
        ignore_case: Compare words case-insensitively (``Leeds`` released as ``leeds`` counts).
    """

    requires: ClassVar[frozenset[str]] = frozenset({"texts"})
    tags: ClassVar[tuple[str, ...]] = ("baseline", "text")
    #: It reads the release and nothing else: no model, no auxiliary data, no adaptation to the defense.
    threat_model: ClassVar[ThreatModel] = ThreatModel(knows=("release",),
                                                      note="the released words taken as the original's")

    ignore_case: bool = True

    # No fit(): BaseAttack's returns the attack itself (nothing to learn: the guess is the release itself).

    def attack(self, release: Release, truth: Sequence[Record], *, ctx: RunContext) -> AttackResult:
        """Score each record: original words found in its release (with multiplicity) over its words."""
        recovered, total = [], []
        # user_texts(): without any public prefix a protocol puts before every text (RAPT's plain tokens).
        for record, released in zip(truth, release.user_texts()):
            original = Counter(words(pair_text(record.text, record.text_pair), ignore_case=self.ignore_case))
            sent = Counter(words(released, ignore_case=self.ignore_case))
            recovered.append(sum((original & sent).values()))
            total.append(sum(original.values()))
        if sum(total) == 0:
            raise Skip("the victim records hold no words")
        hits, weights = np.array(recovered, dtype=float), np.array(total, dtype=float)
        share = np.divide(hits, weights, out=np.zeros_like(hits), where=weights > 0)
        success = bootstrap_mean(share, weights=weights, rng=ctx.rng("attack", self.name))
        return AttackResult(success.complement(), {"verbatim_share": success},
                            {"words": int(weights.sum()), "ignore_case": self.ignore_case})
