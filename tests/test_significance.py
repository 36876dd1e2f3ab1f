"""The one module of significance rules (issue #64): what it says, and that no other module says it again."""

from __future__ import annotations

import ast
import math
from statistics import NormalDist

import numpy as np
import pytest

from rapt_audit.api.types import Estimate
from rapt_audit.scoring import significance as sig
from rapt_audit.scoring.stats import bootstrap_mean
from tests.test_architecture import ROOT, module_files

#: Where a normal quantile may still be typed in, and why: the detectable difference's power multiplier
#: (z₀.₉₇₅ + z₀.₈₀, a sample-size calculation rather than a rule; significance imports hierarchical, so
#: hierarchical cannot import it back).
TYPED_QUANTILES_ALLOWED = {"rapt_audit.scoring.hierarchical": "POWER_80"}


def test_critical_values_come_from_the_normal_distribution():
    assert sig.critical_value(0.95) == NormalDist().inv_cdf(0.975)
    assert sig.critical_value(0.90) == NormalDist().inv_cdf(0.95)
    assert sig.one_sided_level(sig.DEFAULT_Z) == pytest.approx(0.975, abs=1e-4)  # the gate's documented 97.5 %
    wide = Estimate(0.5, 0.4, 0.6, 100, "x", 0.95)
    assert sig.standard_error(wide) == pytest.approx(0.1 / NormalDist().inv_cdf(0.975))
    # The same interval at a lower level implies a larger standard error.
    assert sig.standard_error(Estimate(0.5, 0.4, 0.6, 100, "x", 0.90)) > sig.standard_error(wide)


def test_the_unpaired_interval_is_the_gates_allowed_drop_without_its_tolerance():
    a, b = Estimate(0.6, 0.55, 0.65, 100), Estimate(0.5, 0.42, 0.58, 100)
    value, low, high = sig.unpaired_interval(a, b)
    half = sig.unpaired_half_width(a, b)
    assert value == pytest.approx(0.1) and (low, high) == pytest.approx((0.1 - half, 0.1 + half))
    assert half == pytest.approx(sig.DEFAULT_Z * math.hypot(sig.standard_error(a), sig.standard_error(b)))
    _, allowed = sig.compare_estimates(a, b, higher_is_better=True)
    assert allowed == pytest.approx(half + sig.DEFAULT_TOLERANCE)


@pytest.mark.parametrize("seeds", [1, 3, 5])
def test_a_redrawn_estimate_gives_its_interval_back(seeds: int):
    """The matched-utility fallback redraws each setting from its interval: the draws' 2.5 and 97.5 % quantiles are
    the interval's ends (a normal for one seed's record interval, a t over the seeds for a t-interval)."""
    est = Estimate(0.7, 0.64, 0.76, 50, "t-over-seeds" if seeds > 1 else "bootstrap-percentile")
    drawn = sig.redraw(est, seeds, np.random.default_rng(0), 400_000)
    low, high = np.quantile(drawn, [0.025, 0.975])
    # 400,000 draws put a 2.5 % quantile within about 0.002 of its true place (its Monte-Carlo standard error is
    # under 0.0004 here): 0.003 is several of those, far below the 0.06 half-width a wrong scale would move it by.
    assert low == pytest.approx(est.ci_low, abs=3e-3) and high == pytest.approx(est.ci_high, abs=3e-3)
    assert np.median(drawn) == pytest.approx(est.value, abs=3e-3)


def test_the_paired_rule_sees_a_drop_the_unpaired_rule_misses():
    """Two runs over the same 400 records, 12 of which now fail: paired, a regression; as two independent
    intervals, within noise. The two rules of the gate, from this one module."""
    rng = np.random.default_rng(1)
    outcomes = (rng.random(400) < 0.5).astype(float)
    worse = outcomes.copy()
    worse[np.flatnonzero(outcomes)[:12]] = 0.0
    base, new = (bootstrap_mean(x, rng=np.random.default_rng(2)) for x in (outcomes, worse))
    assert sig.compare_paired(base, new, higher_is_better=True, seed=sig.seed_of("cell|attack"))[0] == "regressed"
    assert sig.compare_estimates(base, new, higher_is_better=True)[0] == "ok"
    assert sig.seed_of("cell|attack") == sig.seed_of("cell|attack") != sig.seed_of("cell|other")


def test_no_other_module_types_in_a_normal_quantile_or_builds_a_normal_distribution():
    """``1.96`` (or 1.959964) and ``NormalDist`` appear in :mod:`rapt_audit.scoring.significance` only: the gate,
    the claims and the matched readings import their rules from it (no third copy of the unpaired rule)."""
    found = []
    for module, path in module_files().items():
        if module == "rapt_audit.scoring.significance":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        allowed = TYPED_QUANTILES_ALLOWED.get(module)
        skip = {id(n) for top in tree.body if isinstance(top, ast.Assign) and allowed
                and any(isinstance(t, ast.Name) and t.id == allowed for t in top.targets) for n in ast.walk(top)}
        for node in ast.walk(tree):
            if id(node) in skip:
                continue
            if isinstance(node, ast.Constant) and isinstance(node.value, float) and abs(node.value - 1.96) < 1e-3:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.value}")
            if isinstance(node, ast.Name) and node.id == "NormalDist":
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: NormalDist")
    assert not found, "normal quantiles outside rapt_audit/scoring/significance.py:\n" + "\n".join(found)
