"""The exact dχ channel of ``bayes_inversion`` on token-embedding releases (issue #39, item 3).

The ``embedding`` defense releases, for each token o, ``z = e_o + n`` with n drawn from the dχ density
``∝ exp(−η‖n‖)`` (a Gamma(d, 1/η) radius, a uniform direction). The likelihood of a released vector given an
original token is then known in closed form, ``P(z | o) = c_{η,d}·exp(−η‖z − e_o‖)``, its normaliser the same
for every o: no channel has to be estimated from shadow releases (Kale et al., "BeamClean", 2025, decode such
releases with this likelihood, a language-model prior and beam search). A token's candidate originals are the
rows nearest to z, the rows of highest likelihood, and the rows the prior knows that are best by likelihood × prior
(:func:`pools`).

Only mechanisms whose release is exactly ``clean row + dχ noise`` qualify (:data:`DCHI_RELEASES`, recognised by
the release's ``mechanism`` fact): SnD's upload, for one, is clipped after the noise, which moves the density
of a clipped vector off this form.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from rapt_audit.api.types import Skip
from rapt_audit.attacks._bayes_model import Candidates, NgramModel
from rapt_audit.attacks._token_views import TokenView, nearest_rows

#: Mechanisms (a release's ``meta["mechanism"]``) whose token vectors are the clean input row plus dχ noise at
#: the release's ``meta["eta"]``, and nothing else.
DCHI_RELEASES = frozenset({"embedding"})

#: η used for η = ∞ (the rows released as they are): finite arithmetic, and any other row is ruled out.
_NO_NOISE_ETA = 1e9

#: Released vectors whose candidate rows are gathered at once (512 × 20 × 384 float64: 31 MB).
_BLOCK = 512


def dchi_eta(meta: Mapping[str, Any], *, attack: str) -> float:
    """The release's η where its mechanism is plain dχ noise on the token rows (:data:`DCHI_RELEASES`), else
    :class:`Skip`: the attack would need a channel it does not have."""
    mechanism = meta.get("mechanism")
    if mechanism not in DCHI_RELEASES or "eta" not in meta:
        raise Skip(f"attack {attack!r} reads token-embedding releases only where the likelihood is the plain dχ "
                   f"density (mechanisms: {', '.join(sorted(DCHI_RELEASES))}); this release's mechanism is "
                   f"{mechanism!r}")
    eta = float(meta["eta"])  # "inf" as a string in JSON-safe metadata
    return _NO_NOISE_ETA if math.isinf(eta) else eta


@dataclass(frozen=True)
class Pool:
    """The nearest rows of each released vector of one record and their exact log likelihoods (best first).

    Attributes:
        rows: ``(n, P)`` regular-vocabulary rows, nearest first.
        channel: ``(n, P)`` ``−η·‖z − e_o‖`` (the dχ log likelihood up to a constant shared by every o;
            ``-inf`` marks a repeated row).
    """

    rows: np.ndarray
    channel: np.ndarray

    def options(self, lm: NgramModel, k: int) -> list[Candidates]:
        """Per position, the ``k`` candidates best by likelihood × unigram, best first (as for text releases).

        A candidate's evidence is summed over the whole pool, not the whole vocabulary: the pool holds the
        nearest rows and the rows best by likelihood × prior, so what it leaves out is the far rows the
        prior has never seen, each of negligible likelihood × prior.
        """
        if not self.rows.size:
            return []
        uni = lm.unigram(self.rows.ravel()).reshape(self.rows.shape)
        joint = self.channel + uni
        evidence = np.logaddexp.reduce(joint, axis=1)
        order = np.argsort(-joint, axis=1, kind="stable")[:, :k]
        pick = np.take_along_axis
        return [Candidates(r, c, u, float(e)) for r, c, u, e in zip(pick(self.rows, order, 1),
                                                                     pick(self.channel, order, 1),
                                                                     pick(uni, order, 1), evidence)]


class _SeenScreen:
    """The ``take`` rows the prior has seen that are best by likelihood × unigram for each released vector, by a
    float32 screen of every seen row on the run's device (the kept rows are scored exactly, in float64, by
    :func:`pools`).

    Every released vector against every seen row is a (vectors × seen rows × d) product: at the paper profile
    (17,055 records, about 20,000 seen rows, d = 384) about 2.6 TFLOP a prior, minutes on a CPU and well under
    a second on a GPU. It runs on ``device`` as :func:`~rapt_audit.attacks._token_views.nearest_rows` does.
    """

    def __init__(self, table: np.ndarray, seen: np.ndarray, prior: np.ndarray, *, eta: float, take: int,
                 device: str) -> None:
        import torch  # lazy (torch)

        self.seen, self.eta, self.take, self.device = seen, float(eta), int(take), device
        self.vectors = torch.as_tensor(np.asarray(table[seen], dtype=np.float32), device=device)
        self.squares = (self.vectors * self.vectors).sum(dim=1)
        self.prior = torch.as_tensor(np.asarray(prior, dtype=np.float64), device=device)

    def best(self, z: np.ndarray) -> np.ndarray:
        """``(len(z), take)`` rows of the table: each vector's best seen rows (in no particular order)."""
        import torch  # lazy (torch)

        if not self.take:
            return np.zeros((len(z), 0), dtype=np.int64)
        with torch.inference_mode():
            q = torch.as_tensor(z, device=self.device)
            d2 = (q * q).sum(dim=1)[:, None] + self.squares[None, :] - 2.0 * (q @ self.vectors.T)
            score = -self.eta * torch.sqrt(torch.clamp(d2, min=0.0)).double() + self.prior[None, :]
            return self.seen[torch.topk(score, self.take, dim=1).indices.cpu().numpy()]


