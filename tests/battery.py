"""Statistical test battery for the noise samplers, and the known-bad samplers it must reject.

Implements S1–S9, S11 and S12 of the research notes (``dp_testing_and_auditing.md`` §5.2); S13
(determinism and RNG hygiene) is exact and lives in ``test_noise.py``. Every function returns a
p-value (reject when ``p < ALPHA``) or a z statistic (reject when ``|z| > Z_CRIT``); both cut-offs
are α = 1e-6 (OpenDP's per-test level). Notation: ``z`` is an ``(n, d)`` array of noise rows,
``R = ||z||``, ``V = z / R``, ``u`` a fixed unit vector.

The mutants reproduce bug classes found in public text-DP code (research notes §4) with the same
signature as the correct sampler, so the tests of the tests can assert that each one is rejected
by the battery tests documented to catch it (:data:`DCHI_CATCHERS`, :data:`LAPLACE_CATCHERS`).
"""

from __future__ import annotations

import os
import zlib
from dataclasses import dataclass
from typing import Callable

import numpy as np
from scipy import special  # not scipy.stats: its import alone costs ~2 s on the 2-core CI machines

from rapt_audit.mechanisms.noise import dchi_noise

#: Per-test false-alarm level (OpenDP); with fixed seeds a neutral refactor flips a test w.p. <= 1e-6.
ALPHA = 1e-6
#: Two-sided normal critical value for ALPHA: 2 * norm.sf(4.89) = 1.0e-6.
Z_CRIT = 4.89
#: S12: the smallest eigenvalue of the empirical noise covariance must exceed this fraction of 2b².
COV_EIG_MIN_RATIO = 0.5
#: Suite base seed; ``RAPT_AUDIT_SUITE_SEED`` overrides it for nightly randomised sweeps.
BASE_SEED = int(os.environ.get("RAPT_AUDIT_SUITE_SEED", "20240917"))


def seed_for(test_id: str) -> np.random.SeedSequence:
    """A deterministic, independent seed per test id (crc32, not Python's per-process salted hash)."""
    return np.random.SeedSequence(entropy=BASE_SEED, spawn_key=(zlib.crc32(test_id.encode("utf-8")),))


def rng_for(test_id: str) -> np.random.Generator:
    """A fresh generator for ``test_id``; quote ``describe_seed(test_id)`` in assertion messages."""
    return np.random.default_rng(seed_for(test_id))


def describe_seed(test_id: str) -> str:
    return f"[test_id={test_id!r}, BASE_SEED={BASE_SEED}, crc32={zlib.crc32(test_id.encode('utf-8'))}]"


def unit_vector(d: int, test_id: str = "battery/u") -> np.ndarray:
    """A fixed random unit vector (the ``u`` of S4 and S8)."""
    u = rng_for(f"{test_id}/d={d}").standard_normal(d)
    return u / np.linalg.norm(u)


def _norms(z: np.ndarray) -> np.ndarray:
    return np.sqrt(np.einsum("ij,ij->i", z, z))  # no n x d temporary, unlike np.linalg.norm


def _radius(z: np.ndarray) -> np.ndarray:
    r = _norms(z)
    if not (r > 0).all():
        raise ValueError("direction tests need non-zero noise rows")
    return r


def _ks_p(x: np.ndarray, cdf: Callable[[np.ndarray], np.ndarray]) -> float:
    """One-sample KS p-value, asymptotic Kolmogorov law (scipy's ``kstest(method="asymp")``).

    Accurate for n >= 1000 (all battery uses) and O(n log n) however small p gets.
    """
    f = cdf(np.sort(np.ravel(x)))
    n = f.size
    d_plus = np.max(np.arange(1, n + 1) / n - f)
    d_minus = np.max(f - np.arange(n) / n)
    return float(special.kolmogorov(np.sqrt(n) * max(d_plus, d_minus)))


def _chi2_sf(stat: float, df: float) -> float:
    return float(special.chdtrc(df, stat))


