"""Tests of ``rapt_audit.mechanisms.noise``: the statistical battery, the tests of the tests, RNG hygiene, bad inputs.

Sample sizes (research notes ``dp_testing_and_auditing.md`` §5.2, re-measured on 2 cores):

* dχ, d in {1, 2, 50}: n = 20,000 (the notes' PR-CI size). At d = 50 every mutant is rejected by
  every listed catcher with a large margin (over 20 seeds: worst KS p <= 1e-48, worst |z| >= 17).
  At d = 2 the normalised-cube direction is the hard case (the notes: n ≈ 2·10⁴ needed); at
  n = 20,000 S3 rejected it in 300/300 seeds with worst p = 9e-10.
* dχ, d = 384 (MiniLM): n = 40,000, not 20,000. The Gamma shape d-1 is the hardest mutant and
  only the radius sees it; S2's z is sqrt(n/d) per unit of shape error, i.e. 7.2 ± 1 at n = 20,000
  (misses ~1% of seeds) but 10.2 ± 1 at 40,000, far enough above 4.89 that a neutral refactor of
  the RNG stream cannot flip the power test (10 seeds: worst |z| = 10.0, worst KS p = 8e-16).
* Laplace: 4,000 examples x 25 dimensions = 10⁵ draws; ±30% scale and Gaussian-for-Laplace are
  rejected with |z| in the tens, and S12's eigenvalue ratio is ~0.85 for correct noise (rank-one
  or shared noise gives ~0, threshold 0.5).

Samples are drawn once per (sampler, d) with a seed derived from the case id and only the needed
statistics are kept, so the whole file runs in a few seconds. ETA = 2 (not 1) because the
rate/scale swap is the identity at eta = 1; d = 384 (not 300) because a hard-coded shape 300 is
the correct sampler at d = 300 (asserted below).
"""

from __future__ import annotations

import functools
import math
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rapt_audit.api.errors import PrivacyParameterError
from rapt_audit.mechanisms.noise import (
    check_epsilon,
    check_eta,
    check_privacy_parameter,
    dchi_noise,
    expected_dchi_norm,
    laplace_noise,
    privatize_laplace,
    privatize_vectors,
)
from tests.battery import (
    DCHI_BATTERY,
    DCHI_CATCHERS,
    DCHI_MUTANTS,
    LAPLACE_BATTERY,
    LAPLACE_CATCHERS,
    LAPLACE_MUTANTS,
    describe_seed,
    rng_for,
    unit_vector,
)

ETA = 2.0
N_BY_D = {1: 20_000, 2: 20_000, 50: 20_000, 384: 40_000}
#: Mutants are tested at d = 50; the dimension-sensitive ones also where they are hardest.
#: (At d = 1 most mutants are meaningless: shape d-1 = 0, and every direction is a sign.)
EXTRA_MUTANT_DIMS = {"shape_d_minus_1": (384,), "cube_direction": (2,)}
LAPLACE_N, LAPLACE_D, LAPLACE_EPS = 4_000, 25, 10.0
LAPLACE_B = LAPLACE_D / LAPLACE_EPS  # L1 sensitivity of a [0, 1]^d vector is d


def _privatize_noise(n: int, d: int, eta: float, rng: np.random.Generator) -> np.ndarray:
    """The correct sampler through the public path: privatize_vectors(x) - x for a fixed x."""
    x = np.tile(np.linspace(-1.0, 1.0, d), (n, 1))
    out = privatize_vectors(x, eta, rng)
    out -= x
    return out


@functools.lru_cache(maxsize=None)
def _dchi_stats(sampler: str, d: int) -> dict[str, float]:
    case = f"dchi/{sampler}/d={d}/n={N_BY_D[d]}/eta={ETA}"
    # The public path (privatize_vectors) where it is cheap; dchi_noise itself at d = 384.
    draw = DCHI_MUTANTS.get(sampler) or (_privatize_noise if d <= 50 else dchi_noise)
    z = draw(N_BY_D[d], d, ETA, rng_for(case))
    names = [t for t, bt in DCHI_BATTERY.items() if d >= bt.min_d] if sampler == "correct" else DCHI_CATCHERS[sampler]
    u = unit_vector(d)
    return {name: DCHI_BATTERY[name].fn(z, d=d, eta=ETA, u=u) for name in names} | {"_case": case}


