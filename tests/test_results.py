"""Result files: round trip, atomic writes, schema and corruption errors; estimates and intervals."""

from __future__ import annotations

import json

import numpy as np
import pytest

from rapt_audit.api.errors import ResultError
from rapt_audit.api.types import AttackResult, Estimate, Skip
from rapt_audit.pipeline.results import SCHEMA, RunResult, read_result, write_result
from rapt_audit.scoring.stats import bootstrap_mean, wilson


def _result() -> RunResult:
    est = Estimate(0.8, 0.7, 0.9, 100, "bootstrap-percentile")
    return RunResult(signature="sig", cell_id="abc", config={"defense": "identity"}, dataset={"name": "x"},
                     defense={"name": "identity"}, utility={"accuracy": est},
                     attacks={"a": AttackResult(est.complement(), {"token_accuracy": est}), "b": Skip("needs texts")},
                     env={"seed": 0})


def test_round_trip(tmp_path):
    path = write_result(_result(), tmp_path)
    back = read_result(tmp_path)
    assert back.to_dict() == _result().to_dict()
    assert back.attacks["b"] == "needs texts"
    assert not list(tmp_path.glob(".*.tmp"))  # no temporary file left behind
    assert json.loads(path.read_text())["schema"] == SCHEMA


def test_one_skip_shape(tmp_path):
    """A skipped attack is a Skip in memory and {"skipped": reason} on disk; a bare reason reads back too."""
    path = write_result(_result(), tmp_path)
    doc = json.loads(path.read_text())
    assert doc["attacks"]["b"] == {"skipped": "needs texts"}
    assert isinstance(read_result(path).attacks["b"], Skip)
    doc["attacks"]["b"] = "needs texts"  # the older in-memory shape, should a file ever hold it
    path.write_text(json.dumps(doc))
    back = read_result(path)
    assert back.attacks["b"] == Skip("needs texts") and back.attacks["b"].reason == "needs texts"
    assert back.to_dict() == _result().to_dict()


def test_schema_and_corruption_errors(tmp_path):
    path = write_result(_result(), tmp_path)
    doc = json.loads(path.read_text())
    doc["schema"] = "rapt-audit/result/0"
    path.write_text(json.dumps(doc))
    with pytest.raises(ResultError, match="has schema 'rapt-audit/result/0'"):
        read_result(path)
    path.write_text("[1, 2")
    with pytest.raises(ResultError, match=f"{path} is corrupt"):
        read_result(path)
    with pytest.raises(ResultError, match="no result file"):
        read_result(tmp_path / "nowhere")


def test_estimate_validation():
    with pytest.raises(ValueError, match="outside its interval"):
        Estimate(0.5, 0.6, 0.7)
    flipped = Estimate(0.2, 0.1, 0.3).complement()
    assert (flipped.value, flipped.ci_low, flipped.ci_high) == pytest.approx((0.8, 0.7, 0.9))


def test_bootstrap_interval_covers_truth_at_nominal_rate():
    # 200 replications of a Bernoulli(0.3) sample of 200: the 95 % interval must cover 0.3 in
    # roughly 95 % of them (binomial band: at least 180 of 200, a 4-sigma lower limit).
    rng = np.random.default_rng(0)
    covered = 0
    for _ in range(200):
        sample = (rng.random(200) < 0.3).astype(float)
        est = bootstrap_mean(sample, rng=rng, resamples=400)
        covered += est.ci_low <= 0.3 <= est.ci_high
    assert covered >= 180


def test_weighted_bootstrap_is_a_ratio_estimator():
    est = bootstrap_mean([1.0, 0.0], weights=[3, 1], rng=np.random.default_rng(1))
    assert est.value == pytest.approx(0.75)
    with pytest.raises(ValueError, match="non-empty"):
        bootstrap_mean([], rng=np.random.default_rng(1))


def test_wilson_interval():
    est = wilson(0, 50)
    assert est.value == 0 and est.ci_low == 0 and 0.05 < est.ci_high < 0.09
    with pytest.raises(ValueError):
        wilson(5, 3)