def _spearman_p(a: np.ndarray, b: np.ndarray) -> float:
    """Two-sided p-value of Spearman's rho (t approximation with n-2 df, as scipy's ``spearmanr``).

    Ties have probability 0 for continuous samplers, so plain ranks are used. A constant input is
    treated as total dependence (p = 0) instead of scipy's NaN, which would silently pass a
    "p < ALPHA" check.
    """
    if np.ptp(a) == 0 or np.ptp(b) == 0:
        return 0.0
    ra = np.argsort(np.argsort(a)).astype(np.float64)
    rb = np.argsort(np.argsort(b)).astype(np.float64)
    rho = float(np.corrcoef(ra, rb)[0, 1])
    df = a.size - 2
    t = rho * np.sqrt(df / max(1.0 - rho * rho, 1e-300))
    return float(2.0 * special.stdtr(df, -abs(t)))


# --- S1–S9: multivariate Laplace (dχ) noise ---------------------------------------------------


def radius_ks_pvalue(z: np.ndarray, d: int, eta: float) -> float:
    """S1: KS of ``R`` against Gamma(shape=d, scale=1/eta)."""
    if z.shape[1] != d:
        raise ValueError(f"z has {z.shape[1]} columns, expected d = {d}")
    return _ks_p(_norms(z), lambda r: special.gammainc(d, r * eta))


def radius_mean_z(z: np.ndarray, d: int, eta: float) -> float:
    """S2: z-test of mean ``R`` against ``d/eta`` with se ``sqrt(d)/(eta*sqrt(n))``; z ≈ sqrt(n/d) per unit of shape error."""
    r = _norms(z)
    return float((r.mean() - d / eta) / (np.sqrt(d) / (eta * np.sqrt(r.size))))


def _projection_ks_p(proj: np.ndarray, d: int) -> float:
    if d < 2:
        raise ValueError("projection tests need d >= 2 (at d = 1 the direction is only a sign)")
    # <V, u> for V uniform on S^(d-1): (t + 1) / 2 ~ Beta((d-1)/2, (d-1)/2).
    a = (d - 1) / 2.0
    return _ks_p((np.clip(proj, -1.0, 1.0) + 1.0) / 2.0, lambda t: special.betainc(a, a, t))


def axis_projection_ks_pvalue(z: np.ndarray, axis: int = 0) -> float:
    """S3: KS of ``(<V, e_axis> + 1)/2`` against Beta((d-1)/2, (d-1)/2). Catches the cube direction."""
    return _projection_ks_p(z[:, axis] / _radius(z), z.shape[1])


def random_projection_ks_pvalue(z: np.ndarray, u: np.ndarray) -> float:
    """S4: as S3 with a fixed random unit vector ``u`` (backstop for rotation-dependent bugs)."""
    return _projection_ks_p((z @ u) / _radius(z), z.shape[1])


def rayleigh_pvalue(z: np.ndarray) -> float:
    """S5: Rayleigh test of the mean direction, ``n*d*||mean V||^2 ~ chi2_d``."""
    n, d = z.shape
    vbar = (z.T @ (1.0 / _radius(z))) / n
    return _chi2_sf(n * d * float(vbar @ vbar), d)


def bingham_pvalue(z: np.ndarray) -> float:
    """S6: Bingham test, ``n*d(d+2)/2*(tr(T^2) - 1/d) ~ chi2_{(d-1)(d+2)/2}`` with ``T = mean(V V^T)``.

    Blind to the cube direction by construction: a cube's covariance is isotropic.
    """
    n, d = z.shape
    if d < 2:
        raise ValueError("the Bingham test needs d >= 2")
    v = z * (1.0 / _radius(z))[:, None]
    t = (v.T @ v) / n
    stat = n * d * (d + 2) / 2.0 * (float(np.sum(t * t)) - 1.0 / d)
    return _chi2_sf(stat, (d - 1) * (d + 2) / 2.0)


