"""Exact binomial bounds and the empirical lower bound on a privacy loss built from them.

The audit primitive of DP-Sniper, Delta-Siege and jax_privacy's auditing:
for an output event S chosen on other samples, ``k1`` of ``n1`` releases of input x and ``k0`` of
``n0`` releases of x' fall in S. With one-sided Clopper–Pearson bounds at ``alpha/2`` each,

    ε_LB = ln CP_lower(k1, n1) − ln CP_upper(k0, n0)

is, with probability at least ``1 − alpha``, at most ``ln(P[M(x)∈S] / P[M(x')∈S])`` and therefore at
most the true privacy loss of the pair. A mechanism whose ε_LB exceeds its claim is broken.
"""

from __future__ import annotations

import math

from rapt_audit.api.errors import UsageError

__all__ = ["check_alpha", "clopper_pearson_lower", "clopper_pearson_upper", "epsilon_ceiling",
           "epsilon_lower_bound"]


def check_alpha(alpha: float) -> float:
    """``alpha`` if it lies in (0, 1), else a :class:`UsageError` naming it."""
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0.0 < float(alpha) < 1.0:
        raise UsageError(f"alpha must lie strictly between 0 and 1 (a confidence of 1 - alpha), got {alpha!r}")
    return float(alpha)


def _check_counts(k: int, n: int) -> None:
    if not (isinstance(k, int) and isinstance(n, int)) or n < 1 or not 0 <= k <= n:
        raise ValueError(f"counts must satisfy 0 <= k <= n and n >= 1, got k={k!r}, n={n!r}")


def clopper_pearson_lower(k: int, n: int, alpha: float) -> float:
    """One-sided exact lower bound on a binomial probability: P[p < bound] <= ``alpha``."""
    from scipy.stats import beta  # lazy (scipy)

    _check_counts(k, n)
    return 0.0 if k == 0 else float(beta.ppf(alpha, k, n - k + 1))


def clopper_pearson_upper(k: int, n: int, alpha: float) -> float:
    """One-sided exact upper bound on a binomial probability: P[p > bound] <= ``alpha``."""
    from scipy.stats import beta  # lazy (scipy)

    _check_counts(k, n)
    return 1.0 if k == n else float(beta.ppf(1.0 - alpha, k + 1, n - k))


def epsilon_lower_bound(k1: int, n1: int, k0: int, n0: int, *, alpha: float) -> float:
    """``max(0, ln CP_lower(k1, n1) − ln CP_upper(k0, n0))`` with each bound at ``alpha / 2``.

    Valid at confidence ``1 − alpha`` for an event chosen independently of these counts.
    """
    check_alpha(alpha)
    low = clopper_pearson_lower(int(k1), int(n1), alpha / 2)
    if low <= 0.0:
        return 0.0
    high = clopper_pearson_upper(int(k0), int(n0), alpha / 2)
    return max(0.0, math.log(low) - math.log(high))


def epsilon_ceiling(n: int, alpha: float) -> float:
    """The largest ε_LB that ``n`` evaluation samples per input can give (``k1 = n``, ``k0 = 0``).

    About ``ln(n / ln(2 / alpha))``: a claim above it cannot be falsified with ``n`` samples.
    """
    return epsilon_lower_bound(n, n, 0, n, alpha=alpha)
