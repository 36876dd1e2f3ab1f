"""Shared pieces of the sentence-representation defenses (CAPE, DPNR, Split-and-Denoise).

* :func:`minmax_rows` — per-example min-max normalisation to ``[0, 1]^d``;
* :func:`laplace_rows` — fresh ``Laplace(0, sensitivity/epsilon)`` noise per example *and* per
  dimension, drawn from a generator derived from each record's uid (so a record's release does not
  depend on which batch it was sent in, and a seed reproduces it exactly);
* :func:`word_dropout` — DPNR's word dropout;
* :class:`TaskClassifier` — the parameters and training of the MLP that DPNR and SnD score utility
  with (trained on released victim-train vectors for a fixed number of epochs);
* the sensitivity and attribute checks they share.

The clean pooled vectors come from :mod:`rapt_audit.encoder.encode` and the scoring from
:mod:`rapt_audit.scoring.classification`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, ClassVar, Sequence

import numpy as np

from rapt_audit.api.context import RunContext
from rapt_audit.api.errors import DataError
from rapt_audit.api.params import CheckedParams, Dropout, PositiveFloat, PositiveInt
from rapt_audit.api.types import Record
from rapt_audit.mechanisms.noise import check_privacy_parameter, privatize_laplace


def minmax_rows(x: np.ndarray) -> np.ndarray:
    """Min-max normalise each row to ``[0, 1]`` (a constant row becomes all zeros).

    Per example, not per batch: CAPE's public code normalises over the batch, which makes one
    user's release depend on the other users' texts.
    """
    x = np.asarray(x, dtype=np.float64)
    low = x.min(axis=1, keepdims=True)
    span = x.max(axis=1, keepdims=True) - low
    return np.divide(x - low, span, out=np.zeros_like(x), where=span > 0)


def laplace_rows(x: np.ndarray, uids: Sequence[str], *, epsilon: float, sensitivity: float,
                 ctx: RunContext, key: tuple) -> np.ndarray:
    """``x + Laplace(0, sensitivity/epsilon)`` with fresh noise per example and per dimension.

    Each row draws from its own generator, derived from the run seed, ``key`` and the record's uid.
    (Public CAPE code adds one noise vector shared by the whole batch, public DPNR code one scalar
    per example; neither is local DP per example.)
    """
    # epsilon and sensitivity come from a defense that checked them when it was built; the public
    # sampler privatize_laplace checks its own arguments, so nothing is checked here.
    out = np.empty(np.shape(x), dtype=np.float64)
    for i, uid in enumerate(uids):
        out[i] = privatize_laplace(np.asarray(x[i:i + 1], dtype=np.float64), epsilon, sensitivity,
                                   ctx.rng(*key, uid))[0]
    return out


def check_sensitivity(value: object) -> float:
    """Validates the sensitivity used for the Laplace scale (finite, > 0): the declared check of CAPE and DPNR."""
    return check_privacy_parameter("sensitivity", value, allow_inf=False)


def word_dropout(text: str, rate: float, rng: np.random.Generator) -> tuple[str, int, int]:
    """Drop each whitespace-separated word independently with probability ``rate``.

    Returns:
        The kept words joined by single spaces, the number of words, and the number dropped.
    """
    words = text.split()
    if rate == 0.0 or not words:
        return " ".join(words), len(words), 0
    keep = rng.random(len(words)) >= rate
    return " ".join(w for w, k in zip(words, keep) if k), len(words), int((~keep).sum())


def require_attribute(records: Sequence[Record], attribute: str, *, who: str) -> np.ndarray:
    """Mask of records that carry ``attribute``; a :class:`DataError` naming it when none does."""
    mask = np.array([r.attributes.get(attribute) not in (None, "") for r in records], dtype=bool)
    if not mask.any():
        raise DataError(
            f"{who} needs the private attribute {attribute!r} on its training records, but none of the "
            f"{len(records)} records has it. Datasets with {attribute!r}: {', '.join(datasets_with(attribute))}. "
            f"Train on one of them, or without the adversary (lam=0, as benchmarks/sst2-cpu.toml does on SST-2).")
    return mask


def datasets_with(attribute: str) -> list[str]:
    """Registered datasets whose loaders declare ``attribute`` (by their documented attribute sets)."""
    # Declared statically: listing them by loading every dataset would read every file on disk.
    known = {"gender": ["trustpilot", "trustpilot_uk", "blogs", "synthetic"],
             "age": ["trustpilot", "trustpilot_uk", "blogs", "synthetic"],
             "location": ["trustpilot_uk"]}
    return known.get(attribute, ["none of the built-in datasets"])


class LaplaceRelease:
    """The Laplace step of CAPE and DPNR, as one method that their releases and ``rapt-audit audit`` share.

    Expects the ``epsilon``, ``sensitivity`` and ``name`` of the defense it is mixed into.
    """

    epsilon: float
    sensitivity: float
    name: ClassVar[str]
    #: What ``rapt-audit audit`` says it audits of the mechanism (its report's ``audits``).
    audit_description: ClassVar[str] = "the Laplace release of a normalised vector (batches of two records)"

    def laplace_release(self, normalised: np.ndarray, uids: Sequence[str], *, ctx: RunContext) -> np.ndarray:
        """float32 ``normalised + Laplace(0, sensitivity/epsilon)``, fresh per row and dimension (:func:`laplace_rows`).

        The claim: for two rows u, u' the loss is ``epsilon/sensitivity · ‖u − u'‖₁`` (``epsilon`` per
        coordinate at the extremes of the normalised range, ``d · epsilon`` per record).
        """
        return laplace_rows(normalised, uids, epsilon=self.epsilon, sensitivity=self.sensitivity, ctx=ctx,
                            key=("release", self.name)).astype(np.float32)


#: The head's settings per profile beyond its defaults: the local encoder client's, and the same for the frozen
#: service's head (``method=head``), so that identity under that protocol and the client with the service's model
#: train one head.
HEAD_PROFILES: dict[str, dict[str, int]] = {"smoke": {"hidden": 32, "epochs": 3}}


@dataclass
class TaskClassifier(CheckedParams):
    """Parameters of the utility classifier of DPNR and SnD, and its training (a base, not a plugin).

    The classifier is an MLP (``hidden`` units, ``dropout``) trained with Adam (``lr``, batches of
    ``batch_size``) for a **fixed** number of ``epochs`` on standardised released victim-train
    vectors: no epoch is chosen on any split, so the utility protocol cannot peek at the test split.
    """

    #: Listed after the defense's own parameters (see :func:`rapt_audit.api.params.parameter_fields`).
    parameter_group: ClassVar[str] = "task classifier"

    hidden: PositiveInt = 256
    dropout: Dropout = 0.4
    lr: PositiveFloat = 1e-3
    epochs: PositiveInt = 30
    batch_size: PositiveInt = 64

    def fit_task_classifier(self, x: np.ndarray, y: np.ndarray, *, n_classes: int, seed: int,
                            device: str, precision: str) -> Callable[[np.ndarray], np.ndarray]:
        """Train on ``x`` standardised with its own statistics; return class probabilities for raw rows.

        ``precision`` is the run's (``ctx.precision``), for training and prediction alike.
        """
        from rapt_audit.defenses._adversarial import fit_classifier  # lazy (torch)

        mean, std = x.mean(axis=0), x.std(axis=0) + 1e-6
        model = fit_classifier((x - mean) / std, y, n_classes=n_classes, hidden=int(self.hidden),
                               dropout=float(self.dropout), epochs=int(self.epochs), lr=float(self.lr),
                               batch_size=int(self.batch_size), seed=seed, device=device, precision=precision)
        return lambda rows: model.predict_proba((rows - mean) / std)