def coordinate_variance_z(z: np.ndarray, eta: float) -> float:
    """S7: z-test of the mean squared coordinate against ``E z_j^2 = (d+1)/eta^2``.

    The mean over all entries is ``mean(R^2)/d``; with ``R ~ Gamma(d, 1/eta)``,
    ``Var(R^2) = d(d+1)(4d+6)/eta^4``, which gives an exact standard error (coordinates of one row
    are dependent, so the naive per-entry variance would be wrong).
    """
    n, d = z.shape
    r2 = np.einsum("ij,ij->i", z, z)
    se = np.sqrt(d * (d + 1) * (4 * d + 6) / n) / (d * eta**2)
    return float((r2.mean() / d - (d + 1) / eta**2) / se)


def radius_direction_spearman_pvalue(z: np.ndarray, u: np.ndarray) -> float:
    """S8: Spearman correlation of ``R`` and ``|<V, u>|`` (radius and direction must be independent)."""
    r = _radius(z)
    return _spearman_p(r, np.abs(z @ u) / r)


def cross_row_independence_z(z: np.ndarray) -> float:
    """S9: rows of one call must be independent: z of the mean ``<V_i, V_j>`` over disjoint pairs.

    Rows ``i`` and ``i + n//2`` are paired; for independent uniform directions ``<V_i, V_j>`` has
    mean 0 and variance ``1/d``, so ``mean * sqrt(d * pairs) ~ N(0, 1)``. Noise shared across the
    batch (CAPE's broadcast bug) gives ``<V_i, V_j> = 1``.
    """
    n, d = z.shape
    m = n // 2
    r = _radius(z)
    c = np.einsum("ij,ij->i", z[:m], z[m : 2 * m]) / (r[:m] * r[m : 2 * m])
    return float(c.mean() * np.sqrt(d * m))


def cross_row_radius_spearman_pvalue(z: np.ndarray) -> float:
    """S9 (radii): Spearman of ``R_i`` vs ``R_{i+n//2}``; identical (constant) radii count as dependent (p = 0)."""
    r = _norms(z)
    m = r.size // 2
    return _spearman_p(r[:m], r[m : 2 * m])


@dataclass(frozen=True)
class BatteryTest:
    """One battery test: its §5.2 code, statistic kind and the smallest d where it is meaningful."""

    name: str
    code: str
    kind: str  # "p": reject when p < ALPHA; "z": reject when |z| > Z_CRIT; "ratio": reject when < COV_EIG_MIN_RATIO
    min_d: int
    fn: Callable[..., float]

    def rejects(self, value: float) -> bool:
        if np.isnan(value):  # a NaN statistic is a bug, never a pass
            return True
        if self.kind == "p":
            return value < ALPHA
        if self.kind == "z":
            return abs(value) > Z_CRIT
        return value < COV_EIG_MIN_RATIO


#: The dχ battery. Each ``fn(z, d=, eta=, u=)``; tests with ``min_d = 2`` are meaningless at d = 1
#: (the direction is a sign, Beta((d-1)/2, ...) is degenerate, the Bingham df is 0).
DCHI_BATTERY: dict[str, BatteryTest] = {
    t.name: t
    for t in (
        BatteryTest("radius_ks", "S1", "p", 1, lambda z, d, eta, u: radius_ks_pvalue(z, d, eta)),
        BatteryTest("radius_mean", "S2", "z", 1, lambda z, d, eta, u: radius_mean_z(z, d, eta)),
        BatteryTest("axis_projection_ks", "S3", "p", 2, lambda z, d, eta, u: axis_projection_ks_pvalue(z)),
        BatteryTest("random_projection_ks", "S4", "p", 2, lambda z, d, eta, u: random_projection_ks_pvalue(z, u)),
        BatteryTest("rayleigh", "S5", "p", 1, lambda z, d, eta, u: rayleigh_pvalue(z)),
        BatteryTest("bingham", "S6", "p", 2, lambda z, d, eta, u: bingham_pvalue(z)),
        BatteryTest("coordinate_variance", "S7", "z", 1, lambda z, d, eta, u: coordinate_variance_z(z, eta)),
        BatteryTest("radius_direction_spearman", "S8", "p", 2, lambda z, d, eta, u: radius_direction_spearman_pvalue(z, u)),
        BatteryTest("cross_row_direction", "S9", "z", 1, lambda z, d, eta, u: cross_row_independence_z(z)),
        BatteryTest("cross_row_radius", "S9", "p", 1, lambda z, d, eta, u: cross_row_radius_spearman_pvalue(z)),
    )
}