@functools.lru_cache(maxsize=None)
def _laplace_stats(sampler: str) -> dict[str, float]:
    case = f"laplace/{sampler}/n={LAPLACE_N}/d={LAPLACE_D}"
    rng = rng_for(case)
    if sampler == "correct":
        x = np.tile(np.linspace(0.0, 1.0, LAPLACE_D), (LAPLACE_N, 1))
        noise = privatize_laplace(x, LAPLACE_EPS, LAPLACE_D, rng) - x
        names = list(LAPLACE_BATTERY)
    else:
        noise = LAPLACE_MUTANTS[sampler]((LAPLACE_N, LAPLACE_D), LAPLACE_B, rng)
        names = LAPLACE_CATCHERS[sampler]
    return {name: LAPLACE_BATTERY[name].fn(noise, LAPLACE_B) for name in names} | {"_case": case}


# --- (a) the battery passes on the correct samplers ------------------------------------------

CORRECT_CASES = [(d, t) for d in N_BY_D for t, bt in DCHI_BATTERY.items() if d >= bt.min_d]


@pytest.mark.parametrize(("d", "test_name"), CORRECT_CASES, ids=[f"d{d}-{DCHI_BATTERY[t].code}-{t}" for d, t in CORRECT_CASES])
def test_correct_dchi_sampler_passes_battery(d: int, test_name: str) -> None:
    stats_ = _dchi_stats("correct", d)
    value = stats_[test_name]
    assert not DCHI_BATTERY[test_name].rejects(value), f"{test_name} = {value:.3g} {describe_seed(stats_['_case'])}"


@pytest.mark.parametrize("test_name", list(LAPLACE_BATTERY))
def test_privatize_laplace_passes_battery(test_name: str) -> None:
    stats_ = _laplace_stats("correct")
    value = stats_[test_name]
    assert not LAPLACE_BATTERY[test_name].rejects(value), f"{test_name} = {value:.3g} {describe_seed(stats_['_case'])}"


# --- (b) the tests of the tests: every mutant is rejected by the tests documented to catch it ----

MUTANT_CASES = [
    (m, d, t) for m in DCHI_MUTANTS for d in (50, *EXTRA_MUTANT_DIMS.get(m, ())) for t in DCHI_CATCHERS[m]
]


@pytest.mark.parametrize(("mutant", "d", "test_name"), MUTANT_CASES, ids=[f"{m}-d{d}-{t}" for m, d, t in MUTANT_CASES])
def test_battery_rejects_dchi_mutant(mutant: str, d: int, test_name: str) -> None:
    stats_ = _dchi_stats(mutant, d)
    value = stats_[test_name]
    assert DCHI_BATTERY[test_name].rejects(value), (
        f"{test_name} failed to reject mutant {mutant}: {value:.3g} {describe_seed(stats_['_case'])}"
    )


LAPLACE_MUTANT_CASES = [(m, t) for m in LAPLACE_MUTANTS for t in LAPLACE_CATCHERS[m]]


@pytest.mark.parametrize(("mutant", "test_name"), LAPLACE_MUTANT_CASES, ids=[f"{m}-{t}" for m, t in LAPLACE_MUTANT_CASES])
def test_battery_rejects_laplace_mutant(mutant: str, test_name: str) -> None:
    stats_ = _laplace_stats(mutant)
    value = stats_[test_name]
    assert LAPLACE_BATTERY[test_name].rejects(value), (
        f"{test_name} failed to reject mutant {mutant}: {value:.3g} {describe_seed(stats_['_case'])}"
    )


def test_every_mutant_has_catchers_from_the_battery() -> None:
    assert set(DCHI_CATCHERS) == set(DCHI_MUTANTS)
    assert set(LAPLACE_CATCHERS) == set(LAPLACE_MUTANTS)
    for catchers, battery in ((DCHI_CATCHERS, DCHI_BATTERY), (LAPLACE_CATCHERS, LAPLACE_BATTERY)):
        for mutant, names in catchers.items():
            assert names and set(names) <= set(battery), mutant


