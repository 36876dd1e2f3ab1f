"""Attribute privacy is chance-normalised (issue #28, item 4): the majority guess, or worse, reads 1.

No model is trained: the attribute attack gets a fixed "model" that returns the predictions a test
chooses, so each test runs in milliseconds and checks the numbers by hand.
"""

from __future__ import annotations

import numpy as np
import pytest

from rapt_audit.api.types import AttackerData, Record, Release
from rapt_audit.attacks.attribute import AgeInferenceAttack, AttributeInferenceAttack, GenderInferenceAttack
from rapt_audit.pipeline.contracts import check_attack_result
from rapt_audit.pipeline.context import RunContext
from rapt_audit.reporting.summary import _combine
from rapt_audit.scoring.classification import chance_scores
from rapt_audit.scoring.metrics import headline_metric
from rapt_audit.scoring.stats import DEFAULT_RESAMPLES

AGE_BINS = ("18-24", "25-34", "35-44", "45-54", "55-64", "65+")


class _Fixed:
    """Stands in for the attack's MLP: logits whose arg-max is the chosen class code of each record."""

    def __init__(self, codes: list[int], n_classes: int) -> None:
        self.codes, self.n_classes = codes, n_classes

    def __call__(self, x):
        import torch

        return torch.nn.functional.one_hot(torch.as_tensor(self.codes), self.n_classes).float()


def _attack(cls: type[AttributeInferenceAttack], train: list[str], victims: list[str], predicted: list[str],
            tmp_path):
    """Run ``cls.attack`` with an attacker trained on ``train`` values that predicts ``predicted``."""
    attack = cls()
    attr = attack.attribute
    aux = AttackerData(tuple(Record(f"a/{i}", "x", attributes={attr: v}) for i, v in enumerate(train)), ())
    classes = sorted(set(train))
    attack._aux, attack._classes, attack._scaler = aux, classes, (np.zeros(1), np.ones(1))
    attack._model = _Fixed([classes.index(p) for p in predicted], len(classes))
    truth = tuple(Record(f"v/{i}", "x", attributes={attr: v}) for i, v in enumerate(victims))
    release = Release(tuple(r.uid for r in truth), sequence_embeddings=np.zeros((len(truth), 1), np.float32))
    ctx = RunContext(seed=0, profile="smoke", device="cpu", cache_dir=tmp_path, data_dir=str(tmp_path))
    return check_attack_result(cls.name, attack.attack(release, truth, ctx=ctx))


