"""CAPE: Laplace-noised sentence representations with an adversarial head (Plant et al., EMNLP 2021)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any, ClassVar, Mapping, Sequence

import numpy as np

from rapt_audit.api.capabilities import LAPLACE_REPRESENTATION, Capabilities
from rapt_audit.api.context import RunContext
from rapt_audit.api.errors import DataError, PrivacyParameterError, UsageError
from rapt_audit.api.params import Check, CheckedParams, Dropout, PositiveFloat, PositiveInt, Range
from rapt_audit.api.plugins import DEFENSES
from rapt_audit.api.types import Estimate, Record, Release
from rapt_audit.defenses._representation import LaplaceRelease, check_sensitivity, require_attribute
from rapt_audit.encoder.encode import cached_pooled
from rapt_audit.encoder.models import one_thread
from rapt_audit.mechanisms.noise import check_epsilon
from rapt_audit.scoring.classification import classification_utility
from rapt_audit.utility.on_device import autocast
from rapt_audit.utility.probes import require_labels


def check_attribute(attribute: str) -> str:
    """The private attribute CAPE's adversary predicts must be named."""
    if not attribute:
        raise UsageError("cape: attribute must name the private attribute the adversary predicts (e.g. gender)")
    return attribute


@DEFENSES.register("cape", tags=("representation", "laplace", "adversarial"))
@dataclass
class CapeDefense(CheckedParams, LaplaceRelease):
    """CAPE (Plant et al., EMNLP 2021): noisy pooled representation, adversary behind gradient reversal.

    Pipeline per text: frozen encoder (the run's model, all-MiniLM-L6-v2 by default) → mean pooling
    → a trainable client-side projection ``P`` (d × d, initialised to the identity) → per-example
    min-max normalisation to ``[0, 1]^d`` → ``Laplace(0, sensitivity/epsilon)`` noise, fresh for
    every example and every dimension → the released vector. A task classifier (MLP, ``hidden``
    units, dropout) reads the noisy vector; an adversary head reads it through a gradient-reversal
    layer of weight ``lam`` and learns to predict the private ``attribute``, so ``P`` is pushed to
    remove what the adversary finds. Noise is redrawn at every training step, as in the paper.

    Departures from the paper, and why:

    * The paper fine-tunes the whole encoder; here the encoder is frozen (CPU budget) and the
      trainable client-side part is the projection ``P``. Without it gradient reversal could not
      change the release at all.
    * Normalisation is per example (the public code normalises per batch, which makes one user's
      release depend on other users' texts); noise is per example and per dimension (the public
      code shares one noise vector across the batch).
    * ``sensitivity`` defaults to 1 as in the paper (scale ``1/epsilon``), which is a per-coordinate
      bound: the L1 sensitivity of a vector in ``[0, 1]^d`` is ``d``, so each release is
      ``d·epsilon/sensitivity``-LDP. ``release.meta["epsilon_per_record"]`` states that number; set
      ``sensitivity=d`` for ``epsilon``-LDP per record.

    Training needs the private attribute: with ``lam > 0`` at least one training record must carry
    ``attribute`` (else a :class:`~rapt_audit.api.errors.DataError` naming it). Records without a task
    label contribute only the adversary loss and records without the attribute only the task loss,
    so CAPE can be trained on a mix of a labelled dataset and an attribute dataset (the Fig. 7
    script does this, because no dataset here has both). ``lam = 0`` trains no adversary.
    Defaults follow the CAPE paper's setting (Plant et al., EMNLP 2021): ε = 0.1, λ = 1.0, hidden 256,
    dropout 0.4, lr 1e-3, 20 epochs, batch 64.
    """

    exposes: ClassVar[frozenset[str]] = frozenset({"sequence_embeddings"})
    capabilities: ClassVar[Capabilities] = Capabilities(audit=LAPLACE_REPRESENTATION, figure_place=6)
    profiles: ClassVar[Mapping[str, Mapping[str, Any]]] = {"smoke": {"epochs": 3, "hidden": 32}}

    epsilon: Annotated[float, Check(check_epsilon)] = 0.1
    lam: Annotated[float, Range(0, error=PrivacyParameterError, note="the adversary's weight")] = 1.0
    attribute: Annotated[str, Check(check_attribute)] = "gender"
    sensitivity: Annotated[float, Check(check_sensitivity)] = 1.0
    hidden: PositiveInt = 256
    dropout: Dropout = 0.4
    lr: PositiveFloat = 1e-3
    adversary_lr: PositiveFloat = 1e-3
    epochs: PositiveInt = 20
    batch_size: PositiveInt = 64

    _model: Any = field(default=None, init=False, repr=False)
    _values: list[str] = field(default_factory=list, init=False, repr=False)
    _n_classes: int = field(default=0, init=False, repr=False)

    @property
    def noise_scale(self) -> float:
        """The Laplace scale ``sensitivity / epsilon`` (0 for epsilon = inf)."""
        return 0.0 if np.isinf(self.epsilon) else self.sensitivity / self.epsilon

    def fit(self, train: Sequence[Record], *, ctx: RunContext) -> CapeDefense:
        """Train the projection, the task head (records with labels) and the adversary (records with the attribute)."""
        from rapt_audit.defenses._adversarial import train_cape  # lazy (torch)
        train = list(train)
        if not train:
            raise DataError("cape: the training split is empty")
        labels = np.array([-1 if r.label is None else int(r.label) for r in train], dtype=np.int64)
        self._n_classes = int(labels.max()) + 1 if (labels >= 0).any() else 0
        attributes = np.full(len(train), -1, dtype=np.int64)
        self._values = []
        if self.lam > 0:
            has = require_attribute(train, self.attribute, who=f"cape's adversary (lam={self.lam})")
            self._values = sorted({r.attributes[self.attribute] for r, h in zip(train, has) if h})
            index = {v: i for i, v in enumerate(self._values)}
            attributes = np.array([index[r.attributes[self.attribute]] if h else -1 for r, h in zip(train, has)])
        self._model = train_cape(
            cached_pooled(ctx, train, tag="clean"), labels, attributes, n_classes=self._n_classes,
            n_values=len(self._values), noise_scale=self.noise_scale, adversary_weight=self.lam, hidden=int(self.hidden),
            dropout=float(self.dropout), lr=float(self.lr), adversary_lr=float(self.adversary_lr),
            epochs=int(self.epochs), batch_size=int(self.batch_size), seed=ctx.seed_for("defense", self.name, "train"),
            device=ctx.device, precision=ctx.precision)
        return self

    def _require_fit(self) -> Any:
        if self._model is None:
            raise UsageError("cape: call fit(train, ctx=...) before release or utility (the projection is trained)")
        return self._model

    def release(self, records: Sequence[Record], *, ctx: RunContext) -> Release:
        """The noisy normalised projection of each record's pooled representation."""
        model = self._require_fit()
        records = list(records)
        clean = model.project(cached_pooled(ctx, records, tag="clean"), ctx.device)
        # Noise keyed by uid but not by epsilon: one record's draws are the same uniforms at every
        # epsilon (common random numbers), so a sweep's curve is not jagged by resampling.
        noisy = self.laplace_release(clean, [r.uid for r in records], ctx=ctx)
        d = clean.shape[1]
        per_record = "inf" if np.isinf(self.epsilon) else d * self.epsilon / self.sensitivity
        return Release(uids=[r.uid for r in records], sequence_embeddings=noisy.astype(np.float32),
                       meta={"mechanism": self.name, "epsilon": "inf" if np.isinf(self.epsilon) else self.epsilon,
                             "noise_scale": self.noise_scale, "lam": self.lam, "attribute": self.attribute,
                             "epsilon_per_record": per_record, "normalisation": "per-example min-max"})

    def utility(self, test: Sequence[Record], *, ctx: RunContext) -> Mapping[str, Estimate]:
        """Accuracy, macro-F1 and AUC of CAPE's own task head on the released test representations."""
        import torch  # lazy (torch)

        model = self._require_fit()
        y_test = require_labels(test, split="victim_test")
        if model.task_head is None:
            raise DataError("cape was trained on records without task labels, so it has no task classifier; "
                            "fit it on a labelled dataset (sst2, qqp, synthetic) to measure utility")
        x = self.release(test, ctx=ctx).sequence_embeddings
        with torch.no_grad(), one_thread(ctx.device), autocast(ctx.device, ctx.precision):
            logits = model.task_head(torch.as_tensor(x, device=ctx.device))
        probs = torch.softmax(logits.float(), dim=1).cpu().numpy()
        return classification_utility(probs, y_test, rng=ctx.rng("utility", self.name))
