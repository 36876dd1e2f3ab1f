"""The base of the dχ text defenses (T2T, PCT2T, RAPT): η, its calibration, and the service's pretraining.

Privacy is set by ``eta`` or, equivalently, by a target word-replacement probability
``replacement``, which is turned into η by calibration on public text (never the victim's data).

With ``pretrain=vanilla|prob|denoise`` the service first adapts its encoder to text privatized by the
same mechanism at the same η (Qu et al., CIKM 2021; :mod:`rapt_audit.defenses._pretraining`); the
release is unchanged.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Annotated, Any, ClassVar, Sequence

import numpy as np

from rapt_audit.api.capabilities import DCHI_TEXT, Capabilities
from rapt_audit.api.context import RunContext
from rapt_audit.api.errors import UsageError
from rapt_audit.api.params import Check, PositiveInt
from rapt_audit.api.types import Record
from rapt_audit.defenses._calibrated import calibrate_for_target
from rapt_audit.defenses._pretraining import adapted_encoder, read_corpus
from rapt_audit.defenses._text import TextDefense
from rapt_audit.mechanisms.calibration import ReplacementCount, check_target
from rapt_audit.mechanisms.noise import check_eta
from rapt_audit.utility.pretraining import check_objective, resolve_pretrain_settings


@dataclass
class DchiTextDefense(TextDefense):
    """Base class of the dχ text defenses; subclasses implement :meth:`privatize` at a given η.

    Parameters are checked once, when the defense is built (:class:`~rapt_audit.api.params.CheckedParams`);
    the η that reaches the engines is therefore already valid (or comes from calibration).

    Attributes:
        eta: dχ privacy parameter (> 0; ``inf`` means no privacy).
        replacement: If set, a target word-replacement probability in (0, 1) that overrides
            ``eta``: η is calibrated on public text at fit time and recorded in the release.
        pretrain: ``none``, or the privacy-adaptive pretraining objective of the service's encoder
            (``vanilla``, ``prob``, ``denoise``); needs a customization method, not ``bow``.
        pretrain_steps: Pretraining steps (None: the profile's default).
        pretrain_corpus: A public text file to pretrain on, one passage per line (None: WikiText-2).
        method, epochs, ...: The service's customization (:class:`~rapt_audit.defenses._text.TextDefense`).
    """

    eta: Annotated[float, Check(check_eta)] = 100.0
    replacement: Annotated[float | None, Check(check_target)] = None
    pretrain: Annotated[str, Check(check_objective)] = "none"
    pretrain_steps: PositiveInt | None = None
    pretrain_corpus: str | None = None
    _eta: float | None = field(default=None, init=False, repr=False)
    _calibration: dict[str, Any] = field(default_factory=dict, init=False, repr=False)
    #: Audited through its own privatize at η (``rapt-audit audit``); T2T and PCT2T declare their engines' protocols.
    capabilities: ClassVar[Capabilities] = Capabilities(audit=DCHI_TEXT)

    def privatize(self, texts: Sequence[str], *, eta: float, rng: np.random.Generator,  # type: ignore[override]
                  ctx: RunContext) -> tuple[list[str], ReplacementCount]:
        """Privatize ``texts`` at ``eta``; return the released texts and the replacement count."""
        raise NotImplementedError

    def _privatize_batch(self, texts: Sequence[str], *, rng: np.random.Generator,
                         ctx: RunContext) -> tuple[list[str], ReplacementCount]:
        """Privatize at the η in force (given, or calibrated for ``replacement``)."""
        return self.privatize(texts, eta=self.effective_eta(ctx), rng=rng, ctx=ctx)

    def replacement_count(self, texts: Sequence[str], *, eta: float, rng: np.random.Generator,
                          ctx: RunContext) -> ReplacementCount:
        """How many units of ``texts`` the mechanism replaces at ``eta`` (for calibration)."""
        return self.privatize(texts, eta=eta, rng=rng, ctx=ctx)[1]

    def effective_eta(self, ctx: RunContext) -> float:
        """η in force: ``eta``, or the η calibrated for ``replacement`` (computed once)."""
        if self._eta is None:
            if self.replacement is None:
                self._eta = self.eta
            else:
                self._eta, self._calibration = calibrate_for_target(self, target=self.replacement, ctx=ctx)
        return self._eta

    def privacy_level(self, ctx: RunContext) -> float:
        """The effective η (:meth:`effective_eta`): the privatized texts depend on it."""
        return self.effective_eta(ctx)

    def fit(self, train: Sequence[Record], *, ctx: RunContext) -> DchiTextDefense:
        """Check the pretraining and customization settings, remember the training records, resolve η."""
        if self.pretrain != "none" and self.method == "bow":
            raise UsageError(f"pretrain={self.pretrain} adapts the service's encoder, and method=bow uses none (a "
                             "bag-of-words probe); choose method=prompt, prefix, lora or full")
        if self.pretrain != "none":  # fail now, not after the privatization of every split
            resolve_pretrain_settings(self.pretrain, ctx.profile, {"steps": self.pretrain_steps})
            read_corpus(ctx, self.pretrain_corpus)
        super().fit(train, ctx=ctx)
        self.effective_eta(ctx)
        return self

    def mechanism_facts(self, count: ReplacementCount, ctx: RunContext) -> dict[str, Any]:
        """η in force, the observed replacement probability and, when η was calibrated, how."""
        eta = self.effective_eta(ctx)
        return {"eta": "inf" if math.isinf(eta) else eta,
                "observed_replacement": None if math.isnan(count.rate) else count.rate, **self._calibration}

    def service_encoder(self, ctx: RunContext) -> tuple[Any, dict[str, Any] | None]:
        """The encoder adapted by privacy-adaptive pretraining when ``pretrain`` asks for it."""
        return adapted_encoder(self, ctx) if self.pretrain != "none" else (None, None)


__all__ = ["DchiTextDefense"]