@pytest.mark.parametrize("mutant", list(DCHI_MUTANTS))
def test_dchi_mutant_differs_from_correct_sampler(mutant: str) -> None:
    # Same seed, same signature: a mutant that silently equals the correct sampler would make its
    # rejection test vacuous (the Tumult KS lesson).
    correct = dchi_noise(256, 50, ETA, np.random.default_rng(5))
    bad = DCHI_MUTANTS[mutant](256, 50, ETA, np.random.default_rng(5))
    assert bad.shape == correct.shape and bad.dtype == correct.dtype and np.isfinite(bad).all()
    assert not np.allclose(bad, correct)


@pytest.mark.parametrize("mutant", list(LAPLACE_MUTANTS))
def test_laplace_mutant_differs_from_correct_sampler(mutant: str) -> None:
    correct = laplace_noise((64, 8), 1.5, np.random.default_rng(5))
    bad = LAPLACE_MUTANTS[mutant]((64, 8), 1.5, np.random.default_rng(5))
    assert bad.shape == correct.shape and not np.allclose(bad, correct)


def test_shape_300_mutant_is_invisible_at_d_300() -> None:
    # Why the battery runs at d = 384: at d = 300 MLDP's hard-coded shape is the correct one.
    a = dchi_noise(64, 300, ETA, np.random.default_rng(3))
    b = DCHI_MUTANTS["shape_300"](64, 300, ETA, np.random.default_rng(3))
    np.testing.assert_allclose(a, b, rtol=1e-12)


# --- (c) S13: determinism and RNG hygiene ------------------------------------------------------

X_SMALL = np.random.default_rng(0).standard_normal((40, 12))
DRAWS = {
    "dchi_noise": lambda rng: dchi_noise(40, 12, 0.5, rng),
    "dchi_noise_f32": lambda rng: dchi_noise(40, 12, 0.5, rng, dtype=np.float32),
    "privatize_vectors": lambda rng: privatize_vectors(X_SMALL, 0.5, rng),
    "laplace_noise": lambda rng: laplace_noise((40, 12), 0.7, rng),
    "privatize_laplace": lambda rng: privatize_laplace(X_SMALL, 1.0, 12.0, rng),
}


@pytest.mark.parametrize("draw", list(DRAWS))
def test_same_seed_same_bytes_different_seed_differs(draw: str) -> None:
    f = DRAWS[draw]
    assert f(np.random.default_rng(11)).tobytes() == f(np.random.default_rng(11)).tobytes()
    assert f(np.random.default_rng(11)).tobytes() != f(np.random.default_rng(12)).tobytes()


@pytest.mark.parametrize("draw", list(DRAWS))
def test_global_numpy_random_state_is_neither_used_nor_changed(draw: str) -> None:
    f = DRAWS[draw]
    np.random.seed(1)
    before = np.random.get_state()
    first = f(np.random.default_rng(4))
    after = np.random.get_state()
    assert before[0] == after[0] and np.array_equal(before[1], after[1]) and before[2:] == after[2:]
    np.random.seed(2)
    assert f(np.random.default_rng(4)).tobytes() == first.tobytes()


def test_dchi_stream_order_is_as_documented() -> None:
    # Normals (row-major) first, then the n radii; a refactor that reorders the draws must update
    # the docstring, since chunked callers rely on it to reproduce releases.
    n, d, eta = 7, 5, 0.8
    rng = np.random.default_rng(21)
    g = rng.standard_normal((n, d))
    radius = rng.gamma(d, 1.0 / eta, size=n)
    expected = g / np.linalg.norm(g, axis=1, keepdims=True) * radius[:, None]
    np.testing.assert_allclose(dchi_noise(n, d, eta, np.random.default_rng(21)), expected, rtol=1e-12)