# --- S11, S12: Laplace noise for CAPE/DPNR-style mechanisms -------------------------------------


def laplace_ks_pvalue(x: np.ndarray, b: float) -> float:
    """S11: KS of all entries against Laplace(0, b)."""

    def cdf(t: np.ndarray) -> np.ndarray:
        return np.where(t < 0, 0.5 * np.exp(np.minimum(t, 0.0) / b), 1.0 - 0.5 * np.exp(-np.maximum(t, 0.0) / b))

    return _ks_p(x, cdf)


def laplace_mean_z(x: np.ndarray, b: float) -> float:
    """S11: z of the mean against 0 (sd ``sqrt(2) b``)."""
    x = np.ravel(x)
    return float(x.mean() / (np.sqrt(2.0) * b / np.sqrt(x.size)))


def laplace_variance_z(x: np.ndarray, b: float) -> float:
    """S11: z of ``mean(x^2)`` against ``2b^2``, se ``sqrt(20) b^2 / sqrt(n)`` (Var(x^2) = 24b^4 - 4b^4)."""
    x = np.ravel(x)
    return float((np.mean(x * x) - 2.0 * b * b) / (np.sqrt(20.0) * b * b / np.sqrt(x.size)))


def laplace_symmetry_z(x: np.ndarray) -> float:
    """S11: z of the number of positive entries against Binomial(n, 1/2) (exact zeros dropped)."""
    x = np.ravel(x)
    x = x[x != 0]
    return float((np.count_nonzero(x > 0) - x.size / 2.0) / np.sqrt(x.size / 4.0))


def laplace_tail_z(x: np.ndarray, b: float) -> float:
    """S11: tails ``P(|X| >= t b) = e^-t`` for t in {1, 2, 3, 5, 8} where ``n p >= 10``; the largest |z|.

    Taking the largest of up to five z values inflates the false-alarm level to at most 5 * ALPHA.
    """
    a = np.abs(np.ravel(x)) / b
    worst = 0.0
    for t in (1.0, 2.0, 3.0, 5.0, 8.0):
        p = np.exp(-t)
        if a.size * p < 10:
            continue
        zt = (np.count_nonzero(a >= t) - a.size * p) / np.sqrt(a.size * p * (1 - p))
        worst = zt if abs(zt) > abs(worst) else worst
    return float(worst)


def laplace_log_slope_z(x: np.ndarray, b: float, *, width: float = 0.25) -> float:
    """S11: slope of the log-density of ``|X|/b`` must be -1: z of a Poisson log-linear fit on bins.

    ``|X|/b ~ Exp(1)``, so equal-width bin counts are exactly ``N e^{-a}(1 - e^{-w})`` at left edge
    ``a``. Bins are kept where that null expectation is >= 10 (chosen before looking at the data,
    so observed zeros are fine); the slope is fitted by Poisson maximum likelihood (IRLS) and its
    standard error taken from the Fisher information.
    """
    a = np.abs(np.ravel(x)) / b
    n = a.size
    top = np.log(n * (1 - np.exp(-width)) / 10.0)
    edges = np.arange(0.0, top, width)
    if edges.size < 3:
        raise ValueError("too few samples for the slope test")
    counts, _ = np.histogram(a, bins=np.append(edges, edges[-1] + width))
    design = np.column_stack([np.ones_like(edges), edges])
    beta = np.array([np.log(max(counts[0], 1)), -1.0])
    for _ in range(50):
        mu = np.exp(design @ beta)
        info = design.T @ (design * mu[:, None])
        step = np.linalg.solve(info, design.T @ (counts - mu))
        beta += step
        if np.max(np.abs(step)) < 1e-12:
            break
    info = design.T @ (design * np.exp(design @ beta)[:, None])
    se = np.sqrt(np.linalg.inv(info)[1, 1])
    return float((beta[1] + 1.0) / se)


