"""The Vickrey mechanism: dχ noise, then the first or second nearest word (Xu, Aggarwal, Feyisetan, Teissier 2021)."""

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


def first_probability(distances: np.ndarray, t: float) -> np.ndarray:
    """``p = (1 − t)·d₂ / (t·d₁ + (1 − t)·d₂)``: the chance of releasing the nearest word, from the noisy vector's
    distances ``(n, 2)`` to its nearest and second-nearest words (t = 0: always the nearest, T2T; t = 1: always
    the second; t = ½: ``d₂/(d₁ + d₂)``)."""
    d1, d2 = distances[:, 0].astype(np.float64), distances[:, 1].astype(np.float64)
    denominator = t * d1 + (1.0 - t) * d2
    return np.where(denominator > 0, (1.0 - t) * d2 / np.where(denominator > 0, denominator, 1.0), 1.0)


@DEFENSES.register("vickrey", tags=("text", "word", "dchi"))
@dataclass
class VickreyDefense(WordMechanismDefense):
    """Vickrey mechanism (Xu, Aggarwal, Feyisetan, Teissier, arXiv 2104.11838): dχ noise, then the 1st or 2nd nearest word.

    "On a Utilitarian Approach to Privacy Preserving Text Generation".

    A word's vector receives multivariate Laplace noise of density ∝ ``exp(−ε‖z‖)`` (T2T's, Feyisetan et al.
    2020) and the released word is the nearest vocabulary word with probability
    :func:`first_probability` ``p = (1 − t)·d₂ / (t·d₁ + (1 − t)·d₂)``, else the second nearest (the paper's
    selection rule, as we read it; d₁ ≤ d₂ the noisy vector's distances to the two). The choice reads only the
    noisy vector, so it is post-processing and the release keeps T2T's ε·d-privacy; t trades utility for the
    empirical privacy lost when the nearest word is the input itself.

    Departures and public code:

    * Embeddings: MiniLM's input table (the paper: GloVe and fastText); ``epsilon`` here is T2T's η.
    * Public MLDP code drops the *input word* from the two candidates when it is the nearest, and weighs the
      two by ``softmax(−t·d)`` with a vector t: the choice then depends on the input, not only on the noisy
      vector, so the post-processing argument (and the guarantee) no longer applies; it also releases words
      outside its vocabulary unchanged. Here every word is privatized and the rule above is used.

    Attributes:
        epsilon: ε of the multivariate Laplace noise (> 0; ``inf``: no privacy).
        t: The tuning parameter in [0, 1].
    """

    epsilon: Annotated[float, Check(check_epsilon)] = 100.0
    t: Annotated[float, Range(0, 1)] = 0.5
    #: T2T's η scale. Measured at t = 0.5 on MiniLM (WikiText-2): replacement 0.91 at ε = 50, 0.57 at 100, 0.49
    #: at 300. In 384 dimensions the noise's norm d/ε dwarfs the gap between the two nearest words, so d₁ ≈ d₂
    #: and p ≈ 1 − t: the replacement does not fall below about t whatever ε; lower t reaches lower replacement.
    epsilon_grid: ClassVar[tuple[float, ...]] = (50.0, 75.0, 100.0, 150.0, 300.0)
    capabilities: ClassVar[Capabilities] = Capabilities(audit=WORD_MECHANISM, figure_place=12)
    audit_description: ClassVar[str] = "the released word of one word (noise, then the first or second nearest)"

    def release_words(self, words_: list[str], *, epsilon: float, rng: np.random.Generator,
                      ctx: RunContext) -> tuple[list[str], ReplacementCount]:
        """The Vickrey mechanism's released word for each word."""
        table = word_table(ctx)
        rows, distances = nearest_two_of_noisy(table, words_, epsilon=epsilon, rng=rng)
        second = rng.random(len(words_)) >= first_probability(distances, self.t)
        released = [table.words[r] for r in rows[np.arange(len(words_)), second.astype(np.int64)].tolist()]
        return released, replacement_of(released, words_, perturbed=len(words_),
                                        forced=int((table.rows_of(words_) < 0).sum()))
