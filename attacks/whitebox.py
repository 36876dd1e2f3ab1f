"""White-box nearest-neighbour token inversion (Qu et al., CIKM 2021 §5.4; RAPT v3 §IV-A1)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, ClassVar, Mapping, Sequence

import numpy as np

from rapt_audit.api.errors import UsageError
from rapt_audit.api.plugins import ATTACKS
from rapt_audit.api.types import AttackerData, AttackResult, Record, Release
from rapt_audit.attacks._base import check_disjoint
from rapt_audit.attacks._token_views import (
    accuracy,
    aligned_fraction,
    engine,
    nearest_rows,
    stack_released,
    units_of,
    views_for,
)
from rapt_audit.pipeline.context import RunContext


@ATTACKS.register("whitebox", tags=("inversion",))
@dataclass
class WhiteboxAttack:
    """Nearest-neighbour token inversion (Qu et al., CIKM 2021 §5.4; RAPT v3 §IV-A1, white-box).

    The adversary holds the public embedding table and maps each released token representation to
    the closest regular vocabulary embedding, ``argmin_k ‖E(w_k) − v_t‖₂`` (exact search):

    * ``token_embeddings`` — positions are 1:1 with the original tokens; top-1 and top-5 guesses
      come from the nearest-neighbour index over the regular vocabulary;
    * ``texts`` — the released tokens *are* vocabulary entries, so the nearest neighbour of a
      released token is the token itself: the guess for an original token is its aligned released
      token (model tokenizer, :func:`rapt_audit.attacks._align.align`). A single released token carries no
      ranking, so top-5 is not defined there and is not reported.

    Success is token accuracy over regular original tokens (unaligned originals count as misses);
    empirical privacy = 1 − top-1 accuracy. The attack has no parameters to learn; ``fit`` only
    records the attacker's data so that disjointness from the victim can be asserted.
    """

    name: ClassVar[str] = "whitebox"
    requires: ClassVar[frozenset[str]] = frozenset({"texts", "token_embeddings"})
    profiles: ClassVar[Mapping[str, Mapping[str, Any]]] = {"smoke": {}, "cpu": {}}

    _aux: AttackerData | None = field(default=None, init=False, repr=False)

    def fit(self, aux: AttackerData, defense: Any, *, ctx: RunContext) -> WhiteboxAttack:
        """Nothing to learn (the table is public); remember ``aux`` for the disjointness check."""
        self._aux = aux
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
            space = engine(ctx).space
            guess_rows = np.full(units.source.size, -1, dtype=np.int64)
            ok = units.aligned
            guess_rows[ok] = space.rows_of(released_ids[units.source[ok]])
            hits = ok & (guess_rows == units.target_row)
            details["top5"] = "not defined for text releases (one released token per position, no ranking)"
        else:
            vectors = stack_released(views)[units.source]  # vector releases are 1:1: every unit aligned
            vectors, rescaled = undo_norm_clipping(vectors, release.meta, engine(ctx).space.vectors)
            if rescaled:
                details["clipped_vectors_rescaled"] = rescaled
            # Top-1: the certified exact search the T2T mechanism itself decodes with, so whitebox
            # recovery and the defense's replacement count measure the same event.
            eng = engine(ctx)
            hits = eng.index.search(vectors) == units.target_row
            top5 = hits.copy()  # a top-1 hit is a top-5 hit; only the misses need the top-5 search
            if (~hits).any():
                rows = nearest_rows(eng.space.vectors, vectors[~hits], 5, device=ctx.device)
                top5[~hits] = (rows == units.target_row[~hits, None]).any(axis=1)
            metrics["token_accuracy_top5"] = accuracy(top5, units, len(views), rng=rng)
        top1 = accuracy(hits, units, len(views), rng=rng)
        metrics = {"token_accuracy": top1, **metrics}
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