def pools(views: Sequence[TokenView], table: np.ndarray, *, eta: float, size: int, lm: NgramModel,
          device: str, nearest: np.ndarray | None = None) -> list[Pool]:
    """A :class:`Pool` for every released vector of ``views``: the ``size`` rows of ``table`` (the regular
    vocabulary's embeddings) nearest to it, and the ``size`` rows the prior ``lm`` has seen that are best by
    likelihood × unigram; distances of the pool in float64.

    Both parts are needed: at strong noise the original is rarely among the nearest rows (η = 50 on MiniLM:
    the noise's norm, about d / η = 7.7, dwarfs the distances between rows) while the prior still singles out
    the few words the attacker's text holds; a word the prior has never seen has the same small prior as
    every other such word, so the nearest of those are its best candidates. ``nearest`` (the nearest rows of
    every released vector, :func:`nearest_rows`) is given when several priors share one search.
    """
    flat = np.concatenate([v.released_vectors for v in views]) if views else np.zeros((0, table.shape[1]))
    size = min(int(size), len(table))
    if nearest is None:
        nearest = nearest_rows(table, flat, size, device=device) if len(flat) else np.zeros((0, size), np.int64)
    seen = np.array(sorted(r for r in lm.seen() if r >= 0), dtype=np.int64)
    take = min(size, len(seen))
    screen = _SeenScreen(table, seen, lm.unigram(seen), eta=eta, take=take, device=device)
    rows = np.empty((len(flat), size + take), dtype=np.int64)
    channel = np.empty(rows.shape, dtype=np.float64)
    for s in range(0, len(flat), _BLOCK):
        z = np.asarray(flat[s:s + _BLOCK], dtype=np.float32)
        best = screen.best(z)
        block = np.concatenate([nearest[s:s + _BLOCK], best], axis=1)
        diff = table[block].astype(np.float64) - z[:, None, :].astype(np.float64)
        loglik = -eta * np.sqrt(np.einsum("nkd,nkd->nk", diff, diff))
        ordered = np.sort(block, axis=1)  # a row in both parts counts once: its second copy is ruled out
        repeat = np.zeros(block.shape, dtype=bool)
        repeat[:, 1:] = ordered[:, 1:] == ordered[:, :-1]
        first = np.argsort(block, axis=1, kind="stable")
        dup = np.zeros(block.shape, dtype=bool)
        np.put_along_axis(dup, first, repeat, axis=1)
        rows[s:s + _BLOCK], channel[s:s + _BLOCK] = block, np.where(dup, -np.inf, loglik)
    bounds = np.cumsum([0] + [len(v.released_vectors) for v in views])
    return [Pool(rows[a:b], channel[a:b]) for a, b in zip(bounds[:-1], bounds[1:])]


__all__ = ["DCHI_RELEASES", "Pool", "dchi_eta", "pools"]