def test_no_duplicate_noise_rows_and_float32_is_kept() -> None:
    z = dchi_noise(2_000, 3, 1.0, np.random.default_rng(8), dtype=np.float32)
    assert z.dtype == np.float32 and np.unique(z, axis=0).shape[0] == z.shape[0]
    x32 = X_SMALL.astype(np.float32)
    assert privatize_vectors(x32, 3.0, np.random.default_rng(1)).dtype == np.float32


def test_rng_must_be_a_generator() -> None:
    for bad in (None, 3, np.random.RandomState(0)):
        with pytest.raises(TypeError, match="numpy.random.Generator"):
            dchi_noise(2, 3, 1.0, bad)


# --- (d) the bad-input contract (research notes §7.3) ------------------------------------------

BAD_VALUES = [
    (math.nan, PrivacyParameterError, "but is nan."),
    (-math.inf, PrivacyParameterError, "but is -inf."),
    (0, PrivacyParameterError, "but is 0.0."),
    (-1, PrivacyParameterError, "but is -1.0."),
    (1e-310, PrivacyParameterError, "but is 1e-310"),
    (True, TypeError, "but is True"),
    ("1", TypeError, "but is '1'"),
    (1 + 2j, TypeError, "but is (1+2j)"),
    (np.array([1, 2]), TypeError, "but is array([1, 2])"),
]
INF_BAD = [(math.inf, PrivacyParameterError, "but is inf.")]
SETTERS = {  # name -> (call with the bad value, whether inf is valid)
    "eta": (check_eta, True),
    "epsilon": (check_epsilon, True),
    "eta@dchi_noise": (lambda v: dchi_noise(3, 4, v, np.random.default_rng(0)), True),
    "eta@privatize_vectors": (lambda v: privatize_vectors(X_SMALL, v, np.random.default_rng(0)), True),
    "epsilon@privatize_laplace": (lambda v: privatize_laplace(X_SMALL, v, 1.0, np.random.default_rng(0)), True),
    "sensitivity@privatize_laplace": (lambda v: privatize_laplace(X_SMALL, 1.0, v, np.random.default_rng(0)), False),
    "scale@laplace_noise": (lambda v: laplace_noise(3, v, np.random.default_rng(0)), False),
    "clip_norm": (lambda v: check_privacy_parameter("clip_norm", v, allow_inf=False), False),
}
BAD_CASES = [
    (setter, value, exc, tail)
    for setter, (_, allow_inf) in SETTERS.items()
    for value, exc, tail in BAD_VALUES + ([] if allow_inf else INF_BAD)
]


@pytest.mark.parametrize(("setter", "value", "exc", "tail"), BAD_CASES, ids=[f"{s}-{v!r}" for s, v, _, _ in BAD_CASES])
def test_bad_privacy_parameters_are_rejected_with_a_precise_message(setter, value, exc, tail) -> None:
    name = setter.split("@")[0]
    call, allow_inf = SETTERS[setter]
    valid = "finite and positive" + (" (or inf" if allow_inf else "")
    with pytest.raises(exc, match=rf"^{re.escape(name)} must be .*{re.escape(valid)}.*{re.escape(tail)}"):
        call(value)


def test_privacy_parameter_error_is_a_value_error() -> None:
    assert issubclass(PrivacyParameterError, ValueError)


@pytest.mark.parametrize("value", [2, 2.0, np.float32(2.0), np.int64(2), np.array(2.0), np.array([2.0])])
def test_numpy_scalars_and_one_element_arrays_are_accepted(value) -> None:
    assert check_eta(value) == 2.0 and type(check_eta(value)) is float


def test_inf_means_no_privacy() -> None:
    assert check_eta(math.inf) == math.inf and check_epsilon(np.inf) == math.inf
    assert not dchi_noise(5, 3, math.inf, np.random.default_rng(0)).any()
    out = privatize_vectors(X_SMALL, math.inf, np.random.default_rng(0))
    assert np.array_equal(out, X_SMALL) and out is not X_SMALL
    assert np.array_equal(privatize_laplace(X_SMALL, math.inf, 1.0, np.random.default_rng(0)), X_SMALL)
    assert expected_dchi_norm(384, math.inf) == 0.0 and expected_dchi_norm(384, 2.0) == 192.0


