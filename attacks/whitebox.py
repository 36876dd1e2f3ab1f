"""White-box nearest-neighbour token inversion (Qu et al., CIKM 2021 §5.4; RAPT v3 §IV-A1)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Annotated, Any, ClassVar, Mapping, Sequence

import numpy as np

from rapt_audit.api.context import RunContext
from rapt_audit.api.errors import UsageError
from rapt_audit.api.params import CheckedParams, Range
from rapt_audit.api.plugins import ATTACKS
from rapt_audit.api.threat import ThreatModel
from rapt_audit.api.types import AttackerData, AttackResult, Record, Release
from rapt_audit.attacks._base import check_disjoint
from rapt_audit.attacks._token_views import (
    accuracy,
    aligned_fraction,
    content_metrics,
    content_prior,
    nearest_rows,
    release_kind,
    shared_nearest_rows,
    stack_released,
    units_of,
    views_for,
)
from rapt_audit.encoder.vocab import embedding_space
from rapt_audit.mechanisms.engines import vocabulary_index
from rapt_audit.scoring.content_tokens import ContentPrior
from rapt_audit.scoring.metrics import METRICS, metric


def topk_metric(k: int) -> str:
    """Name of the top-``k`` token accuracy metric, declared on first use (``token_accuracy_top5`` always is)."""
    name = f"token_accuracy_top{k}"
    if name not in METRICS:
        metric(name, "attack", False, f"fraction of original tokens among the attacker's {k} best guesses "
                                      f"(top-{k} token recovery)")
    return name


@ATTACKS.register("whitebox", tags=("inversion",))
@dataclass
class WhiteboxAttack(CheckedParams):
    """Nearest-neighbour token inversion (Qu et al., CIKM 2021 §5.4; RAPT v3 §IV-A1, white-box).

    The adversary holds the public embedding table and maps each released token representation to
    the closest regular vocabulary embedding, ``argmin_k ‖E(w_k) − v_t‖₂`` (exact search):

    * ``token_embeddings`` — positions are 1:1 with the original tokens; the top-1 guess and the
      ``topk`` best guesses come from the nearest-neighbour index over the regular vocabulary;
    * ``texts`` — the released tokens *are* vocabulary entries, so the nearest neighbour of a
      released token is the token itself: the guess for an original token is its aligned released
      token (model tokenizer, :func:`rapt_audit.mechanisms.align.align`). A single released token carries no
      ranking, so top-k is not defined there and is not reported.

    Success is token accuracy over regular original tokens (unaligned originals count as misses);
    empirical privacy = 1 − top-1 accuracy (RAPT reports top-1). ``token_accuracy_top<k>`` (k =
    ``topk``, 5 by default) is the standard ranked variant: how often the original token is among
    the attacker's k nearest vocabulary entries. The vocabulary, its embeddings and the search come
    from the public model (the encoder layer), never from the defense. The attack has no parameters
    to learn; ``fit`` records the attacker's data so that disjointness from the victim can be
    asserted, and fits the release-ignoring prior of the content-token unit on it: the top-1 guesses,
    joined into words, are also reported as ``content_f1`` and ``content_privacy``
    (:mod:`rapt_audit.scoring.content_tokens`).
    """

    requires: ClassVar[frozenset[str]] = frozenset({"texts", "token_embeddings"})
    threat_model: ClassVar[ThreatModel] = ThreatModel(knows=("release", "public_model"))
    profiles: ClassVar[Mapping[str, Mapping[str, Any]]] = {"smoke": {}, "cpu": {}}

    topk: Annotated[int, Range(2, note="top-1 is token_accuracy")] = 5
    _aux: AttackerData | None = field(default=None, init=False, repr=False)
    _content_prior: ContentPrior | None = field(default=None, init=False, repr=False)

    def fit(self, aux: AttackerData, defense: Any, *, ctx: RunContext) -> WhiteboxAttack:
        """Nothing to learn (the table is public); remember ``aux`` for the disjointness check and fit the
        content-token prior on it, for the kind of release the defense makes."""
        kind = release_kind(frozenset(getattr(defense, "exposes", frozenset())), attack=self.name)
        self._aux, self._content_prior = aux, content_prior(aux, kind)
        return self

    def attack(self, release: Release, truth: Sequence[Record], *, ctx: RunContext) -> AttackResult:
        """Invert every released token by nearest-neighbour search and score against ``truth``."""
        if self._aux is None:
            raise UsageError("whitebox: call fit(aux, defense, ctx=...) before attack (it checks that the "
                             "victim's records are disjoint from the attacker's)")
        check_disjoint(self._aux, truth)
        kind, views = views_for(release, truth, ctx=ctx, attack=self.name)
        units = units_of(views)
        rng = ctx.rng("attack", self.name)
        metrics = {}
        details: dict[str, Any] = {"unit": "model tokenizer token (regular vocabulary only)", "release_kind": kind,
                                   "tokens_scored": int(units.source.size), "records": len(views),
                                   "aligned_fraction": aligned_fraction(units),
                                   "irregular_tokens_skipped": int(sum((~v.regular).sum() for v in views))}
        if kind == "texts":
            released_ids = np.concatenate([v.released_ids for v in views])
            space = embedding_space(ctx)
            guess_rows = np.full(units.source.size, -1, dtype=np.int64)
            ok = units.aligned
            guess_rows[ok] = space.rows_of(released_ids[units.source[ok]])
            hits = ok & (guess_rows == units.target_row)
            details[f"top{self.topk}"] = "not defined for text releases (one released token per position, no ranking)"
        else:
            table = embedding_space(ctx).vectors
            if self.topk > len(table):
                raise UsageError(f"whitebox.topk={self.topk} exceeds the {len(table)} regular vocabulary tokens")
            vectors = stack_released(views)[units.source]  # vector releases are 1:1: every unit aligned
            vectors, rescaled = undo_norm_clipping(vectors, release.meta, table)
            if rescaled:
                details["clipped_vectors_rescaled"] = rescaled
            # Top-1: the certified exact search the T2T mechanism itself decodes with (the same
            # table and index), so whitebox recovery and the defense's replacement count measure the
            # same event.
            guess_rows = vocabulary_index(ctx).search(vectors)
            hits = guess_rows == units.target_row
            topk = hits.copy()  # a top-1 hit is a top-k hit; only the misses need the top-k search
            if (~hits).any():
                # Unclipped vectors are the release itself: their search is the one bayes_inversion makes too.
                rows = (nearest_rows(table, vectors[~hits], self.topk, device=ctx.device) if rescaled else
                        shared_nearest_rows(ctx, table, stack_released(views), self.topk)[units.source][~hits])
                topk[~hits] = (rows == units.target_row[~hits, None]).any(axis=1)
            metrics[topk_metric(self.topk)] = accuracy(topk, units, len(views), rng=rng)
        top1 = accuracy(hits, units, len(views), rng=rng)
        metrics = {"token_accuracy": top1, **metrics,
                   **content_metrics(guess_rows, units, truth, kind=kind, prior=self._content_prior,
                                     attack=self.name, ctx=ctx)}
        return AttackResult(top1.complement(), metrics, details)


def undo_norm_clipping(vectors: np.ndarray, meta: Mapping[str, Any], vocabulary: np.ndarray) -> tuple[np.ndarray, int]:
    """Rescale released vectors that a defense clipped to norm C back to the norm they would have had.

    Split-and-Denoise clips each noisy token vector to C, the largest vocabulary norm; at small η
    nearly every vector ends on that sphere. Searching with the clipped vector shrinks its distance
    term and pulls every guess towards small-norm tokens, so a naive nearest-neighbour attack would
    under-state the leak. The adversary knows the mechanism (C and η are public), so it rescales each
    clipped vector to the expected unclipped norm sqrt(median‖E‖² + E‖z‖²), with E‖z‖² = d(d+1)/η²
    for the Gamma(d, 1/η) radius (post-processing: it uses no private data). Releases without
    ``meta["clip_norm"]`` are returned unchanged.

    Returns:
        The vectors to search with and how many of them were rescaled.
    """
    clip, eta = meta.get("clip_norm"), meta.get("eta")
    if clip is None or eta in (None, "inf") or not math.isfinite(float(eta)):
        return vectors, 0
    norms = np.linalg.norm(vectors, axis=1)
    clipped = norms >= float(clip) * (1 - 1e-4)
    if not clipped.any():
        return vectors, 0
    d = vectors.shape[1]
    target = math.sqrt(float(np.median(np.einsum("ij,ij->i", vocabulary, vocabulary))) + d * (d + 1) / float(eta) ** 2)
    out = vectors.copy()
    out[clipped] *= (target / norms[clipped])[:, None]
    return out, int(clipped.sum())
