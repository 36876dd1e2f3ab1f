"""The papers' claims judged on stored results: each status reached, the margins, paired intervals, the CLI."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import numpy as np
import pytest

from rapt_audit.api.types import AttackResult, Estimate, PerRecord, Skip
from rapt_audit.cli.main import main
from rapt_audit.pipeline.result_schema import validate_result_document
from rapt_audit.pipeline.results import RunResult
from rapt_audit.reporting import claims
from rapt_audit.reporting.collect import Loaded
from rapt_audit.reporting.summary import group_results
from rapt_audit.scoring.classification import accuracy_estimate
from tests.result_factory import fake_result, write_sweep


def _groups(*results):  # noqa: ANN002, ANN202
    return group_results([Loaded(path=None, result=r) for r in results])  # type: ignore[arg-type]


def _rapt(eta: float, accuracy: float, *, reconstruction: bool, **kw: object):  # noqa: ANN202
    result = fake_result(defense="rapt", eta=eta, accuracy=accuracy, **kw)
    result.defense["params"]["reconstruction"] = reconstruction
    result.config["defense_args"]["reconstruction"] = str(reconstruction).lower()
    return replace(result, cell_id=f"{result.cell_id}-{reconstruction}")


def test_privacy_rising_as_eta_falls_is_supported_and_a_reversal_refutes_it():
    steps = {math.inf: 0.1, 100: 0.3, 50: 0.5, 25: 0.7}
    rising = [fake_result(eta=e, privacy={"whitebox": p, "random_guess": 0.95}) for e, p in steps.items()]
    verdict = claims.privacy_rises(_groups(*rising))
    # random_guess (a baseline, the same at every η) is left out; whitebox rises at every step
    assert verdict.status == "supported" and len(verdict.differences) == 3
    assert all("whitebox" in d.label for d in verdict.differences)
    reversed_step = {**steps, 50: 0.2}
    falling = [fake_result(eta=e, privacy={"whitebox": p}) for e, p in reversed_step.items()]
    assert claims.privacy_rises(_groups(*falling)).status == "not supported"
    flat = [fake_result(eta=e, privacy={"whitebox": 0.3 + 0.005 * i}) for i, e in enumerate(steps)]
    assert claims.privacy_rises(_groups(*flat)).status == "inconclusive"


@pytest.mark.parametrize(("gap", "status"), [(0.0, "supported"), (0.2, "not supported"), (0.04, "inconclusive")])
def test_equal_privacy_is_judged_against_the_margin(gap: float, status: str):
    results = [fake_result(defense=d, eta=e, privacy={"whitebox": 0.4 + (gap if d == "pct2t" else 0)})
               for d in ("t2t", "pct2t") for e in (50, 100)]
    verdict = claims.equally_private(_groups(*results), **claims.PAPER_CLAIMS["equally_private"])
    assert verdict.status == status and len(verdict.differences) == 2
    assert f"±{claims.EQUIVALENCE_MARGIN:g}" in verdict.claim


def test_utility_claims_compare_finite_eta_only_and_non_inferiority_has_a_margin():
    results = [fake_result(defense="t2t", eta=e, accuracy=0.6) for e in (50, 100, math.inf)]
    results += [fake_result(defense="pct2t", eta=e, accuracy=0.8) for e in (50, 100, math.inf)]
    higher = claims.utility_higher(_groups(*results), "pct2t", "t2t")
    assert higher.status == "supported" and len(higher.differences) == 2  # η = ∞ is no privacy: not compared
    assert claims.utility_higher(_groups(*results), "t2t", "pct2t").status == "not supported"
    close = [fake_result(defense="pct2t", eta=50, accuracy=0.8, half=0.001),
             fake_result(defense="rapt", eta=50, accuracy=0.795, half=0.001)]
    # Five thousandths lower, significantly, but within the one-point margin: not lower.
    assert claims.utility_not_lower(_groups(*close), "rapt", "pct2t").status == "supported"
    worse = [close[0], fake_result(defense="rapt", eta=50, accuracy=0.7, half=0.001)]
    assert claims.utility_not_lower(_groups(*worse), "rapt", "pct2t").status == "not supported"


def test_reconstruction_and_pareto_claims_and_what_cannot_be_evaluated():
    rows = [_rapt(75, 0.82, reconstruction=True), _rapt(75, 0.70, reconstruction=False)]
    assert claims.reconstruction_helps(_groups(*rows), **claims.PAPER_CLAIMS["reconstruction_helps"]).status == "supported"
    assert claims.reconstruction_helps(_groups(rows[0]), **claims.PAPER_CLAIMS["reconstruction_helps"]).status == "not evaluable"
    rapt = fake_result(defense="rapt", eta=75, accuracy=0.8, privacy={"whitebox": 0.5})
    beaten = fake_result(defense="cape", eta=None, accuracy=0.7, privacy={"whitebox": 0.4})
    better = fake_result(defense="dpnr", eta=None, accuracy=0.9, privacy={"whitebox": 0.4})
    assert claims.pareto_dominates(_groups(rapt, beaten), **claims.PAPER_CLAIMS["pareto_dominates"]).status == "supported"
    assert claims.pareto_dominates(_groups(rapt, beaten, better), **claims.PAPER_CLAIMS["pareto_dominates"]).status == "not supported"
    assert claims.pareto_dominates(_groups(rapt), **claims.PAPER_CLAIMS["pareto_dominates"]).status == "not evaluable"


def test_single_runs_with_per_record_outcomes_are_compared_paired():
    def with_records(result, hits):  # noqa: ANN001, ANN202
        outcome = result.attacks["whitebox"]
        per_record = PerRecord(tuple(float(h) for h in hits), (1.0,) * len(hits))
        value = sum(hits) / len(hits)
        est = replace(outcome.empirical_privacy, value=value, per_record=per_record)
        return replace(result, attacks={"whitebox": AttackResult(est, outcome.metrics, outcome.details)})

    hits = [1, 0] * 50
    a = with_records(fake_result(defense="t2t", eta=50, privacy={"whitebox": 0.5}), hits)
    b = with_records(fake_result(defense="pct2t", eta=50, privacy={"whitebox": 0.5}), hits)
    (d,) = claims.equally_private(_groups(a, b), **claims.PAPER_CLAIMS["equally_private"]).differences
    assert d.method == "paired" and d.value == d.low == d.high == 0.0  # the same records, the same outcomes
    c = with_records(fake_result(defense="pct2t", eta=50, privacy={"whitebox": 0.5}), [1 - h for h in hits])
    (d,) = claims.equally_private(_groups(a, c), **claims.PAPER_CLAIMS["equally_private"]).differences
    assert d.method == "paired" and d.value == 0.0 and d.high - d.low > 0.1  # same mean, other records


def _scored(defense: str, correct: np.ndarray, *, seed: int = 0) -> dict:
    """A result document whose accuracy is scored on 400 records as the runner scores it."""
    truth = np.zeros(len(correct), int)
    accuracy = accuracy_estimate(np.where(correct, truth, 1), truth, rng=np.random.default_rng(seed))
    result = fake_result(defense=defense, eta=50, accuracy=accuracy.value, seed=seed)
    return replace(result, utility={"accuracy": accuracy}).to_dict()


def test_utility_of_single_runs_over_the_same_records_is_compared_paired():
    # PCT2T gets right every record T2T gets right and 30 more: outcomes positively correlated.
    t2t = np.arange(400) < 240
    pct2t = np.arange(400) < 270
    docs = [_scored("t2t", t2t), _scored("pct2t", pct2t)]
    for doc in docs:
        validate_result_document(doc, "result.json")
    (paired,) = claims.utility_higher(_groups(*map(RunResult.from_dict, docs)), "pct2t", "t2t").differences
    assert paired.method == "paired" and "(paired)" in paired.text()
    assert paired.value == pytest.approx(30 / 400) and paired.low > 0
    # The same files as written before accuracy kept its outcomes: they load and compare unpaired.
    for doc in docs:
        del doc["utility"]["accuracy"]["per_record"]
        validate_result_document(doc, "old/result.json")
    (unpaired,) = claims.utility_higher(_groups(*map(RunResult.from_dict, docs)), "pct2t", "t2t").differences
    assert unpaired.method == "unpaired" and unpaired.value == paired.value
    # Only the 30 records whose outcome changed move the paired difference: a much narrower interval.
    assert paired.high - paired.low < 0.6 * (unpaired.high - unpaired.low)


def test_runs_of_other_seeds_hold_other_records_and_are_not_paired():
    correct = np.arange(400) < 240
    docs = [_scored("t2t", correct, seed=0), _scored("pct2t", correct, seed=1)]
    (d,) = claims.utility_higher(_groups(*map(RunResult.from_dict, docs)), "pct2t", "t2t").differences
    assert d.method == "unpaired"  # same lengths, but seed 1 split other victim-test records


def test_cli_prints_markdown_and_json(tmp_path, capsys):
    root = write_sweep(tmp_path / "grid", {
        f"{d}-{e}": fake_result(defense=d, eta=e, accuracy=0.6 if d == "t2t" else 0.8,
                                privacy={"whitebox": 0.9 - e / 200})
        for d in ("t2t", "pct2t") for e in (25, 75)})
    assert main(["claims", str(root)]) == 0
    text = capsys.readouterr().out
    assert "| PCT2T > T2T in utility | **supported** |" in text and "η=25\\: pct2t − t2t" in text  # a ':' escaped
    assert main(["claims", str(root), "--format", "json"]) == 0
    verdicts = json.loads(capsys.readouterr().out)
    assert [v["status"] for v in verdicts][:3] == ["supported", "supported", "supported"]
    assert {v["status"] for v in verdicts} <= set(claims.STATUSES)
    assert main(["claims", str(tmp_path / "missing")]) == 2


def _inversions(result, privacy: dict[str, np.ndarray]):  # noqa: ANN001, ANN202
    """``result`` with each named attack's content privacy kept per record (1 = the record's content withheld)."""
    attacks = dict(result.attacks)
    for name, per_record in privacy.items():
        value = float(per_record.mean())
        est = Estimate(value, value, value, len(per_record), "bootstrap",
                       per_record=PerRecord(tuple(map(float, per_record)), (1.0,) * len(per_record)))
        attacks[name] = AttackResult(est, {"content_privacy": est}, {"records": len(per_record)})
    return replace(result, attacks=attacks)


def _attack_pair(strong_share: float, weak_share: float, *, etas=(50, 100, math.inf)):  # noqa: ANN001, ANN202
    """Three seeds of a t2t grid where each attack withholds ``share`` of 300 records (others at each seed)."""
    out = []
    for seed in (0, 1, 2):
        rng = np.random.default_rng(seed)
        for eta in etas:
            strong = (rng.random(300) < strong_share).astype(float)
            weak = (rng.random(300) < weak_share).astype(float)
            out.append(_inversions(fake_result(eta=eta, seed=seed, privacy={}),
                                   {"bayes_inversion": strong, "mlp_inversion": weak}))
    return out


def test_an_attack_is_as_strong_as_another_where_its_content_privacy_is_not_higher_paired_per_setting():
    stronger = claims.attack_as_strong(_groups(*_attack_pair(0.3, 0.6)))
    # one comparison per private setting, all three seeds paired; η = ∞ releases the text and is left out
    assert stronger.status == "supported" and [d.label.split(",")[0] for d in stronger.differences] == [
        "t2t η=50", "t2t η=100"]
    assert all(d.method == "paired" and d.high < 0 for d in stronger.differences)
    weaker = claims.attack_as_strong(_groups(*_attack_pair(0.6, 0.3)))
    assert weaker.status == "not supported" and all(d.low > 0 for d in weaker.differences)
    # the same strength, measured on 300 records: neither shown nor refuted
    assert claims.attack_as_strong(_groups(*_attack_pair(0.45, 0.45))).status == "inconclusive"
    # an attack that reports no content privacy (a skip, an older result) gives nothing to compare
    skipped = [replace(r, attacks={**r.attacks, "mlp_inversion": Skip("needs a release of kind texts")})
               for r in _attack_pair(0.3, 0.6)]
    assert claims.attack_as_strong(_groups(*skipped)).status == "not evaluable"
    assert claims.evaluate(_groups(*_attack_pair(0.3, 0.6)))[-1].claim == stronger.claim