def noise_covariance_min_eig_ratio(noise: np.ndarray, b: float) -> float:
    """S12: smallest eigenvalue of the empirical covariance of noise rows, divided by ``2b^2``.

    For i.i.d. Laplace(b) noise the covariance is ``2b^2 I``; the ratio concentrates near
    ``(1 - sqrt(d/n))^2``. Scalar-per-example noise has rank 1 (ratio ~0), batch-shared noise has
    zero covariance. Reject when the ratio is below :data:`COV_EIG_MIN_RATIO`.
    """
    cov = np.cov(noise, rowvar=False)
    return float(np.linalg.eigvalsh(np.atleast_2d(cov))[0] / (2.0 * b * b))


LAPLACE_BATTERY: dict[str, BatteryTest] = {
    t.name: t
    for t in (
        BatteryTest("laplace_ks", "S11", "p", 1, lambda x, b: laplace_ks_pvalue(x, b)),
        BatteryTest("laplace_mean", "S11", "z", 1, lambda x, b: laplace_mean_z(x, b)),
        BatteryTest("laplace_variance", "S11", "z", 1, lambda x, b: laplace_variance_z(x, b)),
        BatteryTest("laplace_symmetry", "S11", "z", 1, lambda x, b: laplace_symmetry_z(x)),
        BatteryTest("laplace_tail", "S11", "z", 1, lambda x, b: laplace_tail_z(x, b)),
        BatteryTest("laplace_log_slope", "S11", "z", 1, lambda x, b: laplace_log_slope_z(x, b)),
        BatteryTest("covariance_min_eig", "S12", "ratio", 2, lambda x, b: noise_covariance_min_eig_ratio(x, b)),
    )
}


# --- dχ mutants: same signature as dchi_noise(n, d, eta, rng, dtype) ---------------------------


def _normalised(a: np.ndarray, norms: np.ndarray) -> np.ndarray:
    a /= norms[:, None]  # in place: the mutants run at n x d = 15M in the tests
    return a


def _gaussian_direction(n: int, d: int, rng: np.random.Generator) -> np.ndarray:
    g = rng.standard_normal((n, d))
    return _normalised(g, _norms(g))


def _scaled(v: np.ndarray, radius: np.ndarray, dtype) -> np.ndarray:
    v *= radius[:, None] if radius.ndim == 1 else radius
    return v.astype(dtype, copy=False)


def _with_radius(shape: float, n: int, d: int, eta: float, rng: np.random.Generator, dtype) -> np.ndarray:
    # Same stream order as dchi_noise (normals, then radii), so "differs" checks are meaningful.
    v = _gaussian_direction(n, d, rng)
    return _scaled(v, rng.gamma(shape, 1.0 / eta, size=n), dtype)


def mutant_shape_d_minus_1(n, d, eta, rng, dtype=np.float64):
    """Gamma shape d-1 (off by one): density singular at the centre; only S1/S2 see it."""
    return _with_radius(d - 1, n, d, eta, rng, dtype)


def mutant_shape_1(n, d, eta, rng, dtype=np.float64):
    """Gamma shape 1 (an exponential radius, the 1-D recipe used in d dimensions)."""
    return _with_radius(1, n, d, eta, rng, dtype)


def mutant_shape_300(n, d, eta, rng, dtype=np.float64):
    """Hard-coded shape 300 (MLDP's ``dim=300`` default); identical to the correct sampler at d=300."""
    return _with_radius(300, n, d, eta, rng, dtype)


def mutant_rate_scale_swap(n, d, eta, rng, dtype=np.float64):
    """numpy scale given eta (torch's rate): noise scaled by eta^2; invisible at eta = 1."""
    v = _gaussian_direction(n, d, rng)
    return _scaled(v, rng.gamma(d, eta, size=n), dtype)


def mutant_moment_matched_gaussian(n, d, eta, rng, dtype=np.float64):
    """N(0, (d+1)/eta^2 I): same per-coordinate variance and a uniform direction; no pure dχ bound."""
    g = rng.standard_normal((n, d))
    g *= np.sqrt(d + 1.0) / eta
    return g.astype(dtype, copy=False)


