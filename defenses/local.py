"""Local-only baselines: what the client achieves with what it already holds, releasing nothing (Issue #38)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Literal, Mapping, Sequence

import numpy as np

from rapt_audit.api.capabilities import Capabilities
from rapt_audit.api.context import RunContext
from rapt_audit.api.errors import UsageError
from rapt_audit.api.plugins import DEFENSES
from rapt_audit.api.types import Estimate, Record, Release, pair_text
from rapt_audit.defenses._representation import HEAD_PROFILES, TaskClassifier
from rapt_audit.encoder.encode import cached_pooled, input_table, token_id_lists
from rapt_audit.scoring.classification import classification_utility
from rapt_audit.utility.probes import bow_probe_utility, require_labels

#: What a local-only baseline's release says it holds: nothing crossed the trust boundary.
NOTHING = "nothing: the text never leaves the client"


def mean_token_embeddings(ctx: RunContext, texts: Sequence[str]) -> np.ndarray:
    """``(n, d)`` float32: the mean of each text's clean input-embedding rows (model tokens, no special tokens).

    The vectors a dχ client looks up before it adds noise (SnD's ``X``, the ``embedding`` defense's input),
    averaged without noise; an empty text is the zero vector. SnD's ``client_only`` control computes the
    same vectors as ``X̃ − Z`` (equal up to float rounding; ``tests/test_local_baselines.py`` checks it).
    """
    table = input_table(ctx)
    rows = [table[ids].mean(0) if len(ids) else np.zeros(table.shape[1], np.float32)
            for ids in token_id_lists(ctx, list(texts))]
    return np.asarray(rows, dtype=np.float32).reshape(-1, table.shape[1])


#: The vectors each head-reading client computes on the device from what it already holds.
VECTORS: Mapping[str, Callable[[RunContext, Sequence[Record]], np.ndarray]] = {
    "table": lambda ctx, records: mean_token_embeddings(ctx, [r.text for r in records]),
    "encoder": lambda ctx, records: cached_pooled(ctx, list(records), tag="clean"),
}


@DEFENSES.register("local", tags=("baseline", "local"))
@dataclass
class LocalDefense(TaskClassifier):
    """Local-only baseline (Issue #38): the client classifies on its own device and sends the service nothing.

    What a client achieves with what it already holds and its own labelled training data, without any
    service: the row every defense must beat to be worth running (a defense whose utility does not
    clear it buys nothing with the privacy it gives up). ``client`` says what the client holds:

    * ``table`` — a thin client: the static input-embedding table a dχ client (``embedding``, SnD,
      T2T's nearest-neighbour step) already holds. Each text is the mean of its tokens' clean rows
      (:func:`mean_token_embeddings`, SnD's ``client_only`` control), read by the MLP head of
      :class:`~rapt_audit.defenses._representation.TaskClassifier` (SnD's and DPNR's head).
    * ``bow`` — a thin client with no model at all: the bag-of-words probe (TF-IDF + logistic
      regression, :func:`~rapt_audit.utility.probes.bow_probe_utility`) that ``identity`` scores by default,
      trained and scored on the raw texts on the client.
    * ``encoder`` — an encoder client: the frozen encoder a CAPE / DPNR / SnD client runs, its clean
      mean-pooled sentence vectors (:func:`~rapt_audit.encoder.encode.cached_pooled`, as CAPE and DPNR
      compute them before normalisation and noise) read by the same MLP head.

    Release: nothing. ``exposes`` is empty and :meth:`release` returns a release of the records' uids
    with no texts and no vectors, so the runner skips every attack ("does not apply: ... releases
    nothing") and the benchmark plans its cells on the utility dataset alone. Empirical privacy is
    perfect by construction; the row's meaning is its utility.

    Departures: no paper runs this setting; it departs from each paper's setting by removing the
    service. On a pair task (QQP) the ``table`` and ``encoder`` clients read both texts, as a siamese
    pair ``[u, v, |u − v|, u ⊙ v]`` (:meth:`features`): a client blind to the second question is no baseline
    for a pair task, and with MiniLM's frozen vectors this pair client beat the fine-tuned service on QQP
    (``reports/regime/README.md``); ``bow`` reads the pair as ``identity`` does. Every
    hyper-parameter is fixed in advance (the head's: ``hidden``, ``dropout``, ``lr``, a fixed number of
    ``epochs``; the probe's C = 1): nothing is chosen on any split, least of all the test split.

    Cost: ``bow`` a second; ``table`` a tokenisation and the head's training (seconds on CPU);
    ``encoder`` one frozen-encoder pass over the training and test texts (CAPE's and DPNR's cost
    without their training), then the head.
    """

    exposes: ClassVar[frozenset[str]] = frozenset()
    capabilities: ClassVar[Capabilities] = Capabilities(local_only=True, figure_place=13)
    profiles: ClassVar[Mapping[str, Mapping[str, Any]]] = HEAD_PROFILES

    client: Literal["table", "bow", "encoder"] = "table"
    # hidden, dropout, lr, epochs, batch_size: the head's (see TaskClassifier); bow ignores them.

    _train: tuple[Record, ...] = field(default=(), init=False, repr=False)

    def fit(self, train: Sequence[Record], *, ctx: RunContext) -> LocalDefense:
        """Remember the client's own labelled training records (the head is trained in :meth:`utility`)."""
        self._train = tuple(train)
        return self

    def release(self, records: Sequence[Record], *, ctx: RunContext) -> Release:
        """Nothing: the uids of the records, no texts, no vectors (every attack is skipped)."""
        return Release(uids=[r.uid for r in records],
                       meta={"mechanism": self.name, "client": self.client, "released": NOTHING})

    def features(self, records: Sequence[Record], *, ctx: RunContext) -> np.ndarray:
        """The vectors the head reads (:data:`VECTORS`; ``table`` or ``encoder``, not ``bow``): ``(n, d)`` for
        single texts; on a pair task ``(n, 4d)``, each text's vector u and its pair's v as ``[u, v, |u − v|,
        u ⊙ v]`` (Sentence-BERT's classification features), so the client reads both texts as the service does."""
        if self.client not in VECTORS:
            raise UsageError(f"local: client={self.client!r} has no vectors (the bag-of-words probe reads the texts)")
        first = VECTORS[self.client](ctx, records)
        if all(r.text_pair is None for r in records):
            return first
        # The second texts under uids of their own, so the pooled vectors' per-run memo never mixes them up.
        second = VECTORS[self.client](ctx, [Record(uid=f"{r.uid}#pair", text=r.text_pair or "") for r in records])
        return np.concatenate([first, second, np.abs(first - second), first * second], axis=1)

    def utility(self, test: Sequence[Record], *, ctx: RunContext) -> Mapping[str, Estimate]:
        """Accuracy and macro-F1 (and AUC for the heads) of the client's own classifier on victim-test."""
        y_train = require_labels(self._train, split="victim_train")
        y_test = require_labels(test, split="victim_test")
        rng = ctx.rng("utility", self.name)
        if self.client == "bow":
            return bow_probe_utility([pair_text(r.text, r.text_pair) for r in self._train], y_train,
                                     [pair_text(r.text, r.text_pair) for r in test], y_test, rng=rng)
        x_train = self.features(self._train, ctx=ctx)
        probabilities = self.fit_task_classifier(
            x_train, y_train, n_classes=int(max(y_train.max(), y_test.max())) + 1, device=ctx.device,
            precision=ctx.precision, seed=ctx.seed_for("defense", self.name, "classifier", self.client))
        return classification_utility(probabilities(self.features(test, ctx=ctx)), y_test, rng=rng)
