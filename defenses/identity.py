"""The identity defense: no privacy at all (the utility ceiling and the leakage ceiling)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any, ClassVar, Mapping, Sequence

from rapt_audit.api.params import Check, CheckedParams
from rapt_audit.api.plugins import DEFENSES
from rapt_audit.api.types import Estimate, Record, Release
from rapt_audit.defenses._text import check_text_method
from rapt_audit.pipeline.context import RunContext
from rapt_audit.utility.customize import check_positions, resolve_settings
from rapt_audit.utility.customized import customized_utility
from rapt_audit.utility.probes import bow_probe_utility, pair_text, require_labels


@DEFENSES.register("identity", tags=("baseline", "text"))
@dataclass
class IdentityDefense(CheckedParams):
    """No defense (eta = infinity): the user sends the raw text.

    It is the reference row of every leaderboard: utility cannot be higher and empirical privacy
    cannot be lower. Utility is measured with the bag-of-words probe (TF-IDF + logistic regression)
    by default; ``method=prompt|prefix|lora|full`` customizes the public encoder on the raw text
    instead, with the same training as the text defenses, which gives the no-privacy ceiling of each
    customization method (a text defense's row under ``method=prompt`` is compared with this one).

    Attributes:
        method: ``bow`` or the service's customization method.
        epochs, lr, batch_size, max_length, virtual_tokens: Training settings (None: the profile's).
    """

    name: ClassVar[str] = "identity"
    exposes: ClassVar[frozenset[str]] = frozenset({"texts"})
    profiles: ClassVar[Mapping[str, Mapping[str, Any]]] = {}

    method: Annotated[str, Check(check_text_method)] = "bow"
    epochs: int | None = None
    lr: float | None = None
    batch_size: int | None = None
    max_length: int | None = None
    virtual_tokens: int | None = None
    _train: tuple[Record, ...] = field(default=(), init=False, repr=False)
    _training: dict[str, Any] = field(default_factory=dict, init=False, repr=False)

    def training_overrides(self) -> dict[str, Any]:
        """The customization settings the user set explicitly (None means the profile default)."""
        return {"epochs": self.epochs, "lr": self.lr, "batch_size": self.batch_size, "max_length": self.max_length,
                "virtual_tokens": self.virtual_tokens}

    def fit(self, train: Sequence[Record], *, ctx: RunContext) -> IdentityDefense:
        """Remember the (unprivatized) training records; check the customization settings first."""
        if self.method != "bow":  # a prompt too long for the model fails now, not after other work
            settings = resolve_settings(self.method, ctx.profile, self.training_overrides())
            check_positions(settings, 0, int(ctx.encoder().model.config.max_position_embeddings))
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
        y_test = require_labels(test, split="victim_test")
        train_texts = [pair_text(r.text, r.text_pair) for r in self._train]
        test_texts = [pair_text(r.text, r.text_pair) for r in test]
        if self.method == "bow":
            return bow_probe_utility(train_texts, y_train, test_texts, y_test, rng=ctx.rng("utility", self.name))
        estimates, self._training = customized_utility(
            train_texts, y_train, test_texts, y_test, method=self.method, overrides=self.training_overrides(),
            ctx=ctx, key=self.name)
        return estimates
