"""The Mahalanobis mechanism: elliptical multivariate Laplace noise, then the nearest word (Xu et al. 2020)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, ClassVar

import numpy as np

from rapt_audit.api.capabilities import WORD_MECHANISM, Capabilities
from rapt_audit.api.context import RunContext
from rapt_audit.api.params import Check, Range
from rapt_audit.api.plugins import DEFENSES
from rapt_audit.defenses._word_mechanism import WordMechanismDefense, nearest_two_of_noisy, replacement_of, word_table
from rapt_audit.mechanisms.calibration import ReplacementCount
from rapt_audit.mechanisms.noise import check_epsilon


def regularized_covariance_sqrt(vectors: np.ndarray, lam: float) -> np.ndarray:
    """Σ_p^½ for ``Σ_p = λ·Σ + (1 − λ)·I``, Σ the covariance of ``vectors`` scaled to mean eigenvalue 1 (float64).

    Scaling Σ to trace d makes λ a blend of two shapes of one size, so λ changes the noise's shape and not its
    scale (public MLDP code divides by the variance of all entries, which is nearly the same)."""
    covariance = np.cov(np.asarray(vectors, dtype=np.float64), rowvar=False)
    covariance *= covariance.shape[0] / np.trace(covariance)
    blend = lam * covariance + (1.0 - lam) * np.eye(covariance.shape[0])
    values, basis = np.linalg.eigh(blend)
    return (basis * np.sqrt(np.clip(values, 0.0, None))) @ basis.T


@DEFENSES.register("mahalanobis", tags=("text", "word", "dchi"))
@dataclass
class MahalanobisDefense(WordMechanismDefense):
    """Mahalanobis mechanism (Xu, Aggarwal, Feyisetan, Teissier, PrivateNLP 2020): elliptical noise, then the nearest word.

    "A Differentially Private Text Perturbation Method Using a Regularized Mahalanobis Metric".

    A word's vector x receives noise z = Σ_p^½·(l·v), l ~ Gamma(d, 1/ε), v uniform on the sphere: density
    ∝ ``exp(−ε‖Σ_p^{−½} z‖)``, with ``Σ_p = λΣ + (1 − λ)I`` (:func:`regularized_covariance_sqrt`, Σ the
    embedding table's covariance), and the nearest vocabulary word (Euclidean, as T2T) is released. The release
    is ε·d_M-private for the regularized Mahalanobis metric ``d_M(x, x') = ‖Σ_p^{−½}(x − x')‖``; noise
    stretched along the table's directions of large variance moves words towards neighbours in dense regions.
    λ = 0 is T2T at word level (its noise and decoding exactly).

    Departures: MiniLM's input table (the paper: GloVe and fastText), the covariance of its whole-word
    candidates; Σ is scaled to mean eigenvalue 1 (see :func:`regularized_covariance_sqrt`).

    Attributes:
        epsilon: ε of the noise (> 0; ``inf``: no privacy); T2T's η when λ = 0.
        lam: λ, the weight of the covariance in Σ_p, in [0, 1] (public MLDP code's default 0.2).
    """

    epsilon: Annotated[float, Check(check_epsilon)] = 100.0
    lam: Annotated[float, Range(0, 1)] = 0.2
    #: T2T's η scale: replacement 0.90 at ε = 50, 0.24 at 100, 0.09 at 150 on MiniLM at λ = 0.2 (word-level T2T:
    #: 0.87, 0.20, 0.09; ``rapt-audit calibrate``, WikiText-2, 1,000 sentences).
    epsilon_grid: ClassVar[tuple[float, ...]] = (50.0, 75.0, 100.0, 125.0, 150.0)
    capabilities: ClassVar[Capabilities] = Capabilities(audit=WORD_MECHANISM, figure_place=11)
    audit_description: ClassVar[str] = "the released word of one word, against the Mahalanobis distance of the pair"

    def shape(self, ctx: RunContext) -> np.ndarray | None:
        """Σ_p^½ for the run's table (None when λ = 0: the identity, applied as no transform)."""
        if self.lam == 0:
            return None
        return ctx.shared(("mahalanobis_sqrt", ctx.model, self.lam),
                          lambda: regularized_covariance_sqrt(word_table(ctx).vectors, self.lam))

    def audit_distance(self, word: str, other: str, *, ctx: RunContext) -> float:
        """The regularized Mahalanobis distance ``‖Σ_p^{−½}(x − x')‖`` of the claim (Euclidean when λ = 0)."""
        table = word_table(ctx)
        difference = table.vectors[table.row_of[word]] - table.vectors[table.row_of[other]]
        shape = self.shape(ctx)
        return float(np.linalg.norm(difference if shape is None else np.linalg.solve(shape, difference)))

    def release_words(self, words_: list[str], *, epsilon: float, rng: np.random.Generator,
                      ctx: RunContext) -> tuple[list[str], ReplacementCount]:
        """The Mahalanobis mechanism's released word for each word."""
        table = word_table(ctx)
        rows, _ = nearest_two_of_noisy(table, words_, epsilon=epsilon, rng=rng, shape=self.shape(ctx))
        released = [table.words[r] for r in rows[:, 0].tolist()]
        return released, replacement_of(released, words_, perturbed=len(words_),
                                        forced=int((table.rows_of(words_) < 0).sum()))
