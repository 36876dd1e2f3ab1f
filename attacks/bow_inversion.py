"""Bag-of-words inversion of sentence representations (Song & Raghunathan, CCS 2020)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, ClassVar, Mapping, Sequence

import numpy as np

from rapt_audit.api.context import RunContext
from rapt_audit.api.digests import array_digest, code_digest
from rapt_audit.api.errors import UsageError
from rapt_audit.api.params import Dropout, PositiveInt, Range, get_params
from rapt_audit.api.plugins import ATTACKS
from rapt_audit.api.threat import ThreatModel
from rapt_audit.api.types import AttackerData, AttackResult, Record, Release, Skip
from rapt_audit.attacks._base import adaptive_release, check_disjoint
from rapt_audit.attacks._inversion import SelectedTraining
from rapt_audit.encoder.models import one_thread
from rapt_audit.scoring import content_tokens as unit
from rapt_audit.scoring.content_tokens import ContentPrior, content_scores, content_tokens, fit_prior
from rapt_audit.utility import training
from rapt_audit.utility.on_device import autocast
from rapt_audit.utility.state_cache import cached_state

#: The code that builds, trains and thresholds the network (cached weights are reused only by it).
CODE_VERSION = code_digest(__file__, training.__file__, unit.__file__, Path(__file__).with_name("_inversion.py"))

_KIND = "sequence_embeddings"


def best_threshold(probabilities: np.ndarray, labels: np.ndarray, total_true: float) -> tuple[float, float]:
    """The probability threshold with the best content F1 over records, and that F1.

    A record's guess is every vocabulary word with probability ≥ the threshold. Sorting the (record, word)
    probabilities gives the hits of every threshold as a cumulative sum; thresholds are cut only between
    distinct probabilities (tied words are all in or all out).

    Only the largest probabilities are sorted: a threshold that lets ``c`` guesses through has F1 = 2·hits /
    (c + total_true) ≤ 2·total_true / (c + total_true) once ``c`` exceeds ``total_true``, so when the best F1
    among the top ``c0`` candidates reaches that bound at ``c0``, no lower threshold can beat it, and the answer
    is exactly the full sort's. Otherwise the candidates grow to what the best F1 so far says the bound needs,
    and to the full sort when that is most of them. At the paper profile (17,055 records × 10,000 words, chosen
    again at every epoch) the full sort took 60 s a call on two cores.

    Args:
        probabilities: ``(n, V)`` predicted probabilities of the vocabulary words.
        labels: ``(n, V)`` whether each word is among the record's content tokens.
        total_true: Σ over records of their content tokens, out-of-vocabulary ones included (they cost recall).
    """
    flat, hit = probabilities.ravel(), labels.ravel()
    keep = max(1024, 2 * int(total_true) + 1)
    while True:
        whole = 2 * keep >= flat.size
        if not whole:
            kth = np.partition(flat, flat.size - keep)[flat.size - keep]
            whole = bool(np.isnan(kth))  # NaNs sort last: a diverged model is ranked as the full sort ranks it
        if whole:
            values, marks = flat, hit
        else:
            chosen = np.flatnonzero(flat >= kth)  # every tie of the smallest candidate too
            values, marks = flat[chosen], hit[chosen]
        order = np.argsort(-values, kind="stable")
        ranked = values[order]
        hits = np.cumsum(marks[order], dtype=np.float64)
        ends = np.flatnonzero(np.r_[ranked[1:] < ranked[:-1], True])  # last position of each run of equal values
        f1 = 2 * hits[ends] / (ends + 1 + total_true)
        best = int(np.argmax(f1))
        below = len(values) + 1  # the fewest guesses any threshold under the candidates lets through
        if whole or (below > total_true and f1[best] >= 2 * total_true / (below + total_true)):
            return float(ranked[ends[best]]), float(f1[best])
        needed = total_true * (2 / f1[best] - 1) if f1[best] > 0 else float(flat.size)  # where the bound is met
        keep = max(4 * keep, int(needed) + 1)


@ATTACKS.register("bow_inversion", tags=("inversion",))
@dataclass
class BowInversionAttack(SelectedTraining):
    """Bag-of-words inversion (Song & Raghunathan, "Information Leakage in Embedding Models", CCS 2020), adaptive.

    Reads one released vector per record (``sequence_embeddings``: CAPE, DPNR, SnD's output) and predicts
    the set of content words of the record's text (:mod:`rapt_audit.scoring.content_tokens`): the paper's
    multi-label "bag of words" inversion of sentence embeddings. The adversary releases its own train and
    valid records through the same defense at the same setting (Kerckhoffs) and trains a multi-label model,
    one sigmoid per vocabulary word with binary cross-entropy, from the standardised released vector: a
    hidden layer of ``hidden`` ReLU units with dropout, or a linear model with ``hidden=0``. The vocabulary is
    the ``vocab_size`` content words found in most attacker-train texts; a victim word outside it counts
    as missed (``details["vocabulary_coverage"]`` is the attack's recall ceiling).

    The output layer starts at zero weights and at biases equal to each word's log-odds in attacker-train,
    so the untrained model guesses the same frequent words for every record, as the release-ignoring prior
    does; it is epoch 0 of the epoch selection, and training is kept only where it beats that on
    attacker-valid. The decision rule is a probability threshold, the one with the best content F1 on
    attacker-valid (:func:`best_threshold`), re-chosen at every epoch for the epoch selection (never on
    victim data). Empirical privacy is the chance-normalised ``content_privacy``: 1 no better than the
    prior, 0 every content word recovered.

    Departures from the paper: it trains on the defense's releases of the attacker's texts (on a clean
    release, the paper's setting), and its words are content words, stop words out, so that it reports
    the unit every inversion attack reports.

    Attributes:
        hidden: Width of the hidden layer; 0 for a linear model.
        vocab_size: The most content words the model predicts (the most common ones of attacker-train).
        dropout: Dropout after the hidden layer.

    ``epochs``, ``batch_size`` (records per step), ``lr``, ``weight_decay``, ``patience`` and ``min_*_records``:
    see :class:`~rapt_audit.attacks._inversion.SelectedTraining`.
    """

    requires: ClassVar[frozenset[str]] = frozenset({_KIND})
    threat_model: ClassVar[ThreatModel] = ThreatModel(knows=("release", "mechanism"), adaptive=True,
                                                      auxiliary=("attacker_split",))
    # cpu: lr 3e-3, not Adam's 1e-3, chosen on attacker-valid content F1 (SST-2 seed 0; 1e-3 → 3e-3): DPNR ε 1,
    # 10, 20, ∞ 0.044 → 0.043, 0.188 → 0.193, 0.237 → 0.249, 0.255 → 0.269; CAPE ε 5, ∞ 0.078 → 0.073,
    # 0.286 → 0.301. At 1e-3 the model was still learning when the 40 epochs ran out (best epochs 30-36), and
    # its fit cost 9-14 s in cells that take 3 s without it; at 3e-3 it stops by itself in 5-35 epochs, 2-9 s.
    profiles: ClassVar[Mapping[str, Mapping[str, Any]]] = {
        "smoke": {"vocab_size": 500, "hidden": 64, "epochs": 20, "patience": 3, "batch_size": 32, "lr": 3e-3},
        "cpu": {"vocab_size": 5000, "hidden": 512, "epochs": 40, "patience": 4, "batch_size": 128, "lr": 3e-3},
    }

    hidden: Annotated[int, Range(0, note="0: a linear model")] = 1024
    epochs: PositiveInt = 60
    patience: PositiveInt = 5
    vocab_size: PositiveInt = 10000
    dropout: Dropout = 0.2

    _aux: AttackerData | None = field(default=None, init=False, repr=False)
    _prior: ContentPrior | None = field(default=None, init=False, repr=False)
    _vocab: tuple[str, ...] = field(default=(), init=False, repr=False)
    _scale: tuple[np.ndarray, np.ndarray] | None = field(default=None, init=False, repr=False)
    _net: Any = field(default=None, init=False, repr=False)
    _threshold: float = field(default=1.0, init=False, repr=False)
    _fit_details: dict[str, Any] = field(default_factory=dict, init=False, repr=False)

    def _features(self, release: Release, records: Sequence[Record]) -> np.ndarray:
        """The released vectors of ``records``, standardised with attacker-train statistics once those are known."""
        if tuple(release.uids) != tuple(r.uid for r in records):
            raise ValueError("the release's uids do not match the records' uids in order")
        if release.sequence_embeddings is None:
            raise Skip(f"attack {self.name!r} needs a sentence-vector release ({_KIND}), but the release holds "
                       f"{', '.join(sorted(release.kinds)) or 'nothing'}")
        x = np.asarray(release.sequence_embeddings, dtype=np.float32)
        return x if self._scale is None else ((x - self._scale[0]) / self._scale[1]).astype(np.float32)

    def _labels(self, records: Sequence[Record]) -> tuple[np.ndarray, float]:
        """Multi-hot ``(n, V)`` float32 content words of the records over the vocabulary, and Σ of their content
        words (those outside the vocabulary included)."""
        index = {w: j for j, w in enumerate(self._vocab)}
        y = np.zeros((len(records), len(self._vocab)), dtype=np.float32)
        total = 0
        for i, record in enumerate(records):
            tokens = content_tokens(record.text)
            total += len(tokens)
            y[i, [index[t] for t in tokens if t in index]] = 1.0
        return y, float(total)

    def _build(self, in_dim: int, log_odds: np.ndarray, device: str) -> Any:
        import torch  # lazy (torch)

        body = [] if self.hidden == 0 else [torch.nn.Linear(in_dim, int(self.hidden)), torch.nn.ReLU(),
                                            torch.nn.Dropout(float(self.dropout))]
        out = torch.nn.Linear(int(self.hidden) or in_dim, len(log_odds))
        torch.nn.init.zeros_(out.weight)  # the untrained model is the frequency prior (see the class docstring)
        with torch.no_grad():
            out.bias.copy_(torch.as_tensor(log_odds, dtype=torch.float32))
        return torch.nn.Sequential(*body, out).to(device)

    def _probabilities(self, x: np.ndarray, ctx: RunContext) -> np.ndarray:
        """``(n, V)`` float32 word probabilities of standardised features, in the run's precision."""
        import torch  # lazy (torch)

        with torch.inference_mode(), autocast(ctx.device, ctx.precision):
            return torch.sigmoid(self._net(torch.as_tensor(x, device=ctx.device)).float()).cpu().numpy()

    def fit(self, aux: AttackerData, defense: Any, *, ctx: RunContext) -> BowInversionAttack:
        """Release the attacker's records through ``defense``, train the model, choose the threshold on valid."""
        import torch  # lazy (torch)

        if _KIND not in frozenset(getattr(defense, "exposes", frozenset())):
            raise Skip(f"attack {self.name!r} needs a sentence-vector release ({_KIND}); the defense releases "
                       f"{', '.join(sorted(getattr(defense, 'exposes', ()))) or 'nothing'}")
        self._require_sizes(aux)
        self._aux, self._scale, self._prior = aux, None, fit_prior(aux)
        self._vocab = self._prior.ranked[:int(self.vocab_size)]
        if not self._vocab:
            raise Skip("the attacker's training texts hold no content words")
        x = self._features(adaptive_release(defense, aux.train, ctx=ctx), aux.train)
        x_valid = self._features(adaptive_release(defense, aux.valid, ctx=ctx), aux.valid)
        self._scale = (x.mean(axis=0), np.maximum(x.std(axis=0), 1e-6))
        x, x_valid = ((v - self._scale[0]) / self._scale[1] for v in (x, x_valid))
        y, _ = self._labels(aux.train)
        y_valid, valid_total = self._labels(aux.valid)
        share = np.clip(y.mean(axis=0), 1 / (len(y) + 1), len(y) / (len(y) + 1))
        seed = ctx.seed_for("attack", self.name, "train")
        signature = {"attack": self.name, "params": get_params(self), "seed": ctx.seed, "device": ctx.device,
                     "precision": ctx.precision, "code": CODE_VERSION, "valid_total": valid_total,
                     "data": array_digest(x, y, x_valid, y_valid, np.array(self._vocab))}

        def valid_f1(_model: Any) -> float:
            return best_threshold(self._probabilities(x_valid, ctx), y_valid, valid_total)[1]

        def train() -> tuple[Any, dict[str, Any]]:
            outcome = self._train_selected(self._net, x, y, seed=seed, ctx=ctx, valid_score=valid_f1,
                                           criterion=torch.nn.functional.binary_cross_entropy_with_logits)
            threshold, _ = best_threshold(self._probabilities(x_valid, ctx), y_valid, valid_total)
            return self._net, {"best_epoch": outcome.best_epoch, "scores": [round(v, 4) for v in outcome.scores],
                               "threshold": threshold}

        def restore(state: dict[str, Any]) -> Any:
            self._net.load_state_dict(state)
            return self._net.eval()  # as training leaves it: no dropout when scoring

        with one_thread(ctx.device, seed=seed):
            self._net = self._build(x.shape[1], np.log(share / (1 - share)), ctx.device)
            _, record, cached = cached_state(ctx.cache_dir / "attacks", signature, device=ctx.device, train=train,
                                             restore=restore)
        self._threshold = float(record["threshold"])
        self._fit_details = {"vocabulary": len(self._vocab), "train_records": len(aux.train),
                             "valid_records": len(aux.valid), "best_epoch": record["best_epoch"],
                             "valid_content_f1_by_epoch": record["scores"], "threshold": self._threshold,
                             "prior_k": self._prior.k, "prior_valid_f1": round(self._prior.valid_f1, 4),
                             "feature_dim": int(x.shape[1]), "model_from_cache": cached}
        return self

    def attack(self, release: Release, truth: Sequence[Record], *, ctx: RunContext) -> AttackResult:
        """Predict each victim record's content words from its released vector; score them against ``truth``."""
        if self._aux is None or self._net is None:
            raise UsageError(f"{self.name}: call fit(aux, defense, ctx=...) before attack")
        check_disjoint(self._aux, truth)
        chosen = self._probabilities(self._features(release, truth), ctx) >= self._threshold
        guesses = [frozenset(self._vocab[j] for j in np.flatnonzero(row)) for row in chosen]
        truths = [content_tokens(r.text) for r in truth]
        metrics = content_scores(guesses, truths, self._prior, rng=ctx.rng("attack", self.name, "content"))
        if not metrics:
            raise Skip("the victim records hold no content words to recover")
        vocab = frozenset(self._vocab)
        in_vocab = sum(len(t & vocab) for t in truths)
        details = {**self._fit_details, "unit": "content word (stop words and punctuation out)", "records": len(truth),
                   "mean_guessed": float(chosen.sum(axis=1).mean()),
                   "vocabulary_coverage": in_vocab / max(1, sum(len(t) for t in truths))}
        return AttackResult(metrics["content_privacy"], metrics, details)
