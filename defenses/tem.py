"""TEM: the truncated exponential mechanism over the vocabulary (Carvalho et al. 2021)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Annotated, ClassVar

import numpy as np

from rapt_audit.api.capabilities import WORD_MECHANISM, Capabilities
from rapt_audit.api.context import RunContext
from rapt_audit.api.params import Check, Range
from rapt_audit.api.plugins import DEFENSES
from rapt_audit.defenses._word_mechanism import WordMechanismDefense, replacement_of, sample_by_distance, word_table
from rapt_audit.mechanisms.calibration import ReplacementCount
from rapt_audit.mechanisms.noise import check_epsilon


def tem_threshold(epsilon: float, vocabulary: int, beta: float) -> float:
    """γ = (2/ε)·ln((1 − β)·|V| / β): the threshold beyond which the chance of releasing any word outside the
    γ-ball is below β when a word inside it is at distance 0 (the choice of γ in public TEM code, MLDP)."""
    return 2.0 / epsilon * math.log((1.0 - beta) * vocabulary / beta)


@DEFENSES.register("tem", tags=("text", "word"))
@dataclass
class TEMDefense(WordMechanismDefense):
    """TEM (Carvalho et al., 2021): the exponential mechanism over the vocabulary with distances truncated at γ.

    "TEM: High Utility Metric Differential Privacy on Text".

    For an input word x, the words within distance γ, L_x, score ``−d(x, y)`` plus Gumbel noise of scale
    ``2/ε``; one extra candidate ⊥ scores ``−γ + (2/ε)·ln|V \\ L_x|`` plus the same noise; the best score wins,
    and ⊥ stands for a uniformly drawn word outside L_x. This is the exponential mechanism with the distance
    truncated at γ: ``Pr[y | x] ∝ exp(−ε·min(d(x, y), γ)/2)`` over the whole vocabulary (Gumbel-max draws from
    softmax, and ⊥'s weight ``|V \\ L_x|·exp(−εγ/2)`` spread uniformly gives each outside word ``exp(−εγ/2)``).
    ``|min(d(x,y),γ) − min(d(x',y),γ)| ≤ d(x, x')``, so the release is ε·d-private, as the paper states.

    The law is sampled directly in that closed form (:func:`~defenses._word_mechanism.sample_by_distance`:
    one row of distances per distinct word, inverse CDF), which is the same distribution as the paper's
    Gumbel-and-⊥ algorithm without a per-word loop over L_x.

    Departures and public code:

    * Embeddings: MiniLM's input table (the paper: GloVe), so ε is not comparable with the paper's values.
    * ``gamma=None`` takes :func:`tem_threshold` with ``beta`` (public MLDP code's choice, β = 0.001). That
      code scores ⊥ with ``ln(|V| / |L_x|)`` instead of ``ln|V \\ L_x|`` (a different law, not the
      truncated exponential mechanism), ignores its own ``threshold`` argument, and releases words outside
      its vocabulary unchanged; here they are embedded as the mean of their sub-tokens and sampled.

    Attributes:
        epsilon: ε (> 0; ``inf``: no privacy).
        gamma: The truncation threshold γ in embedding distance (None: :func:`tem_threshold`).
        beta: β of the default γ.
    """

    epsilon: Annotated[float, Check(check_epsilon)] = 15.0
    gamma: Annotated[float | None, Range(0, low_open=True)] = None
    beta: Annotated[float, Range(0, 1, low_open=True, high_open=True)] = 0.001
    #: As SanText's (the same distances; γ truncates little at these ε): replacement 0.91 at ε = 10, 0.33 at 15,
    #: 0.10 at 20 on MiniLM (``rapt-audit calibrate --defense tem``, WikiText-2, 1,000 sentences).
    epsilon_grid: ClassVar[tuple[float, ...]] = (10.0, 12.5, 15.0, 17.5, 20.0)
    capabilities: ClassVar[Capabilities] = Capabilities(audit=WORD_MECHANISM, figure_place=10)

    def threshold(self, epsilon: float, ctx: RunContext) -> float:
        """γ in force at ``epsilon``."""
        return self.gamma if self.gamma is not None else tem_threshold(epsilon, len(word_table(ctx).words), self.beta)

    def release_words(self, words_: list[str], *, epsilon: float, rng: np.random.Generator,
                      ctx: RunContext) -> tuple[list[str], ReplacementCount]:
        """TEM's released word for each word (see the class docstring)."""
        table, gamma = word_table(ctx), self.threshold(epsilon, ctx)
        chosen = sample_by_distance(table, words_, np.arange(len(table.words)),
                                    lambda d: -0.5 * epsilon * np.minimum(d, gamma), rng.random(len(words_)))
        released = [table.words[r] for r in chosen.tolist()]
        return released, replacement_of(released, words_, perturbed=len(words_),
                                        forced=int((table.rows_of(words_) < 0).sum()))
