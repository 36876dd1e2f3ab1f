"""Attribute inference: an MLP predicts an author's private attribute from what the user released."""

from __future__ import annotations

import functools
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, ClassVar, Mapping, Sequence

import numpy as np

from rapt_audit.api.context import RunContext
from rapt_audit.api.params import CheckedParams, PositiveFloat, PositiveInt
from rapt_audit.api.plugins import ATTACKS
from rapt_audit.api.threat import ThreatModel
from rapt_audit.api.types import RELEASE_KINDS, AttackerData, AttackResult, Record, Release, Skip
from rapt_audit.attacks._base import adaptive_release, check_disjoint, require_size
from rapt_audit.encoder.encode import input_table, token_id_lists
from rapt_audit.encoder.models import one_thread
from rapt_audit.scoring.classification import accuracy_estimate, chance_scores, macro_f1_estimate
from rapt_audit.scoring.metrics import metric
from rapt_audit.utility.on_device import autocast
from rapt_audit.utility.training import EarlyStopping, adam, fit, shuffled, supervised_loss

metric("attribute_macro_f1", "attack", False, "macro-F1 of the attacker's private-attribute guesses")
metric("attribute_advantage", "attack", False, "attribute accuracy minus the majority guess's accuracy on the same "
       "victim records (paired), in [-1, 1]", bounded=False)
metric("attribute_privacy", "privacy", True, "chance-normalised privacy 1 - max(0, (accuracy - majority) / "
       "(1 - majority)): 1 at or below the majority guess (no leak), 0 for an attacker always right")
metric("paper_privacy", "privacy", True, "RAPT's empirical privacy, 1 - attack accuracy (chance is not 1: "
       "1 - the majority guess's accuracy)")


def release_features(release: Release, *, ctx: RunContext) -> tuple[np.ndarray, str]:
    """One feature vector per released record, and the name of the feature kind used.

    * ``sequence_embeddings`` — the released vector itself;
    * ``token_embeddings`` — the mean of the released (noisy) token vectors (RAPT Sec. IV-A2);
    * ``texts`` — the mean of the public model's input embeddings of the released text's tokens:
      the attacker holds the public model (white-box), so a privatized text is as good as the
      embeddings of the tokens it decodes to.

    Empty sequences get the zero vector. The richest kind present is used.
    """
    if release.sequence_embeddings is not None:
        return np.asarray(release.sequence_embeddings, dtype=np.float32), "sequence_embeddings"
    if release.token_embeddings is not None:
        return _mean_rows(release.token_embeddings), "token_embeddings"
    if release.texts is not None:
        table = input_table(ctx)
        ids = token_id_lists(ctx, list(release.user_texts()))
        return _mean_rows([table[i] for i in ids], width=table.shape[1]), "texts"
    raise Skip("the release carries no texts, token embeddings or sequence embeddings")


def _mean_rows(sequences: Sequence[np.ndarray], *, width: int | None = None) -> np.ndarray:
    width = width if width is not None else next((np.asarray(s).shape[-1] for s in sequences if len(s)), 1)
    out = np.zeros((len(sequences), width), dtype=np.float32)
    for i, seq in enumerate(sequences):
        if len(seq):
            out[i] = np.asarray(seq, dtype=np.float32).reshape(-1, width).mean(axis=0)
    return out


