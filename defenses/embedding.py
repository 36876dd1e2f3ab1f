"""Token-embedding privatization: the user releases noisy token embeddings."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Annotated, Any, ClassVar, Mapping, Sequence

import numpy as np

from rapt_audit.api.params import Check, CheckedParams
from rapt_audit.api.plugins import DEFENSES
from rapt_audit.api.types import Estimate, Record, Release, uid_key
from rapt_audit.encoder.encode import pooled_from_embeddings
from rapt_audit.mechanisms.calibration import ReplacementCount
from rapt_audit.mechanisms.engines import token_engine
from rapt_audit.mechanisms.noise import check_eta, dchi_noise
from rapt_audit.pipeline.context import RunContext
from rapt_audit.utility.probes import probe_utility, require_labels


@DEFENSES.register("embedding", tags=("embeddings", "dchi"))
@dataclass
class EmbeddingDefense(CheckedParams):
    """Token-embedding privatization (Qu et al., CIKM 2021 "token representation" M_rep; SnD's TokEmbPriv).

    Each token of the text (model tokenizer, no special tokens) is replaced by its input embedding
    plus fresh dχ noise, and the noisy vectors are released. The service adds [CLS]/[SEP] and runs
    the rest of the encoder; utility is a logistic-regression probe on the mean-pooled output,
    trained on privatized victim-train data. Unknown characters are sent as the noisy [UNK]
    embedding (their identity was lost by the tokenizer before any privacy).
    """

    name: ClassVar[str] = "embedding"
    exposes: ClassVar[frozenset[str]] = frozenset({"token_embeddings"})
    profiles: ClassVar[Mapping[str, Mapping[str, Any]]] = {}

    eta: Annotated[float, Check(check_eta)] = 100.0
    _train: tuple[Record, ...] = field(default=(), init=False, repr=False)
    _released: dict[int, list[np.ndarray]] = field(default_factory=dict, init=False, repr=False)

    def noisy_embeddings(self, texts: Sequence[str], *, rng: np.random.Generator, ctx: RunContext) -> list[np.ndarray]:
        """One float32 ``(n_tokens, d)`` array of noisy embeddings per text."""
        engine = token_engine(ctx)
        per_text = engine.token_ids(texts)
        flat = np.concatenate([np.asarray(ids, dtype=np.int64) for ids in per_text]) if per_text else np.zeros(0, np.int64)
        vectors = engine.space.all_vectors[flat].astype(np.float32)
        if not math.isinf(self.eta):
            vectors += dchi_noise(len(flat), vectors.shape[1], self.eta, rng, dtype=np.float32)
        return np.split(vectors, np.cumsum([len(ids) for ids in per_text])[:-1]) if per_text else []

    def replacement_count(self, texts: Sequence[str], *, eta: float, rng: np.random.Generator,
                          ctx: RunContext) -> ReplacementCount:
        """How often the nearest vocabulary token of a noisy embedding differs from the original token."""
        engine = token_engine(ctx)
        flat = np.concatenate([np.asarray(i, dtype=np.int64) for i in engine.token_ids(texts)] or [np.zeros(0, np.int64)])
        rows = engine.privatize_ids(flat, eta=eta, rng=rng)
        return ReplacementCount(perturbed=len(flat), replaced=int((engine.space.token_ids[rows] != flat).sum()))

    def _release_records(self, records: Sequence[Record], ctx: RunContext) -> list[np.ndarray]:
        key = uid_key(records)
        if key not in self._released:
            rng = ctx.rng("release", self.name, key)
            fresh = self.noisy_embeddings([r.text for r in records], rng=rng, ctx=ctx)
            self._released = {key: fresh} | dict(list(self._released.items())[-2:])
        return self._released[key]

    def fit(self, train: Sequence[Record], *, ctx: RunContext) -> EmbeddingDefense:
        """Remember the training records (privatized lazily for utility)."""
        self._train = tuple(train)
        return self

    def release(self, records: Sequence[Record], *, ctx: RunContext) -> Release:
        """Noisy token embeddings of each record."""
        vectors = self._release_records(records, ctx)
        return Release(uids=[r.uid for r in records], token_embeddings=vectors,
                       meta={"mechanism": self.name, "eta": "inf" if math.isinf(self.eta) else self.eta})

    def utility(self, test: Sequence[Record], *, ctx: RunContext) -> Mapping[str, Estimate]:
        """Probe accuracy on the encoder's pooled output of privatized train and test embeddings."""
        y_train = require_labels(self._train, split="victim_train")
        y_test = require_labels(test, split="victim_test")
        model = ctx.encoder()
        train_x = pooled_from_embeddings(model, self._release_records(self._train, ctx))
        test_x = pooled_from_embeddings(model, self._release_records(test, ctx))
        return probe_utility(train_x, y_train, test_x, y_test, rng=ctx.rng("utility", self.name))
