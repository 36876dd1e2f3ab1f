"""The random-guess attack: the leakage floor every real attack must beat."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, ClassVar, Mapping, Sequence

import numpy as np

from rapt_audit.api.context import RunContext
from rapt_audit.api.plugins import ATTACKS
from rapt_audit.api.threat import ThreatModel
from rapt_audit.api.types import RELEASE_KINDS, AttackerData, AttackResult, Record, Release, Skip
from rapt_audit.attacks._base import BaseAttack
from rapt_audit.scoring.content_tokens import ContentPrior, content_scores, content_tokens, fit_prior, words
from rapt_audit.scoring.stats import bootstrap_mean


@ATTACKS.register("random_guess", tags=("baseline",))
@dataclass
class RandomGuessAttack(BaseAttack):
    """Random guessing from the attacker's priors; ignores the release entirely.

    Each original word is guessed by sampling the attacker's unigram distribution, each private
    attribute by sampling the attacker's marginal distribution of that attribute. Success is
    word-level recovery accuracy (records are the bootstrap unit); empirical privacy is
    ``1 - token_accuracy``. Attribute accuracies are reported next to it.

    In the content-token unit of the inversion attacks (:mod:`rapt_audit.scoring.content_tokens`) its guess
    is the release-ignoring prior itself (the attacker's most common content words, as many as do best on
    its validation texts), scored like every other guess: ``content_privacy`` comes out at 1.
    """

    requires: ClassVar[frozenset[str]] = RELEASE_KINDS
    threat_model: ClassVar[ThreatModel] = ThreatModel(knows=(), auxiliary=("attacker_split",),
                                                      note="a baseline: it ignores the release")
    profiles: ClassVar[Mapping[str, Mapping[str, Any]]] = {}

    _vocab: list[str] = field(default_factory=list, init=False, repr=False)
    _vocab_p: np.ndarray | None = field(default=None, init=False, repr=False)
    _attributes: dict[str, tuple[list[str], np.ndarray]] = field(default_factory=dict, init=False, repr=False)
    _content_prior: ContentPrior | None = field(default=None, init=False, repr=False)

    def fit(self, aux: AttackerData, defense: Any, *, ctx: RunContext) -> RandomGuessAttack:
        """Estimate the unigram and attribute priors from the attacker's training data."""
        counts = Counter(w for r in aux.train for w in words(r.text))
        if not counts:
            raise Skip("the attacker's training data has no words")
        self._vocab = sorted(counts)
        freq = np.array([counts[w] for w in self._vocab], dtype=float)
        self._vocab_p = freq / freq.sum()
        self._content_prior = fit_prior(aux)
        names = sorted({k for r in aux.train for k in r.attributes})
        for attr in names:
            values = Counter(r.attributes[attr] for r in aux.train if attr in r.attributes)
            labels = sorted(values)
            p = np.array([values[v] for v in labels], dtype=float)
            self._attributes[attr] = (labels, p / p.sum())
        return self

    def attack(self, release: Release, truth: Sequence[Record], *, ctx: RunContext) -> AttackResult:
        """Guess words and attributes of ``truth`` at random; score the guesses."""
        rng = ctx.rng("attack", self.name)
        per_record_hits, per_record_words = [], []
        for record in truth:
            original = words(record.text)
            guesses = rng.choice(len(self._vocab), size=len(original), p=self._vocab_p)
            per_record_hits.append(sum(self._vocab[g] == w for g, w in zip(guesses, original)))
            per_record_words.append(len(original))
        hits, weights = np.array(per_record_hits, float), np.array(per_record_words, float)
        if weights.sum() == 0:
            raise Skip("the victim records have no words to recover")
        rate = np.divide(hits, weights, out=np.zeros_like(hits), where=weights > 0)
        token_accuracy = bootstrap_mean(rate, weights=weights, rng=rng)
        metrics = {"token_accuracy": token_accuracy}
        for attr, (labels, p) in self._attributes.items():
            scored = [r for r in truth if attr in r.attributes]
            if not scored:
                continue
            guesses = rng.choice(len(labels), size=len(scored), p=p)
            correct = np.array([labels[g] == r.attributes[attr] for g, r in zip(guesses, scored)], float)
            metrics[f"attribute_accuracy.{attr}"] = bootstrap_mean(correct, rng=rng)
        prior = self._content_prior
        metrics.update(content_scores([prior.guess()] * len(truth), [content_tokens(r.text) for r in truth], prior,
                                      rng=ctx.rng("attack", self.name, "content")))
        return AttackResult(token_accuracy.complement(), metrics,
                            {"unit": "word", "vocabulary_size": len(self._vocab), "content_prior_k": prior.k})
