"""The service's decision rule, set on the validation split: one bias per class added to its logits.

A service customized for two epochs on a few hundred privatized texts can rank its test texts well and
still place its decision boundary badly: on the demo corpus RAPT's prompt-tuned service scored AUC
0.90 with accuracy 0.58 (it predicted nearly every text as one class), and the accuracy swung from
seed to seed while the AUC did not. The threshold is part of the model, so it is set the way the
learning rate and the epoch are (:mod:`rapt_audit.utility.selection`): on the validation split carved
from the privatized training texts, never on the test split.

:func:`fit_class_bias` finds the vector ``b`` (``b[0] = 0``) that minimises the validation cross-entropy
of ``softmax(log p + b)``: bias-only logistic calibration, convex in ``b``, defined for any number of
classes, and smooth where a threshold chosen for the best validation accuracy would jump between the
few dozen validation texts. At its optimum the mean predicted probability of each class equals that
class's share of the validation labels, so the boundary sits where the labels say it should. A class
that the validation split does not hold keeps its bias at 0 (nothing there to fit it on).
"""

from __future__ import annotations

from typing import Any

import numpy as np

#: Probabilities are clipped to this floor before their logarithm (a softmax output can underflow to 0).
PROBABILITY_FLOOR = 1e-12


def biased_probabilities(probabilities: np.ndarray, bias: np.ndarray) -> np.ndarray:
    """``softmax(log p + b)`` row by row: the class probabilities under the decision rule ``bias``."""
    logits = np.log(np.clip(np.asarray(probabilities, dtype=np.float64), PROBABILITY_FLOOR, None)) + bias
    logits -= logits.max(axis=1, keepdims=True)
    weights = np.exp(logits)
    return weights / weights.sum(axis=1, keepdims=True)


def fit_class_bias(probabilities: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """The per-class bias that minimises the cross-entropy of ``softmax(log p + b)`` on ``labels``.

    Args:
        probabilities: The model's class probabilities on the validation texts, shape (n, classes).
        labels: Their true classes, integers in ``0..classes-1``.

    Returns:
        ``b`` of shape (classes,), ``b[0] = 0`` (a common shift changes nothing); zeros when fewer than two
        of the classes occur in ``labels`` (a single class gives no boundary to place).
    """
    from scipy.optimize import minimize  # lazy (scipy)

    probabilities = np.asarray(probabilities, dtype=np.float64)
    labels = np.asarray(labels, dtype=np.int64)
    classes = probabilities.shape[1]
    present = np.unique(labels)
    bias = np.zeros(classes)
    if len(present) < 2:
        return bias
    free = present[present != present[0]]  # the first class present is the reference (its bias stays 0)
    onehot = np.eye(classes)[labels]

    def loss_and_gradient(values: np.ndarray) -> tuple[float, np.ndarray]:
        b = bias.copy()
        b[free] = values
        fitted = biased_probabilities(probabilities, b)
        loss = -float(np.log(np.clip(fitted[np.arange(len(labels)), labels], PROBABILITY_FLOOR, None)).mean())
        return loss, (fitted - onehot).mean(axis=0)[free]

    found = minimize(loss_and_gradient, np.zeros(len(free)), jac=True, method="L-BFGS-B")
    bias[free] = found.x
    return bias - bias[0]


def decision_record(probabilities: np.ndarray, labels: np.ndarray, bias: np.ndarray) -> dict[str, Any]:
    """What the result file says of the decision rule: the bias and the validation accuracy before and after.

    The accuracy after is measured on the texts the bias was fitted on, so it is an optimistic figure; the
    test split alone says how well the rule generalises.
    """
    labels = np.asarray(labels, dtype=np.int64)
    before = float((np.asarray(probabilities).argmax(1) == labels).mean())
    after = float((biased_probabilities(probabilities, bias).argmax(1) == labels).mean())
    return {"rule": "class bias minimising the validation cross-entropy", "bias": [float(b) for b in bias],
            "valid_accuracy_before": before, "valid_accuracy_after": after}


__all__ = ["PROBABILITY_FLOOR", "biased_probabilities", "decision_record", "fit_class_bias"]