def mutant_cube_direction(n, d, eta, rng, dtype=np.float64):
    """Direction = normalised uniform cube draw (not uniform on the sphere; isotropic covariance)."""
    c = rng.uniform(-1.0, 1.0, size=(n, d))
    return _scaled(_normalised(c, _norms(c)), rng.gamma(d, 1.0 / eta, size=n), dtype)


def mutant_l1_direction(n, d, eta, rng, dtype=np.float64):
    """Gaussian normalised by its L1 norm (a commented-out line in a public Feyisetan re-implementation)."""
    g = rng.standard_normal((n, d))
    return _scaled(_normalised(g, np.abs(g).sum(axis=1)), rng.gamma(d, 1.0 / eta, size=n), dtype)


def mutant_orthant_direction(n, d, eta, rng, dtype=np.float64):
    """|N(0, 1)| direction (a sign bug): all noise in the positive orthant."""
    g = np.abs(rng.standard_normal((n, d)))
    return _scaled(_normalised(g, _norms(g)), rng.gamma(d, 1.0 / eta, size=n), dtype)


def mutant_per_coordinate_laplace(n, d, eta, rng, dtype=np.float64):
    """i.i.d. Laplace(1/eta) per coordinate: dχ for the L1 metric, mislabelled as L2."""
    return rng.laplace(0.0, 1.0 / eta, size=(n, d)).astype(dtype, copy=False)


def mutant_per_coordinate_gamma(n, d, eta, rng, dtype=np.float64):
    """The radius drawn per coordinate (size (n, d)) instead of once per row (DESIGN.md §2)."""
    v = _gaussian_direction(n, d, rng)
    return _scaled(v, rng.gamma(d, 1.0 / eta, size=(n, d)), dtype)


def mutant_shared_across_batch(n, d, eta, rng, dtype=np.float64):
    """One noise vector broadcast to every row (CAPE's [d, 1] -> [d] broadcast over the batch)."""
    return np.repeat(dchi_noise(1, d, eta, rng, dtype), n, axis=0)


def mutant_scalar_per_example(n, d, eta, rng, dtype=np.float64):
    """One Laplace(1/eta) scalar per example added to every coordinate (DPNR's [B, 1] noise)."""
    return np.repeat(rng.laplace(0.0, 1.0 / eta, size=(n, 1)), d, axis=1).astype(dtype)


DCHI_MUTANTS: dict[str, Callable[..., np.ndarray]] = {
    f.__name__.removeprefix("mutant_"): f
    for f in (
        mutant_shape_d_minus_1,
        mutant_shape_1,
        mutant_shape_300,
        mutant_rate_scale_swap,
        mutant_moment_matched_gaussian,
        mutant_cube_direction,
        mutant_l1_direction,
        mutant_orthant_direction,
        mutant_per_coordinate_laplace,
        mutant_per_coordinate_gamma,
        mutant_shared_across_batch,
        mutant_scalar_per_example,
    )
}

#: Which battery tests are documented (and verified by test_noise.py) to reject each mutant at the
#: CI sizes. Only tests with a large margin are listed (see the calibration note in test_noise.py).
DCHI_CATCHERS: dict[str, tuple[str, ...]] = {
    "shape_d_minus_1": ("radius_ks", "radius_mean"),
    "shape_1": ("radius_ks", "radius_mean", "coordinate_variance"),
    "shape_300": ("radius_ks", "radius_mean", "coordinate_variance"),
    "rate_scale_swap": ("radius_ks", "radius_mean", "coordinate_variance"),
    "moment_matched_gaussian": ("radius_ks",),
    "cube_direction": ("axis_projection_ks",),
    "l1_direction": ("radius_ks", "radius_mean", "coordinate_variance"),
    # S9's mean <V_i, V_j> also sees the orthant bias (a common mean direction makes rows correlate).
    "orthant_direction": ("axis_projection_ks", "random_projection_ks", "rayleigh", "bingham", "cross_row_direction"),
    "per_coordinate_laplace": ("radius_ks", "radius_mean", "axis_projection_ks", "coordinate_variance"),
    "per_coordinate_gamma": ("radius_ks",),
    "shared_across_batch": ("cross_row_direction", "cross_row_radius", "radius_ks"),
    "scalar_per_example": ("axis_projection_ks", "random_projection_ks", "bingham"),
}