@dataclass
class AttributeInferenceAttack(CheckedParams):
    """Attribute inference (RAPT v3 Sec. IV-A2, after Plant et al., EMNLP 2021): MLP on mean embeddings.

    A two-layer MLP (``hidden`` units, ReLU) reads one vector per record (see
    :func:`release_features`: the mean of the released token vectors, the mean input embedding of
    a released text's tokens, or the released sequence vector) and predicts the private attribute.
    The attacker is adaptive: it trains on the defense's release of its own training records with
    their known attribute values, selects the epoch with the best accuracy on the release of its
    own validation records (never the victim's test split), and predicts the victim's attribute
    from the victim's release. Features are standardised with attacker-train statistics.

    Metrics, each with a 95 % bootstrap interval over victim records: ``attribute_accuracy.<attr>``,
    ``attribute_macro_f1.<attr>``, ``majority_baseline.<attr>`` (always guessing the attacker-train
    majority value), ``attribute_advantage.<attr>`` (accuracy − majority baseline, paired over the same
    records), ``attribute_privacy.<attr>`` (the headline) and ``paper_privacy.<attr>`` (1 − accuracy).

    The headline departs from RAPT's ``1 − accuracy`` on purpose: it is chance-normalised,
    ``1 − max(0, (accuracy − majority) / (1 − majority))``
    (:func:`~rapt_audit.scoring.classification.chance_scores`).
    Under ``1 − accuracy`` chance is ``1 − majority`` — about 0.5 for gender, 0.85 for six age bins — so
    the two attributes cannot be read on one scale, and an attacker below the majority guess reads as
    more privacy than no information at all. Here chance (or worse) is 1 and a perfect attacker 0 for
    every attribute; ``paper_privacy`` keeps the paper's column for comparison with it.
    """

    requires: ClassVar[frozenset[str]] = RELEASE_KINDS
    threat_model: ClassVar[ThreatModel] = ThreatModel(knows=("release", "mechanism", "public_model"), adaptive=True,
                                                      auxiliary=("attacker_split",))
    profiles: ClassVar[Mapping[str, Mapping[str, Any]]] = {"smoke": {"epochs": 15}, "cpu": {"epochs": 30}}

    attribute: str = "gender"
    hidden: PositiveInt = 768
    epochs: PositiveInt = 50
    lr: PositiveFloat = 1e-3
    batch_size: PositiveInt = 64
    min_train: PositiveInt = 20
    min_valid: PositiveInt = 10

    _aux: AttackerData | None = field(default=None, init=False, repr=False)
    _classes: list[str] = field(default_factory=list, init=False, repr=False)
    _scaler: tuple[np.ndarray, np.ndarray] | None = field(default=None, init=False, repr=False)
    _model: Any = field(default=None, init=False, repr=False)
    _fit_details: dict[str, Any] = field(default_factory=dict, init=False, repr=False)

    def _with_attribute(self, records: Sequence[Record]) -> list[Record]:
        return [r for r in records if r.attributes.get(self.attribute) not in (None, "")]

    def fit(self, aux: AttackerData, defense: Any, *, ctx: RunContext) -> AttributeInferenceAttack:
        """Train the MLP on the defense's release of the attacker's records; pick the epoch on valid."""
        self._aux = aux
        train, valid = self._with_attribute(aux.train), self._with_attribute(aux.valid)
        if not train:
            raise Skip(f"the attacker's records carry no {self.attribute!r} attribute "
                       f"(attributes present: {sorted({k for r in aux.train for k in r.attributes}) or 'none'})")
        require_size(train, self.min_train, attack=self.name, what=f"attacker_train (with {self.attribute!r})")
        require_size(valid, self.min_valid, attack=self.name, what=f"attacker_valid (with {self.attribute!r})")
        self._classes = sorted({r.attributes[self.attribute] for r in train})
        if len(self._classes) < 2:
            raise Skip(f"the attacker's training records all have {self.attribute}={self._classes[0]!r}; "
                       "nothing to learn")
        x_train, kind = release_features(adaptive_release(defense, train, ctx=ctx), ctx=ctx)
        x_valid, _ = release_features(adaptive_release(defense, valid, ctx=ctx), ctx=ctx)
        mean, std = x_train.mean(axis=0), x_train.std(axis=0) + 1e-6
        self._scaler = (mean, std)
        y_train, y_valid = self._encode(train), self._encode(valid)
        with one_thread(ctx.device):
            self._model, best_epoch, best_acc = self._train((x_train - mean) / std, y_train,
                                                            (x_valid - mean) / std, y_valid, ctx=ctx)
        self._fit_details = {"feature_kind": kind, "chosen_epoch": best_epoch, "max_epochs": self.epochs,
                             "attacker_valid_accuracy": best_acc, "classes": self._classes,
                             "attacker_train_class_counts": dict(Counter(r.attributes[self.attribute] for r in train)),
                             "attacker_train": len(train), "attacker_valid": len(valid)}
        return self

    def _encode(self, records: Sequence[Record]) -> np.ndarray:
        # A value the attacker never saw gets -1: it can never be predicted, so it counts as a miss.
        index = {c: i for i, c in enumerate(self._classes)}
        return np.array([index.get(r.attributes[self.attribute], -1) for r in records], dtype=np.int64)

    def _train(self, x_train: np.ndarray, y_train: np.ndarray, x_valid: np.ndarray, y_valid: np.ndarray, *,
               ctx: RunContext) -> tuple[Any, int, float]:
        """Adam on cross-entropy; returns the model of the epoch with the best valid accuracy (earliest on ties)."""
        import torch  # lazy (torch)

        torch.manual_seed(ctx.seed_for("attack", self.name, "init"))
        model = torch.nn.Sequential(torch.nn.Linear(x_train.shape[1], self.hidden), torch.nn.ReLU(),
                                    torch.nn.Linear(self.hidden, len(self._classes))).to(ctx.device)
        xv = torch.as_tensor(x_valid, dtype=torch.float32, device=ctx.device)

        def valid_accuracy(model: Any) -> float:
            with torch.no_grad():
                return float((model(xv).argmax(1).cpu().numpy() == y_valid).mean())

        x_train = np.asarray(x_train, dtype=np.float32)
        outcome = fit(model, loss=supervised_loss(model, x_train, y_train, torch.nn.functional.cross_entropy,
                                                  device=ctx.device),
                      batches=shuffled(len(x_train), self.batch_size, rng=ctx.rng("attack", self.name, "order")),
                      optimizer=adam(model.parameters(), lr=self.lr),
                      stop=EarlyStopping(self.epochs, valid_accuracy),
                      autocast=functools.partial(autocast, ctx.device, ctx.precision))
        return model, outcome.best_epoch, outcome.best_score

    def attack(self, release: Release, truth: Sequence[Record], *, ctx: RunContext) -> AttackResult:
        """Predict the victim's attribute from the release; score against the victim's true values."""
        import torch  # lazy (torch)

        if self._aux is None:
            raise RuntimeError("call fit() before attack()")
        check_disjoint(self._aux, truth)
        position = {uid: i for i, uid in enumerate(release.uids)}
        scored = self._with_attribute(truth)
        if not scored:
            raise Skip(f"the victim records carry no {self.attribute!r} attribute")
        missing = [r.uid for r in scored if r.uid not in position]
        if missing:
            raise ValueError(f"the release lacks victim records {missing[:3]}")
        features, _ = release_features(release, ctx=ctx)
        mean, std = self._scaler
        x = torch.as_tensor((features[[position[r.uid] for r in scored]] - mean) / std, dtype=torch.float32,
                            device=ctx.device)
        with torch.no_grad(), one_thread(ctx.device), autocast(ctx.device, ctx.precision):
            predicted = self._model(x).argmax(1).cpu().numpy()
        truth_y = self._encode(scored)
        rng = ctx.rng("attack", self.name, "bootstrap")
        accuracy = accuracy_estimate(predicted, truth_y, rng=rng)
        counts = Counter(r.attributes[self.attribute] for r in self._with_attribute(self._aux.train))
        majority = max(sorted(counts), key=lambda c: counts[c])  # ties → alphabetically first value
        guessed = np.full_like(truth_y, self._classes.index(majority))
        baseline = accuracy_estimate(guessed, truth_y, rng=rng)
        attr = self.attribute
        # Bootstrap draws in a fixed order: accuracy, the baseline, macro-F1, then advantage and privacy.
        macro_f1 = macro_f1_estimate(predicted, truth_y, rng=rng, n_classes=len(self._classes))
        advantage, privacy = chance_scores(predicted, guessed, truth_y, rng=rng)
        # The headline first: it is the privacy measure that equals it (scoring.metrics.headline_metric).
        metrics = {f"attribute_privacy.{attr}": privacy, f"paper_privacy.{attr}": accuracy.complement(),
                   f"attribute_accuracy.{attr}": accuracy, f"attribute_macro_f1.{attr}": macro_f1,
                   f"majority_baseline.{attr}": baseline, f"attribute_advantage.{attr}": advantage}
        details = {**self._fit_details, "attribute": attr, "majority_value": majority, "victim_scored": len(scored),
                   "victim_class_counts": dict(Counter(r.attributes[attr] for r in scored)),
                   "predicted_class_counts": dict(Counter(self._classes[p] for p in predicted))}
        return AttackResult(privacy, metrics, details)


@ATTACKS.register("attribute_gender", tags=("inference", "attribute"))
@dataclass
class GenderInferenceAttack(AttributeInferenceAttack):
    """Attribute inference of gender (RAPT v3 Sec. IV-A2, after Plant et al., EMNLP 2021)."""

    attribute: str = "gender"


@ATTACKS.register("attribute_age", tags=("inference", "attribute"))
@dataclass
class AgeInferenceAttack(AttributeInferenceAttack):
    """Attribute inference of the age bin (RAPT v3 Sec. IV-A2, after Plant et al., EMNLP 2021)."""

    attribute: str = "age"
