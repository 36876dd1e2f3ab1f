"""Shared pieces of the sentence-representation defenses (CAPE, DPNR, Split-and-Denoise).

* :func:`token_id_lists` / :func:`encode_pooled` — the frozen encoder's mean-pooled output of a
  text, computed from its token embeddings exactly as the service would (cached per run);
* :func:`minmax_rows` — per-example min-max normalisation to ``[0, 1]^d``;
* :func:`laplace_rows` — fresh ``Laplace(0, sensitivity/epsilon)`` noise per example *and* per
  dimension, drawn from a generator derived from each record's uid (so a record's release does not
  depend on which batch it was sent in, and a seed reproduces it exactly);
* :func:`word_dropout` — DPNR's word dropout;
* :func:`classification_utility` — accuracy, macro-F1 and AUC with bootstrap intervals.

numpy only at import time; torch is imported inside the functions that need it.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Sequence

import numpy as np

from rapt_audit.errors import DataError, PrivacyParameterError
from rapt_audit.metrics import metric
from rapt_audit.noise import check_epsilon, check_privacy_parameter, privatize_laplace
from rapt_audit.types import Estimate, Record

if TYPE_CHECKING:  # pragma: no cover
    from rapt_audit.context import RunContext

metric("auc", "utility", True, "area under the ROC curve of the task classifier (macro one-vs-rest if >2 classes)")


def check_rate(name: str, value: object) -> float:
    """Validates a rate in ``[0, 1)`` (DPNR's word-dropout rate μ).

    Raises:
        TypeError: If ``value`` is not a real number (``bool`` included).
        PrivacyParameterError: If it lies outside ``[0, 1)``: μ = 1 would drop every word.
    """
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name} must be a real number in [0, 1), but is {value!r}.")
    rate = float(value)
    if not (0.0 <= rate < 1.0):  # also rejects NaN
        raise PrivacyParameterError(f"{name} must lie in [0, 1) (the fraction of words dropped), but is {rate!r}.")
    return rate


def check_nonnegative(name: str, value: object) -> float:
    """Validates a finite weight ``>= 0`` (CAPE's adversarial weight λ)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name} must be a real number >= 0, but is {value!r}.")
    weight = float(value)
    if not (math.isfinite(weight) and weight >= 0.0):
        raise PrivacyParameterError(f"{name} must be finite and >= 0, but is {weight!r}.")
    return weight


def token_id_lists(ctx: RunContext, texts: Sequence[str]) -> list[np.ndarray]:
    """Model token ids of each text (no special tokens), int64."""
    if not texts:
        return []
    tokenizer = ctx.encoder().tokenizer
    return [np.asarray(ids, dtype=np.int64)
            for ids in tokenizer(list(texts), add_special_tokens=False, verbose=False)["input_ids"]]


def input_table(ctx: RunContext) -> np.ndarray:
    """The encoder's full input-embedding matrix as float32 numpy (shared per run)."""
    return ctx.shared(("input_embedding_table", ctx.model),
                      lambda: ctx.encoder().model.get_input_embeddings().weight.detach().float().cpu().numpy())


def encode_pooled(ctx: RunContext, texts: Sequence[str]) -> np.ndarray:
    """Mean-pooled last hidden states of the frozen encoder, ``(n, d)`` float32.

    Runs the encoder on the texts' clean input embeddings (with [CLS]/[SEP], up to 128 positions),
    the same path the embedding defenses use for their noisy inputs, so clean and noisy outputs are
    directly comparable.
    """
    from rapt_audit.encode import pooled_from_embeddings

    model = ctx.encoder()
    if not texts:
        return np.zeros((0, model.model.config.hidden_size), dtype=np.float32)
    table = input_table(ctx)
    return pooled_from_embeddings(model, [table[ids] for ids in token_id_lists(ctx, texts)])


def cached_pooled(ctx: RunContext, records: Sequence[Record], *, tag: str,
                  texts: Sequence[str] | None = None) -> np.ndarray:
    """:func:`encode_pooled` of ``texts`` (default: the records' texts), memoised per run under ``tag``.

    The frozen encoder's output does not depend on ε, so a sweep over ε encodes each record once.
    """
    from rapt_audit.text_defense import uid_key

    texts = [r.text for r in records] if texts is None else list(texts)
    key = ("pooled", ctx.model, tag, uid_key(records), len(records))
    return ctx.shared(key, lambda: encode_pooled(ctx, texts))


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
    epsilon = check_epsilon(epsilon)
    out = np.empty(np.shape(x), dtype=np.float64)
    for i, uid in enumerate(uids):
        out[i] = privatize_laplace(np.asarray(x[i:i + 1], dtype=np.float64), epsilon, sensitivity,
                                   ctx.rng(*key, uid))[0]
    return out


def check_sensitivity(value: object) -> float:
    """Validates the per-coordinate sensitivity used for the Laplace scale (finite, > 0)."""
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
            f"Train on one of them (or on a mix with a labelled dataset, see scripts/fig7_comparison.py).")
    return mask


def datasets_with(attribute: str) -> list[str]:
    """Registered datasets whose loaders declare ``attribute`` (by their documented attribute sets)."""
    # Declared statically: listing them by loading every dataset would read every file on disk.
    known = {"gender": ["trustpilot", "trustpilot_uk", "blogs", "synthetic"],
             "age": ["trustpilot", "trustpilot_uk", "blogs", "synthetic"],
             "location": ["trustpilot_uk"]}
    return known.get(attribute, ["none of the built-in datasets"])


def classification_utility(probabilities: np.ndarray, labels: np.ndarray, *, rng: np.random.Generator,
                           suffix: str = "") -> dict[str, Estimate]:
    """Accuracy (per-example bootstrap), macro-F1 and AUC (bootstrap over examples) of class probabilities.

    Args:
        probabilities: ``(n, k)`` predicted class probabilities (columns = classes ``0..k-1``).
        labels: ``(n,)`` true class indices.
        rng: Generator for the bootstrap.
        suffix: Appended to the metric names (``".without_denoiser"``).
    """
    from sklearn.metrics import f1_score, roc_auc_score

    from rapt_audit.stats import bootstrap_mean, bootstrap_statistic

    labels = np.asarray(labels)
    predicted = probabilities.argmax(axis=1)
    k = probabilities.shape[1]

    def auc(idx: np.ndarray) -> float:
        y = labels[idx]
        if len(np.unique(y)) < 2:
            return float("nan")  # undefined on a one-class resample; dropped by the bootstrap
        if k == 2:
            return float(roc_auc_score(y, probabilities[idx, 1]))
        return float(roc_auc_score(y, probabilities[idx], multi_class="ovr", average="macro", labels=list(range(k))))

    def macro_f1(idx: np.ndarray) -> float:
        return float(f1_score(labels[idx], predicted[idx], average="macro", zero_division=0))

    out = {f"accuracy{suffix}": bootstrap_mean((predicted == labels).astype(float), rng=rng),
           f"macro_f1{suffix}": bootstrap_statistic(len(labels), macro_f1, rng=rng, resamples=300)}
    if len(np.unique(labels)) >= 2:
        out[f"auc{suffix}"] = bootstrap_statistic(len(labels), auc, rng=rng, resamples=300)
    return out