# --- Laplace mutants: same signature as laplace_noise(shape, scale, rng) -----------------------


def laplace_mutant_scale_up_30(shape, scale, rng):
    """Scale 30% too large (Tumult's fudge factor)."""
    return rng.laplace(0.0, 1.3 * scale, size=shape)


def laplace_mutant_scale_down_30(shape, scale, rng):
    """Scale 30% too small: less noise than claimed."""
    return rng.laplace(0.0, 0.7 * scale, size=shape)


def laplace_mutant_gaussian(shape, scale, rng):
    """Gaussian with the Laplace variance 2b^2 (a Gaussian-for-Laplace swap)."""
    return rng.normal(0.0, np.sqrt(2.0) * scale, size=shape)


def laplace_mutant_abs(shape, scale, rng):
    """|Laplace| (a sign bug)."""
    return np.abs(rng.laplace(0.0, scale, size=shape))


def laplace_mutant_shared(shape, scale, rng):
    """One d-vector broadcast over the batch (CAPE)."""
    n, d = shape
    return np.repeat(rng.laplace(0.0, scale, size=(1, d)), n, axis=0)


def laplace_mutant_scalar_per_example(shape, scale, rng):
    """One scalar per example added to every dimension (DPNR)."""
    n, d = shape
    return np.repeat(rng.laplace(0.0, scale, size=(n, 1)), d, axis=1)


LAPLACE_MUTANTS: dict[str, Callable[..., np.ndarray]] = {
    f.__name__.removeprefix("laplace_mutant_"): f
    for f in (
        laplace_mutant_scale_up_30,
        laplace_mutant_scale_down_30,
        laplace_mutant_gaussian,
        laplace_mutant_abs,
        laplace_mutant_shared,
        laplace_mutant_scalar_per_example,
    )
}

LAPLACE_CATCHERS: dict[str, tuple[str, ...]] = {
    "scale_up_30": ("laplace_ks", "laplace_variance", "laplace_tail", "laplace_log_slope"),
    "scale_down_30": ("laplace_ks", "laplace_variance", "laplace_tail", "laplace_log_slope"),
    "gaussian": ("laplace_ks", "laplace_tail", "laplace_log_slope"),
    "abs": ("laplace_mean", "laplace_symmetry", "laplace_ks"),
    "shared": ("covariance_min_eig",),
    "scalar_per_example": ("covariance_min_eig",),
}


# --- Categorical laws: the exponential mechanism of the word-level sanitizers (SanText, CusText) ---------


def categorical_chi2_pvalue(outcomes: np.ndarray, probabilities: np.ndarray, *, min_expected: float = 5.0) -> float:
    """Pearson χ² p-value of draws ``outcomes`` (ints in ``[0, k)``) against the law ``probabilities`` (length k).

    Outcomes whose expected count is below ``min_expected`` are pooled into one bin (OpenDP's rule: every
    expected count ≥ 5), so the χ² approximation holds; an outcome of probability 0 that occurs at all gives
    p = 0 (the law says it cannot happen).
    """
    probabilities = np.asarray(probabilities, dtype=np.float64)
    counts = np.bincount(np.asarray(outcomes, dtype=np.int64), minlength=probabilities.size)
    if counts.size > probabilities.size or (counts[probabilities == 0] > 0).any():
        return 0.0
    n = counts.sum()
    expected = n * probabilities
    big = expected >= min_expected
    observed_bins = np.append(counts[big], counts[~big].sum())
    expected_bins = np.append(expected[big], expected[~big].sum())
    if expected_bins[-1] < min_expected:  # too little mass to pool on its own: merge it into the smallest bin
        smallest = int(np.argmin(expected_bins[:-1]))
        observed_bins[smallest] += observed_bins[-1]
        expected_bins[smallest] += expected_bins[-1]
        observed_bins, expected_bins = observed_bins[:-1], expected_bins[:-1]
    if observed_bins.size < 2:
        return 1.0
    stat = float((((observed_bins - expected_bins) ** 2) / expected_bins).sum())
    return _chi2_sf(stat, observed_bins.size - 1)
