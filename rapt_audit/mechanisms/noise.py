"""Noise mechanisms as pure, vectorised numpy functions: multivariate Laplace (dχ) and Laplace (LDP).

Two families of local noise are used by the defenses of this suite:

* **dχ-privacy noise** (Chatzikokolakis et al., PETS 2013; Feyisetan et al., WSDM 2020, Alg. 1;
  Qu et al., CIKM 2021, token-embedding privatization; RAPT): a d-dimensional vector is released as
  ``x + z`` with density ``p(z) ∝ exp(-eta * ||z||_2)``. It is sampled as ``z = l * v`` with the
  radius ``l ~ Gamma(shape=d, scale=1/eta)`` drawn **once per vector** and the direction ``v``
  uniform on the unit sphere (a normalised standard Gaussian). The mean norm is ``d / eta``.
* **Laplace LDP noise** for sentence representations (CAPE, Plant et al., EMNLP 2021; DPNR, Lyu et
  al., Findings EMNLP 2020): i.i.d. ``Laplace(0, sensitivity / epsilon)`` per example **and** per
  dimension.

Every function takes an explicit ``numpy.random.Generator`` and never touches numpy's global random
state, so a seeded generator reproduces a release exactly. Seeded generators are for tests and
audits; production callers should use ``np.random.default_rng()`` (OS entropy), as Opacus does in
its secure mode.

Numerics: these are float samplers ("idealized numerics" in OpenDP's terms). When a noisy *vector*
is released (CAPE, DPNR, token embeddings), floating-point porosity attacks (Mironov, CCS 2012) are
not mitigated; when only the nearest word is released (T2T), the word is post-processing of the
vector and the guarantee holds.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import numpy as np

from rapt_audit.api.errors import PrivacyParameterError

__all__ = [
    "check_privacy_parameter",
    "check_eta",
    "check_epsilon",
    "dchi_noise",
    "privatize_vectors",
    "laplace_noise",
    "privatize_laplace",
    "expected_dchi_norm",
]


def check_privacy_parameter(name: str, value: Any, *, allow_inf: bool, inf_meaning: str = "no privacy") -> float:
    """Validates a privacy parameter (eta, epsilon, a sensitivity, a scale) and returns it as a float.

    The contract follows Google DP's validators ("Epsilon must be finite and positive, but is nan.")
    and diffprivlib's/Tumult's type checks:

    * ``bool`` (also ``numpy.bool_``), ``str``, ``complex``, arrays with a number of elements other
      than one, and anything that is not a real number raise :class:`TypeError`. ``True`` would
      otherwise silently mean 1, and ``"1"`` would fail deep inside numpy.
    * NaN, zero, negative values, ``-inf``, and ``+inf`` unless ``allow_inf`` raise
      :class:`~rapt_audit.api.errors.PrivacyParameterError` (a ``ValueError``). numpy would *not* raise
      on most of these: ``rng.gamma(d, scale=1/eta)`` returns ``inf`` for ``eta`` in {0, 1e-310} and
      ``nan`` for ``eta = nan``, and a nearest-neighbour ``argmin`` over all-NaN or all-inf
      distances silently returns index 0, i.e. vocabulary word #0, deterministically.
    * A positive value whose reciprocal overflows (subnormals such as ``1e-310``) is rejected too,
      because the noise scale ``1/value`` would be infinite.

    numpy scalars, 0-d arrays and 1-element arrays of integer or floating dtype are accepted.

    Args:
        name: The parameter's name, used in error messages (``"eta"``).
        value: The value to check.
        allow_inf: Whether ``+inf`` is valid (it then means no privacy / no noise).
        inf_meaning: What ``inf`` means, for the error message.

    Returns:
        The value as a Python float (``math.inf`` when allowed and given).

    Raises:
        TypeError: If ``value`` is not a real number.
        PrivacyParameterError: If ``value`` is not in the valid range.
    """
    valid = f"finite and positive (or inf for {inf_meaning})" if allow_inf else "finite and positive"
    scalar = _as_real_scalar(name, value, valid)
    if math.isnan(scalar) or scalar <= 0.0 or (math.isinf(scalar) and not allow_inf):
        raise PrivacyParameterError(f"{name} must be {valid}, but is {scalar!r}.")
    if math.isfinite(scalar) and not math.isfinite(1.0 / scalar):
        raise PrivacyParameterError(
            f"{name} must be {valid} and large enough that 1/{name} is finite, but is {scalar!r} "
            f"(1/{name} overflows, so the noise scale would be infinite)."
        )
    return scalar


def _as_real_scalar(name: str, value: Any, valid: str) -> float:
    def bad_type(what: str) -> TypeError:
        return TypeError(f"{name} must be a real number, {valid}, but is {value!r} ({what}).")

    # bool is a numbers.Integral in Python: reject it explicitly, True must not mean 1.
    if isinstance(value, (bool, np.bool_)):
        raise bad_type("a bool")
    if isinstance(value, np.ndarray):
        if value.size != 1:
            raise bad_type(f"an array with {value.size} elements")
        if value.dtype.kind not in "iuf":
            raise bad_type(f"an array of dtype {value.dtype}")
        value = value.reshape(()).item()
    if not isinstance(value, numbers.Real):
        raise bad_type(f"of type {type(value).__name__}")
    try:
        return float(value)
    except OverflowError:  # an int beyond the float range, e.g. 10**400: not infinity, which is spelled math.inf
        raise PrivacyParameterError(f"{name} must be {valid}, but is an integer of {value.bit_length()} bits, too "
                                    "large for a float (it would read as infinity: no privacy); use math.inf if "
                                    "infinity is meant") from None


def check_eta(eta: Any) -> float:
    """Validates the dχ-privacy parameter eta (smaller = more noise); ``inf`` means no privacy.

    See :func:`check_privacy_parameter` for the contract.
    """
    return check_privacy_parameter("eta", eta, allow_inf=True, inf_meaning="no privacy")


def check_epsilon(epsilon: Any) -> float:
    """Validates the Laplace LDP parameter epsilon; ``inf`` means no noise (no privacy).

    See :func:`check_privacy_parameter` for the contract.
    """
    return check_privacy_parameter("epsilon", epsilon, allow_inf=True, inf_meaning="no noise")


def _check_count(name: str, value: Any, minimum: int) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int >= {minimum}, but is {value!r}.")
    if value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, but is {value!r}.")
    return int(value)


def _check_rng(rng: Any) -> np.random.Generator:
    # A Generator, never np.random's global RandomState: global state is shared with every other
    # library in the process, so seeds would not reproduce and noise could be predicted.
    if not isinstance(rng, np.random.Generator):
        raise TypeError(
            f"rng must be a numpy.random.Generator (e.g. np.random.default_rng(seed)), but is {type(rng).__name__}."
        )
    return rng


def _check_float_dtype(dtype: Any) -> np.dtype:
    dt = np.dtype(dtype)
    if dt not in (np.dtype(np.float32), np.dtype(np.float64)):
        raise TypeError(f"dtype must be float32 or float64, but is {dt}.")
    return dt


def _check_matrix(x: Any) -> np.ndarray:
    x = np.asarray(x)
    if x.ndim != 2 or x.dtype not in (np.float32, np.float64) or x.shape[1] < 1:
        raise ValueError(
            f"x must be a 2-D float32 or float64 array of shape (n, d) with d >= 1, "
            f"but has shape {x.shape} and dtype {x.dtype}."
        )
    if not np.isfinite(x).all():
        bad = int(np.size(x) - np.count_nonzero(np.isfinite(x)))
        raise ValueError(f"x must be finite, but has {bad} NaN or infinite entries.")
    return x


def _row_norms(a: np.ndarray) -> np.ndarray:
    # einsum avoids np.linalg.norm's n x d temporary (a**2) and is ~4x faster on large batches.
    return np.sqrt(np.einsum("ij,ij->i", a, a))


def dchi_noise(n: int, d: int, eta: float, rng: np.random.Generator, dtype: Any = np.float64) -> np.ndarray:
    """Draws ``n`` independent dχ-privacy (multivariate Laplace) noise vectors in ``R^d``.

    Each row is ``z = l * v`` with ``l ~ Gamma(shape=d, scale=1/eta)`` (one radius per row) and
    ``v = g / ||g||_2`` for ``g ~ N(0, I_d)``, which has density ``∝ exp(-eta * ||z||_2)``
    (Feyisetan et al., WSDM 2020, Alg. 1; Qu et al., CIKM 2021). The mean norm is ``d / eta``.

    Why this exact recipe (bugs seen in public implementations):

    * The radius is drawn **once per vector**. Drawing a Gamma per coordinate gives the wrong norm
      law (the norm of dχ noise is one Gamma(d, 1/eta) draw), and per-coordinate Laplace(1/eta) is
      dχ for the L1 metric, not L2 (up to a factor √d off).
    * numpy's ``gamma(shape, scale)`` takes a **scale** (= 1/eta); torch's ``Gamma(concentration,
      rate)`` takes a **rate** (= eta). Swapping them scales the noise by eta² (wrong unless eta=1).
    * The shape is the actual dimension ``d``: any other shape k gives a density
      ``∝ ||z||^(k-d) exp(-eta ||z||)``, singular or zero at the centre, i.e. unbounded privacy
      loss. A hard-coded 300 (MLDP's default) is only right for 300-d embeddings.
    * The direction normalises a Gaussian; a normalised cube draw, an L1 normalisation or a
      |N(0,1)| sign bug are not uniform on the sphere. ``multivariate_normal(0, I)`` would be
      uniform but ~2,000x slower and LAPACK-dependent, hence build-dependent.

    Stream order (for reproducibility): one call consumes first ``n*d`` standard normals (row-major,
    in ``dtype``), then ``n`` Gamma radii (float64). Rows whose Gaussian has norm exactly 0 (never
    observed; probability ~0) are redrawn afterwards. Two calls of sizes n1 and n2 on the same
    generator therefore do **not** give the same rows as one call of size n1+n2; callers that chunk
    must chunk the same way to reproduce, or give each chunk its own ``SeedSequence.spawn`` child.

    Memory: the result is the only ``n x d`` array allocated (plus O(n) vectors), so callers can
    bound memory by chunking ``n``.

    Args:
        n: Number of noise vectors (rows), ``>= 0``.
        d: Dimension, ``>= 1``; must be the real embedding dimension.
        eta: Privacy parameter, ``> 0``; ``inf`` gives zero noise (no privacy).
        rng: The generator to draw from (never numpy's global state).
        dtype: ``float32`` or ``float64``; the Gaussian is drawn in this dtype.

    Returns:
        An array of shape ``(n, d)`` and the requested dtype.

    Raises:
        TypeError: For non-integer ``n``/``d``, a non-Generator ``rng``, or a non-float dtype.
        ValueError: For ``n < 0`` or ``d < 1``.
        PrivacyParameterError: For an invalid ``eta``, or one so small that ``d/eta`` or a sampled
            radius overflows ``dtype``.
    """
    n = _check_count("n", n, 0)
    d = _check_count("d", d, 1)
    eta = check_eta(eta)
    rng = _check_rng(rng)
    dt = _check_float_dtype(dtype)
    if math.isinf(eta):
        return np.zeros((n, d), dtype=dt)
    scale = 1.0 / eta
    if not d * scale <= float(np.finfo(dt).max):  # also False for inf
        raise PrivacyParameterError(f"eta is too small for d={d}: the mean noise norm d/eta overflows {dt} (eta = {eta!r}).")

    g = rng.standard_normal((n, d), dtype=dt)
    radius = rng.gamma(shape=float(d), scale=scale, size=n)
    norm = _row_norms(g)
    zero = np.flatnonzero(norm == 0)
    while zero.size:  # probability ~0; kept so that no row is ever 0/0 = NaN
        g[zero] = rng.standard_normal((zero.size, d), dtype=dt)
        norm[zero] = _row_norms(g[zero])
        zero = zero[norm[zero] == 0]
    # |z_j| <= radius, so a radius representable in dtype keeps every coordinate finite.
    if not (radius <= float(np.finfo(dt).max)).all():
        raise PrivacyParameterError(f"eta is too small: a noise radius overflows {dt} (eta = {eta!r}, d = {d}).")
    g *= (radius / norm).astype(dt)[:, None]  # in place: no second n x d temporary
    return g


def privatize_vectors(x: np.ndarray, eta: Any, rng: np.random.Generator) -> np.ndarray:
    """Adds fresh dχ noise to every row of ``x`` (token-embedding privatization, Qu et al. 2021).

    The dimension is taken from ``x.shape[1]``; there is deliberately no separate ``dim`` argument
    (MLDP's ``dim=300`` default is decoupled from the embedding it perturbs).

    Args:
        x: A finite 2-D float array of shape ``(n, d)`` (float32 or float64; the dtype is kept).
        eta: Privacy parameter, ``> 0``; ``inf`` returns a copy of ``x`` (no privacy).
        rng: The generator to draw from.

    Returns:
        A new array ``x + z`` with ``z = dchi_noise(n, d, eta, rng, dtype=x.dtype)``.

    Raises:
        ValueError: If ``x`` is not a finite 2-D float array, or if the result is not finite.
            Infinite or NaN vectors must never reach a nearest-neighbour step: ``argmin`` over
            all-NaN distances returns index 0 without any warning.
        PrivacyParameterError: For an invalid ``eta``.
    """
    x = _check_matrix(x)
    eta = check_eta(eta)
    out = dchi_noise(x.shape[0], x.shape[1], eta, rng, dtype=x.dtype)
    with np.errstate(over="ignore", invalid="ignore"):  # reported just below, with a reason
        out += x
    if not np.isfinite(out).all():
        raise ValueError(
            f"privatized vectors are not finite (eta = {eta!r}, d = {x.shape[1]}); refusing to release "
            "them, because a nearest-neighbour decode of inf/NaN vectors silently returns word #0."
        )
    return out


def laplace_noise(shape: int | tuple[int, ...], scale: Any, rng: np.random.Generator) -> np.ndarray:
    """Draws i.i.d. ``Laplace(0, scale)`` noise of the given shape (float64).

    Every element is a fresh draw: for a ``(n, d)`` shape that is fresh noise per example **and**
    per dimension. CAPE's public code draws one ``d``-vector and broadcasts it over the batch, and
    DPNR's draws one scalar per example for all dimensions; neither is then LDP per example.

    Args:
        shape: Output shape.
        scale: The Laplace scale b (standard deviation ``sqrt(2) * b``), finite and ``> 0``.
        rng: The generator to draw from.

    Returns:
        An array of the given shape.
    """
    scale = check_privacy_parameter("scale", scale, allow_inf=False)
    rng = _check_rng(rng)
    return rng.laplace(loc=0.0, scale=scale, size=shape)


def privatize_laplace(x: np.ndarray, epsilon: Any, sensitivity: Any, rng: np.random.Generator) -> np.ndarray:
    """Releases ``x + Laplace(0, sensitivity/epsilon)`` per example and per dimension (CAPE, DPNR).

    Sensitivity convention: ``sensitivity`` is the **L1 sensitivity of one whole released
    vector**, ``max ||f(s) - f(s')||_1`` over the inputs ``s, s'`` one user may hold, not a
    per-coordinate bound. For a representation min-max normalised to ``[0, 1]^d`` it is ``d``;
    CAPE's and DPNR's public code use 1 (a per-coordinate value), which understates the scale by a
    factor ``d``. With this convention each row is ``epsilon``-LDP (Laplace mechanism, Dwork et al.
    2006). Normalisation, if any, must be done per example by the caller before calling this
    (CAPE normalises over the whole batch, which makes releases depend on other users).

    Args:
        x: A finite 2-D float array of shape ``(n, d)``: one representation per row.
        epsilon: The LDP parameter, ``> 0``; ``inf`` returns a float64 copy of ``x`` (no noise).
        sensitivity: L1 sensitivity of one row, finite and ``> 0``.
        rng: The generator to draw from.

    Returns:
        A new float64 array of the same shape.

    Raises:
        ValueError: If ``x`` is not a finite 2-D float array or the result is not finite.
        PrivacyParameterError: For an invalid epsilon or sensitivity, or if the scale overflows.
    """
    x = _check_matrix(x)
    epsilon = check_epsilon(epsilon)
    sensitivity = check_privacy_parameter("sensitivity", sensitivity, allow_inf=False)
    rng = _check_rng(rng)
    if math.isinf(epsilon):
        return x.astype(np.float64, copy=True)
    scale = sensitivity / epsilon
    if not math.isfinite(scale):
        raise PrivacyParameterError(
            f"sensitivity/epsilon must be finite, but is {scale!r} (sensitivity = {sensitivity!r}, epsilon = {epsilon!r})."
        )
    out = laplace_noise(x.shape, scale, rng)
    with np.errstate(over="ignore", invalid="ignore"):  # reported just below
        out += x
    if not np.isfinite(out).all():
        raise ValueError(f"privatized vectors are not finite (scale = {scale!r}); refusing to release them.")
    return out


def expected_dchi_norm(d: int, eta: Any) -> float:
    """Mean norm of dχ noise, ``E||z|| = d / eta`` (Qu et al., CIKM 2021; the Gamma(d, 1/eta) mean).

    Args:
        d: Dimension, ``>= 1``.
        eta: Privacy parameter; ``inf`` gives 0.

    Returns:
        ``d / eta`` as a float.
    """
    d = _check_count("d", d, 1)
    eta = check_eta(eta)
    return 0.0 if math.isinf(eta) else d / eta
