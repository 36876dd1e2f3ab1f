"""Split-and-Denoise: noisy clipped token embeddings up, client-side denoising down (Mai et al., ICML 2024)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, ClassVar, Mapping, Sequence

import numpy as np

from rapt_audit.api.capabilities import CLIENT_UPLOAD, Capabilities
from rapt_audit.api.context import RunContext
from rapt_audit.api.digests import code_digest
from rapt_audit.api.files import stable_hash
from rapt_audit.api.errors import DataError, UsageError
from rapt_audit.api.params import Check, PositiveFloat, PositiveInt, Range
from rapt_audit.api.plugins import DEFENSES
from rapt_audit.api.types import Estimate, Record, Release, uid_key
from rapt_audit.data import load_dataset
from rapt_audit.defenses._representation import TaskClassifier
from rapt_audit.encoder.encode import cached_pooled, input_table, pooled_from_embeddings, token_id_lists
from rapt_audit.encoder.models import model_fingerprint
from rapt_audit.encoder.vocab import embedding_space
from rapt_audit.mechanisms.noise import check_eta
from rapt_audit.scoring.classification import classification_utility
from rapt_audit.scoring.metrics import metric
from rapt_audit.scoring.stats import bootstrap_mean
from rapt_audit.utility.probes import require_labels

metric("embedding_mse", "utility", False, "mean squared error of the output embedding to the clean one", bounded=False)
metric("embedding_cosine", "utility", True, "cosine similarity of the output embedding to the clean one",
       bounded=False)



#: The code that trains SnD's denoiser (a stored denoiser is reused only by it).
_DENOISER_CODE = code_digest(__file__, Path(__file__).with_name("_denoiser.py"))

@DEFENSES.register("snd", tags=("embeddings", "dchi", "denoise"))
@dataclass
class SndDefense(TaskClassifier):
    """Split-and-Denoise (Mai et al., ICML 2024): dχ-noised, norm-clipped token embeddings; client-side denoiser.

    Client: embeds each token (model tokenizer, no special tokens), adds dχ noise (one Gamma(d, 1/η)
    radius per vector), clips each vector's norm to ``C`` = the largest norm in the regular
    vocabulary (Eq. 3) and keeps the noise ``Z`` (updated after clipping). Server: adds
    [CLS]/[SEP], runs the frozen encoder and returns the mean-pooled output ``e_n``. Client:
    ``e_d = D(e_n, X̃, Z)`` with a small transformer ``D`` that the server trained on public text
    (``public_corpus``, WikiText-2 by default; never victim data) with synthetic noise at the same
    η, to minimise the MSE to the clean output (a closed-form linear path over the pooled inputs
    first, then the transformer; ridge penalty and epoch chosen on held-out public text).

    Release (what the adversary sees): the upload (``token_embeddings``) and the server's output
    (``sequence_embeddings``). Utility: an MLP classifier trained on denoised victim-train
    embeddings, scored on denoised victim-test embeddings (accuracy, macro-F1, AUC), the same
    without the denoiser (``*.without_denoiser``), the same on the mean of the client's own clean token
    embeddings (``*.client_only``: ``X = X̃ - Z``, which the denoiser can compute; no server involved —
    the control that says how much of the denoised utility the server's output adds), and the MSE
    and cosine similarity of ``e_d`` and ``e_n`` to the clean embedding (``embedding_mse.denoised`` /
    ``.noisy`` ...).

    Departures: the denoiser is far smaller than SnD's Table 8 (d_model 768, d_ff 1024, 8 heads,
    6 layers) because the embedding is 384-d and training runs on CPU — ``d_model`` 128, 4 heads,
    2 layers, d_ff 256 by default; it is trained on WikiText-2 (the paper mixes 20 public datasets);
    it reads at most ``max_tokens`` tokens per text; its output is residual with a linear path
    (``e_n + A·[e_n; mean x̃; mean z; 1] + W h_0``, see :class:`~rapt_audit.defenses._denoiser.Denoiser`).
    With a few thousand public sentences the transformer adds nothing measurable on top of the
    linear path (reports/snd/README.md); the amount of public text is what moves the result.

    Auditing note: clipping puts almost every uploaded vector on the sphere of radius ``C``. The
    suite's plain nearest-neighbour (``whitebox``) attack then over-states privacy (the shrunken
    vector's guesses drift to small-norm tokens) and the k-NN mutual-information estimate is not
    valid (the release has no density in R^d). The ``whitebox`` attack therefore rescales clipped
    uploads to their expected norm before searching, and ``mutual_info`` declines them.
    """

    exposes: ClassVar[frozenset[str]] = frozenset({"token_embeddings", "sequence_embeddings"})
    capabilities: ClassVar[Capabilities] = Capabilities(audit=CLIENT_UPLOAD, figure_place=5, own_service=(
        "SnD's utility is the client's: it classifies its denoised embedding with its own classifier (the paper's "
        "protocol), not the service's prompt-tuned encoder"))
    audit_description: ClassVar[str] = "the client's upload of one token: noisy embedding, then clipping"
    #: SnD's client runs only the service's (the LLM's) embedding layer and its denoiser: its uploads are rows of the
    #: service's input table and the server's output is the service's, so the defense and the attacks on it run in the
    #: service's view of the run (rapt_audit.pipeline.roles).
    input_space: ClassVar[str] = "service"
    profiles: ClassVar[Mapping[str, Mapping[str, Any]]] = {
        "smoke": {"public_size": 80, "denoiser_epochs": 2, "d_model": 32, "d_ff": 64, "layers": 1,
                  "max_tokens": 32, "hidden": 32, "epochs": 3},
        "cpu": {"public_size": 8000, "denoiser_epochs": 5},
    }

    eta: Annotated[float, Check(check_eta)] = 100.0
    clip: bool = True
    public_corpus: str = "wikitext2"
    public_size: Annotated[int, Range(20, note="a tenth is held out")] = 16000
    noise_draws: PositiveInt = 1
    d_model: PositiveInt = 128
    heads: PositiveInt = 4
    d_ff: PositiveInt = 256
    layers: PositiveInt = 2
    max_tokens: PositiveInt = 64
    denoiser_epochs: PositiveInt = 20
    denoiser_lr: PositiveFloat = 5e-4
    # hidden, dropout, lr, epochs, batch_size: the utility classifier's (see TaskClassifier).

    _train: tuple[Record, ...] = field(default=(), init=False, repr=False)
    _fit: Any = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        super().__post_init__()  # the declared checks; then the one that spans two fields
        if int(self.d_model) % int(self.heads):
            raise UsageError(f"snd: d_model ({self.d_model}) must be a multiple of heads ({self.heads})")

    # -- client and server -------------------------------------------------------------------

    def clip_bound(self, ctx: RunContext) -> float | None:
        """``C`` = the largest input-embedding norm over the regular vocabulary (None when clipping is off)."""
        if not self.clip:
            return None

        return ctx.shared(("snd_clip_bound", ctx.model), lambda: float(
            np.sqrt(np.einsum("ij,ij->i", embedding_space(ctx).vectors, embedding_space(ctx).vectors)).max()))

    def upload(self, vectors: np.ndarray, *, rng: np.random.Generator, ctx: RunContext) -> np.ndarray:
        """The client's upload of clean token embeddings ``(n, d)``: dχ noise, then clipping (what ``audit`` runs)."""
        from rapt_audit.defenses._denoiser import privatize_tokens  # lazy (torch)
        return privatize_tokens(np.asarray(vectors, dtype=np.float32), eta=self.eta, bound=self.clip_bound(ctx),
                                rng=rng)[0]

    def exchange(self, records: Sequence[Record], *, ctx: RunContext, stream: str = "release",
                 draw: int = 0) -> Any:
        """Upload, kept noise and server output for ``records`` (a :class:`~rapt_audit.defenses._denoiser.DenoiseBatch`).

        Noise is drawn per record from a generator keyed by ``stream``, the uid and ``draw`` (not by
        η: a sweep reuses the same underlying draws, scaled). Memoised per run.
        """
        from rapt_audit.defenses._denoiser import DenoiseBatch, privatize_tokens  # lazy (torch)
        records = list(records)

        def build() -> DenoiseBatch:
            table, bound = input_table(ctx), self.clip_bound(ctx)
            uploads, noises = [], []
            for r, ids in zip(records, token_id_lists(ctx, [r.text for r in records])):
                up, z = privatize_tokens(table[ids], eta=self.eta, bound=bound,
                                         rng=ctx.rng("defense", self.name, stream, draw, r.uid))
                uploads.append(up)
                noises.append(z)
            output = pooled_from_embeddings(ctx.encoder(), uploads) if records else np.zeros((0, table.shape[1]))
            return DenoiseBatch(np.asarray(output, dtype=np.float32), uploads, noises)

        key = ("snd_exchange", ctx.model, self.eta, self.clip, stream, draw, uid_key(records), len(records))
        return ctx.shared(key, build)

    def release(self, records: Sequence[Record], *, ctx: RunContext) -> Release:
        """What the server (or an eavesdropper) sees: the noisy clipped token embeddings and the output."""
        batch = self.exchange(records, ctx=ctx)
        return Release(uids=[r.uid for r in records], token_embeddings=batch.tokens,
                       sequence_embeddings=batch.output,
                       meta={"mechanism": self.name, "eta": "inf" if math.isinf(self.eta) else self.eta,
                             "clip_norm": self.clip_bound(ctx), "server_output": "mean-pooled last hidden state"})

    # -- the denoiser ------------------------------------------------------------------------

    def public_records(self, ctx: RunContext, victim: Sequence[Record]) -> list[Record]:
        """A seeded sample of ``public_size`` public sentences (>= 3 words), disjoint from the victim data."""
        dataset = load_dataset(self.public_corpus, ctx.data_dir)
        victim_uids = {r.uid for r in victim}
        pool = [r for r in dataset.records if len(r.text.split()) >= 3]
        overlap = sum(r.uid in victim_uids for r in pool)
        if overlap:
            raise DataError(f"snd: the public corpus {self.public_corpus!r} shares {overlap} records with the victim "
                            "data; the denoiser must be trained on public text only (use wikitext2)")
        if len(pool) < int(self.public_size):
            raise DataError(f"snd: public_size={self.public_size} but {self.public_corpus!r} has {len(pool)} usable "
                            "sentences")
        pick = ctx.rng("defense", self.name, "public").choice(len(pool), size=int(self.public_size), replace=False)
        return [pool[i] for i in sorted(pick)]

    def denoiser(self, ctx: RunContext, victim: Sequence[Record] = ()) -> Any:
        """The trained :class:`~rapt_audit.defenses._denoiser.DenoiserFit` for this η: once per run, and kept in
        ``$RAPT_AUDIT_CACHE/defenses`` for later runs at the same setting and seed (it sees public text only)."""
        from rapt_audit.defenses._denoiser import DenoiseBatch, stored_denoiser, subset, train_denoiser  # lazy (torch)
        architecture = {"d_model": int(self.d_model), "heads": int(self.heads), "d_ff": int(self.d_ff),
                        "layers": int(self.layers), "max_tokens": int(self.max_tokens)}

        def train(public: Sequence[Record]) -> Any:
            clean = cached_pooled(ctx, public, tag="clean")
            parts = [self.exchange(public, ctx=ctx, stream="public", draw=k) for k in range(int(self.noise_draws))]
            n_valid = max(10, len(public) // 10)
            order = ctx.rng("defense", self.name, "public-valid").permutation(len(public))
            valid_idx, train_idx = order[:n_valid], order[n_valid:]
            joined = DenoiseBatch(np.concatenate([p.output for p in parts]), [t for p in parts for t in p.tokens],
                                  [z for p in parts for z in p.noise], np.concatenate([clean] * len(parts)))
            # Every draw of a validation sentence stays in validation (no sentence on both sides).
            train_rows = np.concatenate([train_idx + k * len(public) for k in range(len(parts))])
            valid = subset(DenoiseBatch(parts[0].output, parts[0].tokens, parts[0].noise, clean), valid_idx)
            return train_denoiser(subset(joined, train_rows), valid, **architecture, epochs=int(self.denoiser_epochs),
                                  lr=float(self.denoiser_lr), batch_size=32,
                                  seed=ctx.seed_for("defense", self.name, "denoiser"), device=ctx.device)

        settings = (self.eta, self.clip, self.public_corpus, int(self.public_size), int(self.noise_draws),
                    *architecture.values(), int(self.denoiser_epochs), float(self.denoiser_lr))

        def build() -> Any:
            public = self.public_records(ctx, victim)
            signature = {"defense": self.name, "part": "denoiser", "settings": [repr(v) for v in settings],
                         "public": stable_hash([r.text for r in public]),
                         "model": model_fingerprint(ctx.model, cache_dir=ctx.cache_dir), "seed": ctx.seed,
                         "device": ctx.device, "precision": ctx.precision, "code": _DENOISER_CODE}
            fitted, _ = stored_denoiser(Path(ctx.cache_dir) / "defenses", signature, train=lambda: train(public),
                                        dim=int(input_table(ctx).shape[1]), architecture=architecture,
                                        device=ctx.device)
            return fitted

        return ctx.shared(("snd_denoiser", ctx.model, *settings), build)

    def denoised(self, records: Sequence[Record], *, ctx: RunContext) -> np.ndarray:
        """The client's denoised embeddings ``e_d`` for ``records`` (``e_n`` itself when η = inf)."""
        from rapt_audit.defenses._denoiser import denoise  # lazy (torch)
        batch = self.exchange(records, ctx=ctx)
        if math.isinf(self.eta):
            return batch.output
        return denoise(self.denoiser(ctx, self._train).model, batch, device=ctx.device)

    def client_only(self, records: Sequence[Record], *, ctx: RunContext) -> np.ndarray:
        """The mean of each text's clean token embeddings ``X = X̃ - Z`` (the client's own; never sent)."""
        batch = self.exchange(records, ctx=ctx)
        dim = batch.output.shape[1]
        return np.stack([(t - z).mean(0) if len(t) else np.zeros(dim, np.float32)
                         for t, z in zip(batch.tokens, batch.noise)]).reshape(-1, dim).astype(np.float32)

    def fit(self, train: Sequence[Record], *, ctx: RunContext) -> SndDefense:
        """Train (or reuse) the public-data denoiser; remember the victim-train records for utility."""
        self._train = tuple(train)
        self._fit = None if math.isinf(self.eta) else self.denoiser(ctx, self._train)
        return self

    # -- utility -----------------------------------------------------------------------------

    def utility(self, test: Sequence[Record], *, ctx: RunContext) -> Mapping[str, Estimate]:
        """MLP accuracy / macro-F1 / AUC (denoised, without denoiser, client-only); MSE / cosine to the clean one."""
        from rapt_audit.defenses._denoiser import cosine_rows, mse_rows  # lazy (torch)
        y_train = require_labels(self._train, split="victim_train")
        y_test = require_labels(test, split="victim_test")
        rng = ctx.rng("utility", self.name)
        views = {"": (self.denoised(self._train, ctx=ctx), self.denoised(test, ctx=ctx)),
                 ".without_denoiser": (self.exchange(self._train, ctx=ctx).output,
                                       self.exchange(test, ctx=ctx).output),
                 ".client_only": (self.client_only(self._train, ctx=ctx), self.client_only(test, ctx=ctx))}
        out: dict[str, Estimate] = {}
        for suffix, (x_train, x_test) in views.items():
            probabilities = self.fit_task_classifier(
                x_train, y_train, n_classes=int(max(y_train.max(), y_test.max())) + 1, device=ctx.device,
                precision=ctx.precision, seed=ctx.seed_for("defense", self.name, "classifier", suffix))
            out.update(classification_utility(probabilities(x_test), y_test, rng=rng, suffix=suffix))
        clean = cached_pooled(ctx, list(test), tag="clean")
        for label, (_, x_test) in zip(("denoised", "noisy"), list(views.values())[:2]):
            out[f"embedding_mse.{label}"] = bootstrap_mean(mse_rows(x_test, clean), rng=rng)
            out[f"embedding_cosine.{label}"] = bootstrap_mean(cosine_rows(x_test, clean), rng=rng)
        return out
