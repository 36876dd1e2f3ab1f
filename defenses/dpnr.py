"""DPNR: word dropout plus Laplace-noised sentence representations (Lyu et al., Findings of EMNLP 2020)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any, ClassVar, Mapping, Sequence

import numpy as np

from rapt_audit.api.capabilities import LAPLACE_REPRESENTATION, Capabilities
from rapt_audit.api.context import RunContext
from rapt_audit.api.errors import PrivacyParameterError, UsageError
from rapt_audit.api.params import Check, Range
from rapt_audit.api.plugins import DEFENSES
from rapt_audit.api.types import Estimate, Record, Release
from rapt_audit.defenses._representation import (
    LaplaceRelease,
    TaskClassifier,
    check_sensitivity,
    minmax_rows,
    word_dropout,
)
from rapt_audit.encoder.encode import cached_pooled
from rapt_audit.mechanisms.noise import check_epsilon
from rapt_audit.scoring.classification import classification_utility
from rapt_audit.utility.probes import require_labels


@DEFENSES.register("dpnr", tags=("representation", "laplace"))
@dataclass
class DpnrDefense(TaskClassifier, LaplaceRelease):
    """DPNR (Lyu et al., Findings of EMNLP 2020): word dropout, then Laplace noise on the representation.

    Per text: each whitespace word is dropped independently with probability ``mu`` (fresh per
    example, at training and inference, as in the paper) → frozen encoder (all-MiniLM-L6-v2 by
    default) → mean pooling → per-example min-max normalisation to ``[0, 1]^d`` →
    ``Laplace(0, sensitivity/epsilon)`` noise fresh per example and per dimension → released.
    Utility: an MLP classifier (``hidden`` units, dropout, fixed ``epochs``) trained on the released
    victim-train vectors, standardised with train statistics, scored on the released victim-test
    vectors.

    Departures: the encoder is frozen (the paper trains it end to end); words are removed from the
    text rather than zeroing their embeddings (same information, and the frozen encoder then sees
    ordinary text); ``sensitivity`` = 1 is the paper's per-coordinate convention, so a release is
    ``d·epsilon``-LDP per record (``release.meta["epsilon_per_record"]``). Public DPNR code adds one
    scalar of noise per example and leaves word dropout off; this does neither.
    Defaults: RAPT Fig. 7's DPNR (μ = 0.1, ε = 5).
    """

    exposes: ClassVar[frozenset[str]] = frozenset({"sequence_embeddings"})
    capabilities: ClassVar[Capabilities] = Capabilities(audit=LAPLACE_REPRESENTATION, figure_place=7)
    profiles: ClassVar[Mapping[str, Mapping[str, Any]]] = {"smoke": {"epochs": 3, "hidden": 32}}

    epsilon: Annotated[float, Check(check_epsilon)] = 5.0
    # mu = 1 would drop every word.
    mu: Annotated[float, Range(0, 1, high_open=True, error=PrivacyParameterError,
                               note="the fraction of words dropped")] = 0.1
    sensitivity: Annotated[float, Check(check_sensitivity)] = 1.0
    # hidden, dropout, lr, epochs, batch_size: the utility classifier's (see TaskClassifier).

    _classifier: Any = field(default=None, init=False, repr=False)
    _train: tuple[Record, ...] = field(default=(), init=False, repr=False)

    @property
    def noise_scale(self) -> float:
        """The Laplace scale ``sensitivity / epsilon`` (0 for epsilon = inf)."""
        return 0.0 if np.isinf(self.epsilon) else self.sensitivity / self.epsilon

    def dropped_texts(self, records: Sequence[Record], *, ctx: RunContext) -> tuple[list[str], int, int]:
        """Each record's text after word dropout, plus the total words and words dropped.

        The generator is keyed by the record's uid and ``mu`` but not by ``epsilon``, so a sweep
        over epsilon reuses one encoding of the dropped-out texts.
        """
        texts, words, dropped = [], 0, 0
        for r in records:
            text, n, k = word_dropout(r.text, self.mu, ctx.rng("defense", self.name, "dropout", self.mu, r.uid))
            texts.append(text)
            words, dropped = words + n, dropped + k
        return texts, words, dropped

    def _representations(self, records: Sequence[Record], ctx: RunContext) -> tuple[np.ndarray, dict[str, Any]]:
        records = list(records)
        texts, words, dropped = self.dropped_texts(records, ctx=ctx)
        pooled = cached_pooled(ctx, records, tag=f"dpnr-dropout-{self.mu!r}", texts=texts)
        noisy = self.laplace_release(minmax_rows(pooled), [r.uid for r in records], ctx=ctx)
        return noisy, {"words": words, "words_dropped": dropped}

    def release(self, records: Sequence[Record], *, ctx: RunContext) -> Release:
        """The noisy normalised representation of each record's dropped-out text."""
        x, counts = self._representations(records, ctx)
        eps = "inf" if np.isinf(self.epsilon) else self.epsilon
        per_record = "inf" if np.isinf(self.epsilon) else x.shape[1] * self.epsilon / self.sensitivity
        return Release(uids=[r.uid for r in records], sequence_embeddings=x,
                       meta={"mechanism": self.name, "epsilon": eps, "mu": self.mu, "noise_scale": self.noise_scale,
                             "epsilon_per_record": per_record, "normalisation": "per-example min-max", **counts})

    def fit(self, train: Sequence[Record], *, ctx: RunContext) -> DpnrDefense:
        """Train the task classifier on released victim-train vectors (when the records have labels)."""
        self._train, self._classifier = tuple(train), None
        if not self._train or any(r.label is None for r in self._train):
            return self  # nothing to learn for utility (e.g. Trustpilot); utility() says so
        y = require_labels(self._train, split="victim_train")
        x, _ = self._representations(self._train, ctx)
        self._classifier = self.fit_task_classifier(x, y, n_classes=int(y.max()) + 1, device=ctx.device,
                                                    precision=ctx.precision,
                                                    seed=ctx.seed_for("defense", self.name, "classifier"))
        return self

    def utility(self, test: Sequence[Record], *, ctx: RunContext) -> Mapping[str, Estimate]:
        """Accuracy, macro-F1 and AUC of the classifier on released victim-test vectors."""
        y_test = require_labels(test, split="victim_test")
        if self._classifier is None:
            require_labels(self._train, split="victim_train")  # raises the DataError that says why
            raise UsageError("dpnr: call fit(train, ctx=...) before utility")
        x, _ = self._representations(test, ctx)
        return classification_utility(self._classifier(x), y_test, rng=ctx.rng("utility", self.name))
