"""Autoencoder-based black-box embedding inversion (RAPT v3 §IV-A1)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Mapping, Sequence

import numpy as np

from rapt_audit.api.context import RunContext
from rapt_audit.api.params import PositiveInt
from rapt_audit.api.plugins import ATTACKS
from rapt_audit.api.threat import ThreatModel
from rapt_audit.api.types import AttackerData, AttackResult, Record, Release, Skip
from rapt_audit.attacks._inversion import LearnedTokenInversion
from rapt_audit.attacks._token_views import Units, accuracy, aligned_fraction, features, per_record_mean
from rapt_audit.encoder.models import one_thread
from rapt_audit.encoder.vocab import embedding_space
from rapt_audit.mechanisms.engines import vocabulary_index
from rapt_audit.scoring.metrics import metric
from rapt_audit.utility.on_device import autocast

metric("reconstruction_mse", "privacy", True,
       "autoencoder reconstruction error ||x - x_hat||^2 of original token embeddings (RAPT's AE metric)",
       bounded=False)

_BATCH = 4096


@ATTACKS.register("ae_inversion", tags=("inversion", "learned"))
@dataclass
class AEInversionAttack(LearnedTokenInversion):
    """Autoencoder black-box inversion (RAPT v3 §IV-A1 "autoencoder-based black-box attack"), adaptive.

    An encoder φ (two ReLU layers, down to ``latent``) and a decoder ψ (two layers back up) map the
    released representation of a token — the noisy vector, or the input embedding of the aligned
    released token for text releases, optionally with the frozen encoder's contextual state — to a
    reconstruction x̂ = ψ(φ(·)) of the **clean original token embedding** x, trained with MSE on the
    attacker's own records privatized by the same defense; the epoch with the lowest MSE on the
    attacker's validation records is kept.

    Reported, over regular original tokens of the victim:

    * ``content_privacy`` (the headline, as for every inversion attack: one unit across release kinds,
      issue #39) with ``content_f1`` and the rest of the content-token unit
      (:mod:`rapt_audit.scoring.content_tokens`) — the nearest tokens of x̂ joined into words, each
      record's set of content words against the original's;
    * ``reconstruction_mse`` — mean over tokens of ‖x − x̂‖² (RAPT's definition: the squared L2
      norm, summed over dimensions; higher = more private, not bounded), RAPT's own measure, kept as a
      secondary one: an error in embedding space has no chance level and no common scale with the other
      attacks. An original token with no aligned released token gets the attacker's best constant
      guess, the mean attacker-train target (it has nothing else to go on);
    * ``token_accuracy`` — how often the nearest regular vocabulary embedding of x̂ is the original
      token (unaligned originals are misses).

    ``details["prior_mse"]`` is the MSE of the constant guess on the victim tokens: an attack that
    learned nothing scores about that much.
    """

    requires: ClassVar[frozenset[str]] = frozenset({"texts", "token_embeddings"})
    threat_model: ClassVar[ThreatModel] = ThreatModel(knows=("release", "mechanism", "public_model"), adaptive=True,
                                                      auxiliary=("attacker_split",))
    profiles: ClassVar[Mapping[str, Mapping[str, Any]]] = {
        "smoke": {"hidden": 128, "latent": 64, "epochs": 5, "batch_size": 512, "context": False, "patience": 2},
        "cpu": {"hidden": 512, "latent": 256, "epochs": 15, "context": False},
    }

    # hidden, epochs, batch_size, lr (1e-3), weight_decay, context, patience, min_*_records: see the base.
    latent: PositiveInt = 256

    _prior: np.ndarray | None = field(default=None, init=False, repr=False)

    def _reconstruct(self, feats: np.ndarray, units: Units, ctx: RunContext) -> np.ndarray:
        """x̂ per unit from the released features (the prior mean for units with no released counterpart),
        computed in the run's precision and returned in float32."""
        import torch  # lazy (torch)

        out = np.repeat(self._prior[None, :], units.source.size, axis=0).astype(np.float32)
        if units.aligned.any():
            x = ((feats[units.source[units.aligned]] - self._mean) / self._std).astype(np.float32)
            with torch.inference_mode(), autocast(ctx.device, ctx.precision):  # every chunk queued, read once
                x = torch.as_tensor(x, device=ctx.device)
                rec = torch.cat([self._net(x[s:s + _BATCH]).float() for s in range(0, len(x), _BATCH)])
            out[units.aligned] = rec.cpu().numpy()
        return out

    def fit(self, aux: AttackerData, defense: Any, *, ctx: RunContext) -> AEInversionAttack:
        """Privatize the attacker's records with ``defense`` and train the autoencoder on them."""
        import torch  # lazy (torch)

        train_views, valid_views, train_units, valid_units = self._attacker_data(aux, defense, ctx=ctx)
        space = embedding_space(ctx)
        train_feats = features(train_views, ctx=ctx, context=self.context)
        x = train_feats[train_units.source[train_units.aligned]]
        valid_feats = features(valid_views, ctx=ctx, context=self.context)
        y = np.asarray(space.vectors[train_units.target_row[train_units.aligned]], dtype=np.float32)
        self._standardise_with(x)
        self._prior = y.mean(axis=0)
        x = ((x - self._mean) / self._std).astype(np.float32)
        valid_targets = np.asarray(space.vectors[valid_units.target_row], dtype=np.float32)
        seed = ctx.seed_for("attack", self.name, "train")
        h, z, d = int(self.hidden), int(self.latent), y.shape[1]
        with one_thread(ctx.device, seed=seed):
            self._net = torch.nn.Sequential(
                torch.nn.Linear(x.shape[1], h), torch.nn.ReLU(), torch.nn.Linear(h, z), torch.nn.ReLU(),  # φ
                torch.nn.Linear(z, h), torch.nn.ReLU(), torch.nn.Linear(h, d)).to(ctx.device)  # ψ

            def neg_valid_mse(_model: Any) -> float:
                if valid_units.source.size == 0:
                    return 0.0
                err = self._reconstruct(valid_feats, valid_units, ctx) - valid_targets
                return -float((err * err).sum(axis=1).mean())

            def train() -> dict[str, Any]:
                outcome = self._train_selected(self._net, x, y, criterion=torch.nn.functional.mse_loss,
                                               valid_score=neg_valid_mse, seed=seed, ctx=ctx)
                return {"best_epoch": outcome.best_epoch, "scores": [round(-v, 5) for v in outcome.scores]}

            record, cached = self._trained_or_read(train_feats, train_units, valid_feats, valid_units, train=train,
                                                   ctx=ctx)
        self._fit_details = {"release_kind": self._kind, "train_tokens": int(len(y)),
                             "valid_tokens": int(valid_units.source.size), "best_epoch": record["best_epoch"],
                             "valid_mse_by_epoch": record["scores"], "context": bool(self.context),
                             "input_dim": int(x.shape[1]), "model_from_cache": cached}
        return self

    def attack(self, release: Release, truth: Sequence[Record], *, ctx: RunContext) -> AttackResult:
        """Reconstruct every victim token embedding from its release; score MSE and NN accuracy."""
        views, units = self._victim_views(release, truth, ctx=ctx)
        space = embedding_space(ctx)
        target = np.asarray(space.vectors[units.target_row], dtype=np.float32)
        rec = self._reconstruct(features(views, ctx=ctx, context=self.context), units, ctx)
        sq_err = ((rec - target) ** 2).sum(axis=1)
        prior_err = ((self._prior[None, :] - target) ** 2).sum(axis=1)
        nearest = vocabulary_index(ctx).search(rec)
        hits = units.aligned & (nearest == units.target_row)
        rng = ctx.rng("attack", self.name)
        mse = per_record_mean(sq_err, units, len(views), rng=rng)
        metrics = {"reconstruction_mse": mse, "token_accuracy": accuracy(hits, units, len(views), rng=rng),
                   **self._content(np.where(units.aligned, nearest, -1), units, truth, ctx=ctx)}
        details = {**self._fit_details, "unit": "model tokenizer token (regular vocabulary only)",
                   "mse_definition": "mean over tokens of the squared L2 error summed over dimensions (RAPT)",
                   "dims": int(target.shape[1]), "tokens_scored": int(units.source.size), "records": len(views),
                   "aligned_fraction": aligned_fraction(units), "prior_mse": float(prior_err.mean())}
        if "content_privacy" not in metrics:
            raise Skip(f"attack {self.name!r}: the victim records hold no content words to recover")
        return AttackResult(metrics["content_privacy"], metrics, details)
