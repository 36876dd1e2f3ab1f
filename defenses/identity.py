"""The identity defense: no privacy at all (the utility ceiling and the leakage ceiling)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Mapping, Sequence

from rapt_audit.api.plugins import DEFENSES
from rapt_audit.api.types import Estimate, Record, Release
from rapt_audit.pipeline.context import RunContext
from rapt_audit.utility.probes import bow_probe_utility, pair_text, require_labels


@DEFENSES.register("identity", tags=("baseline", "text"))
@dataclass
class IdentityDefense:
    """No defense (eta = infinity): the user sends the raw text.

    It is the reference row of every leaderboard: utility cannot be higher and empirical privacy
    cannot be lower. Utility is measured with the bag-of-words probe (TF-IDF + logistic regression).
    """

    name: ClassVar[str] = "identity"
    exposes: ClassVar[frozenset[str]] = frozenset({"texts"})
    profiles: ClassVar[Mapping[str, Mapping[str, Any]]] = {}

    _train: tuple[Record, ...] = field(default=(), init=False, repr=False)

    def fit(self, train: Sequence[Record], *, ctx: RunContext) -> IdentityDefense:
        """Remember the (unprivatized) training records for the utility probe."""
        self._train = tuple(train)
        return self

    def release(self, records: Sequence[Record], *, ctx: RunContext) -> Release:
        """The texts themselves."""
        return Release(uids=[r.uid for r in records], texts=[r.text for r in records], meta={"mechanism": "identity"})

    def utility(self, test: Sequence[Record], *, ctx: RunContext) -> Mapping[str, Estimate]:
        """Bag-of-words probe accuracy and macro-F1 on the raw texts."""
        y_train = require_labels(self._train, split="victim_train")
        y_test = require_labels(test, split="victim_test")
        return bow_probe_utility([pair_text(r.text, r.text_pair) for r in self._train], y_train,
                                 [pair_text(r.text, r.text_pair) for r in test], y_test,
                                 rng=ctx.rng("utility", self.name))