def _gender(n_victims: int = 100) -> tuple[list[str], list[str]]:
    """Attacker train 70 % F (majority F), victims 60 % F: the majority guess is right 60 % of the time."""
    return ["F"] * 70 + ["M"] * 30, ["F"] * (n_victims * 6 // 10) + ["M"] * (n_victims - n_victims * 6 // 10)


def _age() -> tuple[list[str], list[str]]:
    """Six bins; attacker majority 25-34, which is 20 of the 120 victims (a majority guess right 1/6 of the time)."""
    train = [b for b in AGE_BINS for _ in range(10)] + ["25-34"] * 5
    return train, [b for b in AGE_BINS for _ in range(20)]


@pytest.mark.parametrize("cls, data", [(GenderInferenceAttack, _gender), (AgeInferenceAttack, _age)])
def test_an_attacker_at_the_majority_guess_leaks_nothing_for_two_classes_and_for_six(cls, data, tmp_path):
    train, victims = data()
    majority = max(sorted(set(train)), key=train.count)
    result = _attack(cls, train, victims, [majority] * len(victims), tmp_path)
    attr = cls.attribute
    base = victims.count(majority) / len(victims)
    assert result.metrics[f"majority_baseline.{attr}"].value == pytest.approx(base)
    # Chance is 1 for every attribute (RAPT's 1 − accuracy says 0.4 for gender, 0.833 for age).
    headline = result.empirical_privacy
    assert (headline.value, headline.ci_low, headline.ci_high) == (1.0, 1.0, 1.0)
    assert headline_metric(result.metrics, headline) == f"attribute_privacy.{attr}"
    assert result.metrics[f"paper_privacy.{attr}"].value == pytest.approx(1 - base)
    advantage = result.metrics[f"attribute_advantage.{attr}"]
    assert (advantage.value, advantage.ci_low, advantage.ci_high) == (0.0, 0.0, 0.0)


def test_a_below_chance_attacker_reads_as_no_leak_not_as_more_privacy_than_chance(tmp_path):
    train, victims = _gender()
    # 10 % right (6 of the 60 F, none of the 40 M) against the majority guess's 60 %.
    predicted = ["F"] * 10 + ["M"] * 50 + ["F"] * 40
    result = _attack(GenderInferenceAttack, train, victims, predicted, tmp_path)
    assert result.metrics["paper_privacy.gender"].value == pytest.approx(0.9)  # > 1 − 0.6: "better than chance"
    assert result.empirical_privacy.value == 1.0 and result.empirical_privacy.ci_high == 1.0
    assert result.empirical_privacy.ci_low == 1.0  # no resample brings 10 % above the guess's 60 %
    assert result.metrics["attribute_advantage.gender"].value == pytest.approx(-0.5)
    assert result.empirical_privacy.per_record is None  # a clipped value is not the ratio of its parts


def test_a_perfect_attacker_has_no_privacy_and_a_partial_one_the_normalised_share(tmp_path):
    train, victims = _gender()
    perfect = _attack(GenderInferenceAttack, train, victims, victims, tmp_path)
    assert perfect.empirical_privacy.value == 0.0 and perfect.metrics["attribute_advantage.gender"].value == 0.4
    # Right on all 60 F and 10 of the 40 M: accuracy 0.7 against 0.6, privacy 1 − 0.1 / 0.4 = 30 errors / 40.
    partial = _attack(GenderInferenceAttack, train, victims, ["F"] * 60 + ["M"] * 10 + ["F"] * 30, tmp_path)
    privacy = partial.empirical_privacy
    assert privacy.value == pytest.approx(0.75) and privacy.ci_low < 0.75 < privacy.ci_high <= 1.0
    # Not clipped: it keeps its per-record parts (errors over the guess's errors) for the paired gate.
    assert privacy.per_record is not None and privacy.per_record.value == pytest.approx(0.75)
    assert partial.metrics["paper_privacy.gender"].value == pytest.approx(0.3)


def test_advantage_and_privacy_intervals_are_paired_and_computed_per_resample():
    """The estimates against a hand computation that resamples the same records for both accuracies."""
    truth = np.array([0] * 12 + [1] * 8)
    guessed = np.zeros(20, dtype=int)
    predicted = guessed.copy()
    predicted[[0, 1, 12, 13, 14]] = 1  # 2 errors the guess does not make, 3 it makes fixed, 15 as the guess
    advantage, privacy = chance_scores(predicted, guessed, truth, rng=np.random.default_rng(5))

    rng = np.random.default_rng(5)  # the same draws, in the same order: advantage, then privacy
    hit, guess_hit = (predicted == truth).astype(float), (guessed == truth).astype(float)
    idx = rng.integers(0, 20, size=(DEFAULT_RESAMPLES, 20))
    paired = (hit[idx] - guess_hit[idx]).mean(axis=1)  # one resample of records serves both accuracies
    assert advantage.value == pytest.approx(hit.mean() - guess_hit.mean()) == pytest.approx(0.05)
    assert (advantage.ci_low, advantage.ci_high) == pytest.approx(tuple(np.quantile(paired, [0.025, 0.975])))
    draws = []
    for _ in range(DEFAULT_RESAMPLES):
        i = rng.integers(0, 20, size=20)
        room = (1 - guess_hit[i]).sum()
        draws.append(1.0 if room == 0 else min(1.0, (1 - hit[i]).sum() / room))
    assert privacy.value == pytest.approx(7 / 8)  # 7 errors where the guess makes 8
    assert (privacy.ci_low, privacy.ci_high) == pytest.approx(tuple(np.quantile(draws, [0.025, 0.975])))
    assert privacy.ci_high == 1.0  # resamples past chance are clipped, draw by draw

    # Paired, an attacker never worse than the guess on any record never resamples below 0; two
    # independent intervals would straddle 0 by about ±0.3 here.
    better = guessed.copy()
    better[12] = 1
    gain, _ = chance_scores(better, guessed, truth, rng=np.random.default_rng(0))
    assert gain.value == pytest.approx(0.05) and 0.0 == gain.ci_low < gain.ci_high < 0.25


def test_seeds_of_a_per_attribute_privacy_combine_inside_0_1():
    from rapt_audit.api.types import Estimate

    seeds = [Estimate(v, v - 0.01, v) for v in (1.0, 0.97, 1.0)]
    combined = _combine(seeds, "attribute_privacy.age")
    assert combined.ci_high == 1.0 and combined.value == pytest.approx(0.99)