@pytest.mark.parametrize(
    "x",
    [
        np.array([[0.0, np.nan]]),
        np.array([[0.0, np.inf]]),
        np.array([[0.0, -np.inf]]),
        np.zeros(3),
        np.zeros((2, 3, 4)),
        np.zeros((2, 3), dtype=np.int64),
        np.zeros((2, 0)),
    ],
    ids=["nan", "inf", "-inf", "1-d", "3-d", "int", "d=0"],
)
def test_privatize_rejects_non_finite_or_malformed_input(x) -> None:
    with pytest.raises(ValueError, match="x must be"):
        privatize_vectors(x, 1.0, np.random.default_rng(0))
    with pytest.raises(ValueError, match="x must be"):
        privatize_laplace(x, 1.0, 1.0, np.random.default_rng(0))


def test_overflowing_noise_is_refused_not_decoded() -> None:
    # argmin over all-NaN distances returns 0: a non-finite noisy vector would decode to word #0.
    assert np.argmin(np.array([np.nan, np.nan, np.nan])) == 0
    with pytest.raises(PrivacyParameterError, match="d/eta overflows"):
        dchi_noise(1, 384, 1e-307, np.random.default_rng(0))
    with pytest.raises(PrivacyParameterError, match="overflows float32"):
        privatize_vectors(X_SMALL.astype(np.float32), 1e-38, np.random.default_rng(0))
    with pytest.raises(ValueError, match="not finite"):
        privatize_vectors(np.full((20, 50), 1.79e308), 50 / 1e307, np.random.default_rng(0))
    with pytest.raises(PrivacyParameterError, match="sensitivity/epsilon must be finite"):
        privatize_laplace(X_SMALL, 1e-300, 1e300, np.random.default_rng(0))


def test_bad_counts_and_dtypes() -> None:
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="d must be an int >= 1"):
        dchi_noise(3, 0, 1.0, rng)
    with pytest.raises(TypeError, match="n must be an int"):
        dchi_noise(True, 3, 1.0, rng)
    with pytest.raises(TypeError, match="dtype must be float32 or float64"):
        dchi_noise(3, 3, 1.0, rng, dtype=np.int32)
    assert dchi_noise(0, 3, 1.0, rng).shape == (0, 3)


# --- (f) properties ---------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(
    eta=st.floats(min_value=1e-3, max_value=1e12),
    d=st.integers(1, 40),
    n=st.integers(0, 12),
    seed=st.integers(0, 2**32 - 1),
    dtype=st.sampled_from([np.float32, np.float64]),
)
def test_privatize_vectors_is_finite_shape_preserving_and_seeded(eta, d, n, seed, dtype) -> None:
    x = np.random.default_rng(seed).standard_normal((n, d)).astype(dtype)
    out = privatize_vectors(x, eta, np.random.default_rng(seed))
    assert out.shape == x.shape and out.dtype == x.dtype and np.isfinite(out).all()
    assert out.tobytes() == privatize_vectors(x, eta, np.random.default_rng(seed)).tobytes()
    # Gamma(d, 1/eta) > 60 d/eta has probability < e^-50: the noise is never wildly off its scale.
    noise = np.linalg.norm(out.astype(np.float64) - x, axis=1)
    assert (noise <= 60 * expected_dchi_norm(d, eta) + 1e-3 * np.abs(x).max(initial=0.0)).all()


@settings(max_examples=200, deadline=None)
@given(value=st.floats(allow_nan=True, allow_infinity=True), allow_inf=st.booleans())
def test_check_privacy_parameter_accepts_exactly_the_valid_range(value, allow_inf) -> None:
    valid = value > 0 and (math.isinf(value) and allow_inf or math.isfinite(value) and math.isfinite(1 / value))
    if valid:
        assert check_privacy_parameter("p", value, allow_inf=allow_inf) == value
    else:
        with pytest.raises(PrivacyParameterError, match=r"^p must be finite and positive"):
            check_privacy_parameter("p", value, allow_inf=allow_inf)
