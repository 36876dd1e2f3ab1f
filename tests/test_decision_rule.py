"""The service's decision rule: a class bias fitted on the validation split (rapt_audit.utility.decision)."""

from __future__ import annotations

import numpy as np
import pytest

from rapt_audit.utility.decision import biased_probabilities, decision_record, fit_class_bias


def _shifted_scores(n: int, *, shift: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Two classes ranked well (a logit that separates them) but pushed towards class 0 by ``shift``."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 2, n)
    logit = 2.0 * (labels - 0.5) + rng.normal(0, 0.8, n) - shift
    p1 = 1 / (1 + np.exp(-logit))
    return np.column_stack([1 - p1, p1]), labels


def test_a_shifted_boundary_is_moved_back_and_the_classes_shares_are_matched():
    probabilities, labels = _shifted_scores(400, shift=3.0, seed=0)
    before = (probabilities.argmax(1) == labels).mean()
    bias = fit_class_bias(probabilities, labels)
    fitted = biased_probabilities(probabilities, bias)
    after = (fitted.argmax(1) == labels).mean()
    assert before < 0.65 and after > 0.8, (before, after)
    # At the optimum of the cross-entropy in b, each class's mean probability equals its share of the labels.
    assert np.allclose(fitted.mean(axis=0), np.bincount(labels, minlength=2) / len(labels), atol=1e-4)
    assert bias[0] == 0 and bias[1] == pytest.approx(3.0, abs=0.6)  # it undoes the shift it was shown


def test_the_bias_fitted_on_validation_carries_to_other_texts_of_the_same_model():
    valid, valid_labels = _shifted_scores(100, shift=2.5, seed=1)
    test, test_labels = _shifted_scores(1000, shift=2.5, seed=2)
    bias = fit_class_bias(valid, valid_labels)
    assert (biased_probabilities(test, bias).argmax(1) == test_labels).mean() > (test.argmax(1) == test_labels).mean() + 0.2


def test_three_classes_and_a_class_the_validation_split_lacks_keeps_its_bias_at_zero():
    rng = np.random.default_rng(3)
    labels = rng.integers(0, 2, 300)  # class 2 exists in the model but not in these labels
    logits = np.eye(3)[labels] * 2.0 + rng.normal(0, 1, (300, 3)) + np.array([0.0, -2.0, 0.5])
    probabilities = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    bias = fit_class_bias(probabilities, labels)
    assert bias.shape == (3,) and bias[0] == 0 and bias[2] == 0 and bias[1] > 1.0


def test_one_class_alone_gives_no_boundary_to_place():
    probabilities, _ = _shifted_scores(50, shift=1.0, seed=4)
    assert np.array_equal(fit_class_bias(probabilities, np.ones(50, dtype=int)), np.zeros(2))


def test_the_record_says_the_rule_and_the_validation_accuracy_before_and_after():
    probabilities, labels = _shifted_scores(200, shift=3.0, seed=5)
    bias = fit_class_bias(probabilities, labels)
    record = decision_record(probabilities, labels, bias)
    assert record["bias"] == [0.0, pytest.approx(float(bias[1]))]
    assert record["valid_accuracy_before"] < record["valid_accuracy_after"]
    assert "validation" in record["rule"]

