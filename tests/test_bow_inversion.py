"""bow_inversion (issue #39, item 2) and the content-token unit reported by every inversion attack (item 1).

Two stand-in defenses with a known answer release one vector per record: pure noise, independent of the
text (the attack must stay at the prior: content privacy about 1), and a planted bag-of-words projection
(the sum of a fixed random vector per content word: the words are in the vector, so the attack must do
clearly better than the prior). The real encoder's clean pooled vectors are the slow check.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pytest

from rapt_audit.api.params import make_plugin
from rapt_audit.api.plugins import ATTACKS, DEFENSES, load
from rapt_audit.api.types import Release, Skip
from rapt_audit.scoring.content_tokens import content_tokens

load()

DIM = 48


@dataclass
class NoiseRelease:
    """Releases a standard normal vector per record, drawn from its uid alone: nothing about the text."""

    name: ClassVar[str] = "noise_release"
    exposes: ClassVar[frozenset[str]] = frozenset({"sequence_embeddings"})

    def release(self, records, *, ctx):
        x = np.stack([ctx.rng("noise", r.uid).standard_normal(DIM) for r in records]).astype(np.float32)
        return Release(uids=[r.uid for r in records], sequence_embeddings=x)


def word_vector(word: str) -> np.ndarray:
    return np.random.default_rng(zlib.crc32(word.encode())).standard_normal(DIM)


@dataclass
class PlantedRelease(NoiseRelease):
    """Releases the sum of a fixed random vector per content word of the text (a bag-of-words projection)."""

    name: ClassVar[str] = "planted_release"

    def release(self, records, *, ctx):
        x = np.stack([sum((word_vector(w) for w in sorted(content_tokens(r.text))), np.zeros(DIM))
                      for r in records]).astype(np.float32)
        return Release(uids=[r.uid for r in records], sequence_embeddings=x)


@pytest.fixture(scope="module")
def splits():
    from rapt_audit.data import SplitSizes, load_dataset, make_splits

    return make_splits(load_dataset("synthetic"), SplitSizes(10, 100, 240, 80), seed=2)


def bow(**params):
    return make_plugin(ATTACKS, "bow_inversion", {**ATTACKS.get("bow_inversion").profiles["smoke"], **params})


def run(defense, splits, ctx, **params):
    attack = bow(**params).fit(splits.attacker, defense, ctx=ctx)
    return attack, attack.attack(defense.release(splits.victim_test, ctx=ctx), splits.victim_test, ctx=ctx)


def test_a_release_of_pure_noise_is_at_chance(ctx, splits):
    _, result = run(NoiseRelease(), splits, ctx)
    privacy = result.metrics["content_privacy"]
    assert result.empirical_privacy is privacy
    assert privacy.ci_high == 1.0 and privacy.value >= 0.9, (privacy, result.details)


def test_a_planted_bag_of_words_is_recovered(ctx, splits):
    _, result = run(PlantedRelease(), splits, ctx)
    f1, prior = result.metrics["content_f1"], result.metrics["content_prior_f1"]
    assert f1.ci_low > prior.ci_high + 0.2, (f1, prior, result.details)
    assert result.empirical_privacy.ci_high < 0.7, result.empirical_privacy
    assert result.details["best_epoch"] > 0 and result.details["vocabulary_coverage"] > 0.9


def test_the_linear_model_recovers_a_planted_bag_of_words_too(ctx, splits):
    _, result = run(PlantedRelease(), splits, ctx, hidden=0, epochs=15)
    assert result.empirical_privacy.ci_high < 0.4, (result.empirical_privacy, result.details)


def test_trained_weights_are_read_back_with_identical_results(ctx, splits):
    first, a = run(PlantedRelease(), splits, ctx)
    again, b = run(PlantedRelease(), splits, ctx)
    assert (first._fit_details["model_from_cache"], again._fit_details["model_from_cache"]) == (False, True)
    assert a.empirical_privacy == b.empirical_privacy and first._threshold == again._threshold


def test_other_releases_victim_overlap_and_too_little_data_are_refused(ctx, splits):
    from rapt_audit.api.errors import DataError
    from rapt_audit.api.types import AttackerData

    with pytest.raises(Skip, match="sequence_embeddings"):
        bow().fit(splits.attacker, DEFENSES.get("identity")(), ctx=ctx)
    with pytest.raises(DataError, match="attacker-valid"):
        bow().fit(AttackerData(splits.attacker_train, splits.attacker_valid[:2]), NoiseRelease(), ctx=ctx)
    attack = bow().fit(splits.attacker, NoiseRelease(), ctx=ctx)
    leaked = splits.attacker_train[:5]
    with pytest.raises(AssertionError, match="also in the attacker's data"):
        attack.attack(NoiseRelease().release(leaked, ctx=ctx), leaked, ctx=ctx)


@pytest.mark.slow
def test_clean_pooled_minilm_vectors_leak_content_words(ctx, splits):
    # DPNR with no noise and no word dropout releases the encoder's clean pooled vectors (min-max scaled).
    defense = make_plugin(DEFENSES, "dpnr", {"epsilon": float("inf"), "mu": 0.0})
    _, result = run(defense, splits, ctx, **ATTACKS.get("bow_inversion").profiles["cpu"])
    assert result.metrics["content_f1"].ci_low > result.metrics["content_prior_f1"].ci_high + 0.25
    assert result.empirical_privacy.ci_high < 0.6, (result.empirical_privacy, result.details)


# ------------------------------------------------- every inversion attack reports the common unit


@pytest.mark.parametrize("name", ["whitebox", "mlp_inversion", "ae_inversion", "random_guess"])
def test_inversion_attacks_report_content_recovery_beside_their_own(ctx, splits, name):
    identity = DEFENSES.get("identity")().fit(splits.victim_train, ctx=ctx)
    attack = make_plugin(ATTACKS, name, ATTACKS.get(name).profiles.get("smoke", {}))
    small = type(splits.attacker)(splits.attacker_train[:60], splits.attacker_valid[:20])
    result = attack.fit(small, identity, ctx=ctx).attack(identity.release(splits.victim_test, ctx=ctx),
                                                        splits.victim_test, ctx=ctx)
    privacy = result.metrics["content_privacy"]
    assert {"content_f1", "content_prior_f1", "content_recall"} <= set(result.metrics)
    assert 0.0 <= privacy.ci_low <= privacy.value <= privacy.ci_high <= 1.0
    if name == "whitebox":  # the raw text: every guessed token is the original, joined back into its words
        assert result.metrics["content_f1"].value == 1.0 and privacy.value == 0.0
    if name == "random_guess":  # its guess in this unit is the prior itself, scored like any other
        assert (privacy.value, privacy.ci_low) == (1.0, 1.0)
    # ae_inversion's headline is the unit itself (issue #39, item 5); the others keep theirs beside it.
    assert (result.empirical_privacy is privacy) == (name == "ae_inversion")


def _best_threshold_by_counting(probabilities: np.ndarray, labels: np.ndarray, total_true: float) -> tuple[float, float]:
    """Every distinct probability tried as the threshold, hits counted directly: the definition, slowly."""
    best = (1.0, -1.0)
    for threshold in sorted(set(probabilities.ravel().tolist()), reverse=True):
        guessed = probabilities >= threshold
        f1 = 2 * float(labels[guessed].sum()) / (int(guessed.sum()) + total_true)
        if f1 > best[1] + 1e-12:  # ties keep the higher threshold, as the model's decision rule does
            best = (threshold, f1)
    return best


@pytest.mark.parametrize("case", range(40))
def test_the_threshold_is_the_definitions_whether_few_or_all_candidates_are_sorted(case):
    from rapt_audit.attacks.bow_inversion import best_threshold

    rng = np.random.default_rng(case)
    n, words = int(rng.integers(20, 120)), int(rng.integers(20, 90))  # often more than 2,048 candidates
    labels = (rng.random((n, words)) < rng.uniform(0.002, 0.2)).astype(np.float32)
    signal = [labels * rng.uniform(0.1, 1.0), np.zeros_like(labels)][case % 2]  # informative, or a prior alone
    noise = rng.random((n, words)) ** rng.uniform(1, 8)
    if case % 4 == 1:
        noise = np.tile(noise[0], (n, 1))  # the same guess for every record, as the untrained model's
    probabilities = np.round(np.clip(signal + noise, 0, 1), int(rng.integers(2, 6))).astype(np.float32)  # ties
    total_true = float(labels.sum() + rng.integers(0, 30))  # out-of-vocabulary words cost recall
    threshold, f1 = best_threshold(probabilities, labels, total_true)
    expected = _best_threshold_by_counting(probabilities, labels, total_true)
    assert threshold == pytest.approx(expected[0]) and f1 == pytest.approx(expected[1])


def test_a_diverged_model_gets_a_threshold_not_a_crash():
    """NaN probabilities (a network that diverged) sort as the full sort sorts them: the search still answers."""
    from rapt_audit.attacks.bow_inversion import best_threshold

    rng = np.random.default_rng(0)
    probabilities = rng.random((100, 100)).astype(np.float32)
    probabilities[rng.random((100, 100)) < 0.3] = np.nan
    labels = (rng.random((100, 100)) < 0.02).astype(np.float32)
    threshold, f1 = best_threshold(probabilities, labels, float(labels.sum()))
    assert 0.0 <= f1 <= 1.0 and (np.isnan(threshold) or 0.0 <= threshold <= 1.0)
