"""The identity defense: no privacy at all (the utility ceiling and the leakage ceiling)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Mapping, Sequence

from rapt_audit.api.capabilities import Capabilities
from rapt_audit.api.context import RunContext
from rapt_audit.api.plugins import DEFENSES
from rapt_audit.api.types import Estimate, Record, Release, pair_text
from rapt_audit.defenses._customization import Customized
from rapt_audit.utility.probes import require_labels


@DEFENSES.register("identity", tags=("baseline", "text"))
@dataclass
class IdentityDefense(Customized):
    """No defense (eta = infinity): the user sends the raw text.

    It is the reference row of every leaderboard: utility cannot be higher and empirical privacy
    cannot be lower. Utility is measured with the bag-of-words probe (TF-IDF + logistic regression)
    by default; ``method=prompt|prefix|lora|full`` customizes the public encoder on the raw text
    instead, exactly as the text defenses' services do (same settings, same selection of learning
    rate and epoch on validation data), which gives the no-privacy ceiling of each method.

    Attributes:
        method, epochs, lr, lr_grid, patience, batch_size, max_length, virtual_tokens, precision: The service's
            customization (:class:`~rapt_audit.defenses._customization.Customized`).
    """

    exposes: ClassVar[frozenset[str]] = frozenset({"texts"})
    capabilities: ClassVar[Capabilities] = Capabilities(reference=True, figure_place=0)
    profiles: ClassVar[Mapping[str, Mapping[str, Any]]] = {}

    _train: tuple[Record, ...] = field(default=(), init=False, repr=False)

    def fit(self, train: Sequence[Record], *, ctx: RunContext) -> IdentityDefense:
        """Remember the (unprivatized) training records; check the customization settings first."""
        self.check_service(ctx)  # a prompt too long for the model fails now, not after other work
        self._train = tuple(train)
        return self

    def release(self, records: Sequence[Record], *, ctx: RunContext) -> Release:
        """The texts themselves."""
        meta: dict[str, Any] = {"mechanism": "identity"}
        if self._training:
            meta["customization"] = self._training
        return Release(uids=[r.uid for r in records], texts=[r.text for r in records], meta=meta)

    def utility(self, test: Sequence[Record], *, ctx: RunContext) -> Mapping[str, Estimate]:
        """Task utility on the raw texts: the bag-of-words probe, or the customized encoder."""
        y_train = require_labels(self._train, split="victim_train")
        require_labels(test, split="victim_test")  # fail before minutes of training; read again below
        train_texts = [pair_text(r.text, r.text_pair) for r in self._train]
        return self.service_scores(
            train_texts, y_train, lambda: ([pair_text(r.text, r.text_pair) for r in test],
                                           require_labels(test, split="victim_test")), ctx=ctx, key=self.name)
