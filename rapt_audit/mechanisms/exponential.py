"""The exponential mechanism over a finite set of words, as pure vectorised numpy functions.

The word-level mechanisms of the field that are not dχ noise (SanText/SanText+, Yue et al., Findings of
ACL 2021; CusText/CusText+, Chen et al., Findings of ACL 2023) release, for an input word x, an output
word y drawn from a finite candidate set with probability ``∝ exp(score(x, y))``: SanText's score is
``−ε·d(x, y)/2`` over the vocabulary, CusText's ``ε·u(x, y)/2`` over x's customized set. Two things
are shared, and done once here:

* :func:`euclidean_distances`: float64 Euclidean distances between word vectors (float64 because the
  law depends on ``exp(−ε·d/2)`` exactly: float32's ``‖x‖² + ‖y‖² − 2x·y`` loses about 3e-3 of the
  distance of a word to itself, a bias a large-sample test of the law detects).
* :func:`sample_rows`: one categorical draw per occurrence from the log-weights of its word, by
  inverse CDF with one uniform per draw. Rows are the *distinct* input words (the law depends on the
  word only), so a text of n words costs one row of weights per distinct word, and the draws of every
  occurrence are one ``searchsorted`` over the rows laid end to end. One uniform per draw also makes the
  replacement probability move smoothly with ε under common random numbers (calibration's bisection).

The released output is a function of the input's row of weights and a uniform only; nothing is
approximated (no truncation of small weights: a weight that underflows to 0 in float64 is below 1e-308
of the largest and is never drawn, the only departure from the exact law).
"""

from __future__ import annotations

import numpy as np

__all__ = ["euclidean_distances", "sample_rows"]


def euclidean_distances(a: np.ndarray, b: np.ndarray, *, b_half_sq: np.ndarray | None = None) -> np.ndarray:
    """float64 ``(len(a), len(b))`` Euclidean distances between the rows of ``a`` and ``b``.

    Args:
        a: ``(m, d)`` vectors.
        b: ``(k, d)`` vectors (float64 is used as given; other dtypes are converted).
        b_half_sq: ``‖b_j‖²/2`` when the caller keeps it for a fixed ``b`` (saves a pass over ``b``).
    """
    a64 = np.asarray(a, dtype=np.float64)
    b64 = np.asarray(b, dtype=np.float64)
    if b_half_sq is None:
        b_half_sq = 0.5 * np.einsum("ij,ij->i", b64, b64)
    half_a = 0.5 * np.einsum("ij,ij->i", a64, a64)
    sq = a64 @ b64.T
    sq *= -2.0
    sq += 2.0 * half_a[:, None]
    sq += 2.0 * b_half_sq[None, :]
    np.maximum(sq, 0.0, out=sq)  # rounding can make a distance of 0 slightly negative
    return np.sqrt(sq, out=sq)


def sample_rows(log_weights: np.ndarray, owners: np.ndarray, uniforms: np.ndarray) -> np.ndarray:
    """Column drawn for each occurrence from its row's law ``softmax(log_weights[row])``, by inverse CDF.

    Args:
        log_weights: ``(m, k)`` float log-weights, one row per distinct input (``-inf`` excludes a column).
        owners: ``(n,)`` int row of each occurrence.
        uniforms: ``(n,)`` uniforms in ``[0, 1)``, one per occurrence (``rng.random(n)``).

    Returns:
        int64 ``(n,)`` columns: column j with probability ``exp(w_j) / Σ exp(w)`` of the owner's row.
    """
    log_weights = np.asarray(log_weights, dtype=np.float64)
    m, k = log_weights.shape
    if not np.isfinite(log_weights.max(axis=1, initial=-np.inf)).all():
        raise ValueError("every row of log-weights needs at least one finite weight")
    weights = np.exp(log_weights - log_weights.max(axis=1, keepdims=True))  # the largest weight is 1: no overflow
    cdf = np.cumsum(weights, axis=1)
    cdf /= cdf[:, -1:]
    cdf[:, -1] = 1.0  # exactly: a uniform just below 1 never falls past its own row
    # Rows laid end to end, row r shifted by r: a draw of row r is the first entry above r + u (side="right",
    # so a zero-weight column, whose CDF equals its predecessor's, is never drawn). Shifts up to m cost
    # log2(m) of float64's 53 bits of resolution.
    flat = (cdf + np.arange(m, dtype=np.float64)[:, None]).ravel()
    owners = np.asarray(owners, dtype=np.int64)
    position = np.searchsorted(flat, owners + np.asarray(uniforms, dtype=np.float64), side="right")
    return np.minimum(position - owners * k, k - 1)
