"""A defense's worst case over its inversion attacks, inside each bootstrap resample (issue #39, item 4)."""

from __future__ import annotations

import numpy as np
import pytest

from rapt_audit.api.errors import UsageError
from rapt_audit.api.plugins import ATTACKS, WORST_CASE
from rapt_audit.api.types import AttackResult, Estimate, PerRecord, Skip
from rapt_audit.scoring.worst_case import worst_case

#: Split sizes for runs whose subject is what is recorded and reported, not the numbers.
TINY_SPLITS = {"victim_train": 60, "victim_test": 40, "attacker_train": 60, "attacker_valid": 30}

N = 400


def content(num: np.ndarray, den: np.ndarray) -> AttackResult:
    """An attack result whose content privacy is Σ num / Σ den with those per-record parts."""
    value = float(num.sum() / den.sum())
    estimate = Estimate(value, value, value, len(num), "paired-bootstrap-percentile",
                        per_record=PerRecord(tuple(num), tuple(den)))
    return AttackResult(estimate, {"content_privacy": estimate}, {})


def clipped() -> AttackResult:
    """An attack no better than the prior: content privacy clipped at 1, no per-record parts kept."""
    estimate = Estimate(1.0, 1.0, 1.0, N, "paired-bootstrap-percentile")
    return AttackResult(estimate, {"content_privacy": estimate}, {})


def two_attacks(shift: float, seed: int = 0) -> dict[str, AttackResult]:
    """Attacks ``a`` and ``b``: b's per-record outcomes are a's on shuffled records (the same point value, other
    records), plus ``shift`` of privacy."""
    rng = np.random.default_rng(seed)
    den = rng.integers(1, 6, size=N).astype(float)
    num = den * rng.uniform(0.0, 0.6, size=N)
    order = rng.permutation(N)
    return {"a": content(num, den), "b": content(num[order] + shift * den[order], den[order])}


def everyone(name: str) -> bool:
    return True


def test_the_interval_is_of_the_resampled_minimum_not_the_minimum_of_intervals():
    # Two attacks of the same strength on different records: on each resample one or the other is lower,
    # so the minimum's interval lies below both attacks' own (read alone, each claims more privacy).
    outcomes = two_attacks(shift=0.0)
    worst = worst_case(outcomes, reads_release=everyone, rng=np.random.default_rng(1))
    alone = {n: worst_case({n: o}, reads_release=everyone, rng=np.random.default_rng(1)) for n, o in outcomes.items()}
    point = min(o.metrics["content_privacy"].value for o in outcomes.values())
    assert worst.empirical_privacy.value == pytest.approx(point)
    assert worst.empirical_privacy.ci_high < min(a.empirical_privacy.ci_high for a in alone.values())
    shares = worst.details["lowest_share"]
    assert set(shares) == {"a", "b"} and sum(shares.values()) == pytest.approx(1.0, abs=1e-3)
    assert min(shares.values()) > 0.1, shares  # neither is lowest everywhere
    assert worst.metrics["worst_case_privacy"] is worst.empirical_privacy


def test_a_clearly_stronger_attack_is_named_and_held_attacks_never_win():
    outcomes = {**two_attacks(shift=0.2), "prior_like": clipped()}
    worst = worst_case(outcomes, reads_release=everyone, rng=np.random.default_rng(2))
    assert worst.details["strongest_attack"] == "a" and worst.details["lowest_share"]["a"] > 0.99
    assert worst.details["held_at_point"] == ["prior_like"] and "prior_like" not in worst.details["lowest_share"]
    everything_clipped = worst_case({"x": clipped(), "y": clipped()}, reads_release=everyone,
                                    rng=np.random.default_rng(3))
    assert everything_clipped.empirical_privacy.value == 1.0 == everything_clipped.empirical_privacy.ci_low


def test_only_attacks_that_read_the_release_and_report_content_privacy_count():
    outcomes = two_attacks(shift=0.0)
    mse = Estimate(0.3, 0.2, 0.4, N, "bootstrap-percentile")
    outcomes.update({"estimator": AttackResult(mse, {"reconstruction_mse": mse}, {}), "skipped": Skip("no"),
                     WORST_CASE: outcomes["a"]})
    worst = worst_case(outcomes, reads_release=lambda name: name != "b", rng=np.random.default_rng(4))
    assert worst.details["over"] == ["a"]
    assert worst_case({"skipped": Skip("no")}, reads_release=everyone, rng=np.random.default_rng(4)) is None


def test_no_attack_plugin_can_take_the_reserved_name():
    with pytest.raises(UsageError, match="reserved"):
        ATTACKS.add(WORST_CASE, type("Impostor", (), {}))


def test_a_run_reports_the_worst_case_over_the_attacks_that_read_its_release(warm_cache, monkeypatch):
    from rapt_audit.pipeline.config import RunConfig
    from rapt_audit.pipeline.results import RunResult
    from rapt_audit.pipeline.runner import compute

    monkeypatch.setenv("RAPT_AUDIT_CACHE", str(warm_cache))
    result = compute(RunConfig(defense="t2t", attacks="whitebox,random_guess", profile="smoke", dataset="synthetic",
                               defense_args={"eta": 100}, data_args=TINY_SPLITS))
    worst = result.attacks[WORST_CASE]
    assert worst.details["over"] == ["whitebox"]  # random_guess ignores the release
    assert worst.empirical_privacy.value == result.attacks["whitebox"].metrics["content_privacy"].value
    assert "derived" in result.env["threat_models"][WORST_CASE]["note"]
    again = RunResult.from_dict(result.to_dict())  # it survives the result file
    assert again.attacks[WORST_CASE].empirical_privacy == worst.empirical_privacy
