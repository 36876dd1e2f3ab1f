"""Shared behaviour of the text-to-text defenses (T2T, PCT2T, RAPT's user side).

A text defense privatizes every text the user sends: the training texts the service customizes
on (``fit``) and the test texts it answers (``release``; users privatize at inference too, RAPT
Sec. III). Utility is therefore measured on privatized train and privatized test text, and the
test release the eavesdropper sees is the very text the service classifies.

Privacy is set by ``eta`` or, equivalently, by a target word-replacement probability
``replacement``, which is turned into η by calibration on public text (never the victim's data).

With ``pretrain=vanilla|prob|denoise`` the service first adapts its encoder to text privatized by the
same mechanism at the same η (Qu et al., CIKM 2021; :mod:`rapt_audit.defenses._pretraining`); the
release is unchanged.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Annotated, Any, ClassVar, Mapping, Sequence

import numpy as np

from rapt_audit.api.errors import UsageError
from rapt_audit.api.params import Check, PositiveInt
from rapt_audit.api.types import Estimate, Record, Release, pair_text, uid_key
from rapt_audit.data.public import public_corpus
from rapt_audit.mechanisms.analyses import text_entities
from rapt_audit.mechanisms.calibration import ReplacementCount, check_target, find_eta
from rapt_audit.mechanisms.noise import check_eta
from rapt_audit.mechanisms.privatize import check_text
from rapt_audit.mechanisms.verbatim import verbatim_summary
from rapt_audit.pipeline.context import RunContext
from rapt_audit.defenses._customization import Customized
from rapt_audit.defenses._pretraining import adapted_encoder, mechanism_parameters, read_corpus
from rapt_audit.utility.pretraining import check_objective, resolve_pretrain_settings
from rapt_audit.utility.probes import bow_probe_utility, require_labels


@dataclass
class TextDefense(Customized):
    """Base class of text defenses; subclasses implement :meth:`privatize` and set ``name``.

    Parameters are checked once, when the defense is built (:class:`~rapt_audit.api.params.CheckedParams`);
    the η that reaches the engines is therefore already valid (or comes from calibration).

    Attributes:
        eta: dχ privacy parameter (> 0; ``inf`` means no privacy).
        replacement: If set, a target word-replacement probability in (0, 1) that overrides
            ``eta``: η is calibrated on public text at fit time and recorded in the release.
        method, epochs, lr, lr_grid, patience, batch_size, max_length, virtual_tokens, precision: The service's
            customization (:class:`~rapt_audit.defenses._customization.Customized`).
        pretrain: ``none``, or the privacy-adaptive pretraining objective of the service's encoder
            (``vanilla``, ``prob``, ``denoise``); needs a customization method, not ``bow``.
        pretrain_steps: Pretraining steps (None: the profile's default).
        pretrain_corpus: A public text file to pretrain on, one passage per line (None: WikiText-2).
    """

    name: ClassVar[str] = "text"
    exposes: ClassVar[frozenset[str]] = frozenset({"texts"})
    profiles: ClassVar[Mapping[str, Mapping[str, Any]]] = {}

    eta: Annotated[float, Check(check_eta)] = 100.0
    replacement: Annotated[float | None, Check(check_target)] = None
    pretrain: Annotated[str, Check(check_objective)] = "none"
    pretrain_steps: PositiveInt | None = None
    pretrain_corpus: str | None = None
    _eta: float | None = field(default=None, init=False, repr=False)
    _calibration: dict[str, Any] = field(default_factory=dict, init=False, repr=False)
    _train: tuple[Record, ...] = field(default=(), init=False, repr=False)
    _released: dict[int, tuple[list[str], ReplacementCount]] = field(default_factory=dict, init=False, repr=False)

    def privatize(self, texts: Sequence[str], *, eta: float, rng: np.random.Generator,
                  ctx: RunContext) -> tuple[list[str], ReplacementCount]:
        """Privatize ``texts`` at ``eta``; return the released texts and the replacement count."""
        raise NotImplementedError

    def add_public_prefix(self, texts: list[str], *, eta: float, rng: np.random.Generator,
                          ctx: RunContext) -> list[str]:
        """Hook for public material the user prepends to every privatized text (RAPT's plain tokens)."""
        return texts

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
                corpus_name, texts = public_corpus(ctx)
                seed = ctx.seed_for("calibration", self.name)
                self._eta = find_eta(lambda eta, rng: self.replacement_count(texts, eta=eta, rng=rng, ctx=ctx),
                                     self.replacement, seed=seed)
                self._calibration = {"target_replacement": self.replacement, "calibrated_eta": self._eta,
                                     "calibration_corpus": corpus_name, "calibration_sentences": len(texts)}
        return self._eta

    def fit(self, train: Sequence[Record], *, ctx: RunContext) -> TextDefense:
        """Check the customization settings, resolve η and remember the training records.

        The settings are checked here, before any privatization, so that a prompt too long for the
        model fails in a second rather than after minutes of work.
        """
        if self.pretrain != "none" and self.method == "bow":
            raise UsageError(f"pretrain={self.pretrain} adapts the service's encoder, and method=bow uses none (a "
                             "bag-of-words probe); choose method=prompt, prefix, lora or full")
        if self.pretrain != "none":  # fail now, not after the privatization of every split
            resolve_pretrain_settings(self.pretrain, ctx.profile, {"steps": self.pretrain_steps})
            read_corpus(ctx, self.pretrain_corpus)
        if self.method != "bow":
            self.check_customization(ctx, plain=self.customization_options(ctx).get("plain"))
        self.effective_eta(ctx)
        self._train = tuple(train)
        return self

    def privatize_records(self, records: Sequence[Record], ctx: RunContext) -> tuple[list[str], ReplacementCount]:
        """The released texts of ``records`` (pairs and any public prefix included) and what was replaced.

        The noise is drawn from a generator keyed by the records' uids, so the same records give the
        same release within a run; the last few releases are memoised (fit, utility and release
        privatize the same splits), and an audit's later runs read them back from
        :attr:`RunContext.text_releases <rapt_audit.pipeline.context.RunContext>`.
        """
        key = uid_key(records)
        if key not in self._released:
            for r in records:  # before spaCy or the tokenizer fail on it deep inside
                check_text(pair_text(r.text, r.text_pair), name=f"record {r.uid!r}")
            eta = self.effective_eta(ctx)

            def fresh() -> tuple[list[str], ReplacementCount]:
                rng = ctx.rng("release", self.name, key)
                texts, count = self.privatize([r.text for r in records], eta=eta, rng=rng, ctx=ctx)
                pairs = [r.text_pair for r in records]
                if any(p is not None for p in pairs):
                    pair_texts, pair_count = self.privatize([p or "" for p in pairs], eta=eta, rng=rng, ctx=ctx)
                    count.add(pair_count)
                    texts = [pair_text(t, p if r.text_pair is not None else None)
                             for t, p, r in zip(texts, pair_texts, records)]
                return self.add_public_prefix(texts, eta=eta, rng=rng, ctx=ctx), count

            store = ctx.text_releases  # an audit's store of earlier runs' privatizations (None: privatize)
            released = fresh() if store is None else store.privatized(
                self, mechanism=mechanism_parameters(self), eta=eta, records=records, compute=fresh)
            self._released = {key: released} | {k: v for k, v in list(self._released.items())[-3:]}
        return self._released[key]

    def release(self, records: Sequence[Record], *, ctx: RunContext) -> Release:
        """The privatized texts (deterministic for a given run seed and set of records)."""
        texts, count = self.privatize_records(records, ctx)
        eta = self.effective_eta(ctx)
        originals = [pair_text(r.text, r.text_pair) for r in records]
        meta = {"mechanism": self.name, "eta": "inf" if math.isinf(eta) else eta,
                "observed_replacement": None if math.isnan(count.rate) else count.rate,
                "units_perturbed": count.perturbed, "units_dropped": count.dropped,
                "verbatim": verbatim_summary(originals, texts, count, entities=text_entities(ctx, originals)),
                **self._calibration,
                **({"customization": self._training} if self._training else {})}
        return Release(uids=[r.uid for r in records], texts=texts, meta=meta)

    def utility(self, test: Sequence[Record], *, ctx: RunContext) -> Mapping[str, Estimate]:
        """Task utility: the service customizes on privatized train text and answers the privatized test release.

        ``method="bow"`` is a quick TF-IDF + logistic-regression probe; ``prompt``, ``prefix``, ``lora``
        and ``full`` customize the public encoder (rapt_audit.utility.customize).
        """
        y_train = require_labels(self._train, split="victim_train")
        require_labels(test, split="victim_test")  # fail before minutes of training; the labels are used below
        train_texts, _ = self.privatize_records(self._train, ctx)
        if self.method == "bow":
            test_texts, _ = self.privatize_records(test, ctx)
            return bow_probe_utility(train_texts, y_train, test_texts, require_labels(test, split="victim_test"),
                                     rng=ctx.rng("utility", self.name))

        loaded, pretraining = adapted_encoder(self, ctx) if self.pretrain != "none" else (None, None)

        def test_split() -> tuple[list[str], np.ndarray]:  # privatized and read only once the model is final
            return self.privatize_records(test, ctx)[0], require_labels(test, split="victim_test")

        estimates = self.customized_scores(train_texts, y_train, test_split, ctx=ctx, key=self.name, loaded=loaded,
                                           **self.customization_options(ctx))
        if pretraining is not None:
            self._training["pretraining"] = pretraining
        return estimates

    def customization_options(self, ctx: RunContext) -> dict[str, Any]:
        """Extra arguments of the service's training (RAPT adds its plain tokens and reconstruction)."""
        return {}
