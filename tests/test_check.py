"""The privacy-regression gate: the rule, a real re-run passes, a planted regression fails."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from rapt_audit.api.types import Estimate, PerRecord, Skip
from rapt_audit.cli import main
from rapt_audit.reporting.check import BASELINE_SCHEMA, compare_measure, gate, read_baseline
from rapt_audit.scoring.significance import compare_estimates, compare_paired, paired_drop, standard_error
from tests.result_factory import fake_result, write_result

ROOT = Path(__file__).resolve().parent.parent
CLEAN_SHA = "0123456789abcdef0123456789abcdef01234567"
# A tiny real audit: t2t at eta=75 on the synthetic corpus, two cheap attacks.
GATE_RUN = ["run", "--defense", "t2t", "--set", "eta=75", "--attacks", "whitebox,random_guess", "--profile", "smoke",
            "--dataset", "synthetic", "--quiet", "--set", "data.victim_train=60", "--set", "data.victim_test=40",
            "--set", "data.attacker_train=60", "--set", "data.attacker_valid=30"]


def test_rule_uses_the_noise_of_both_measurements():
    base = Estimate(0.50, 0.45, 0.55, 100, "bootstrap-percentile")  # se = 0.1 / 3.92
    assert standard_error(base) == pytest.approx(0.1 / (2 * 1.959964), rel=1e-4)
    allowed = 1.96 * (2 * standard_error(base) ** 2) ** 0.5 + 0.005  # about 0.0757
    just_inside = Estimate(0.50 - allowed + 0.002, 0.45 - allowed + 0.002, 0.55 - allowed + 0.002)
    just_outside = Estimate(0.50 - allowed - 0.002, 0.45 - allowed - 0.002, 0.55 - allowed - 0.002)
    assert compare_estimates(base, just_inside, higher_is_better=True)[0] == "ok"
    status, got = compare_estimates(base, just_outside, higher_is_better=True)
    assert status == "regressed" and got == pytest.approx(allowed, rel=1e-3)
    # Lower-is-better measures regress upward; a large rise in privacy is an improvement, not a failure.
    assert compare_estimates(base, just_outside, higher_is_better=False)[0] == "improved"
    # A zero-width interval (a deterministic measure) still gets the absolute tolerance.
    exact = Estimate(0.0, 0.0, 0.0)
    assert compare_estimates(exact, exact, higher_is_better=True)[0] == "ok"


@pytest.fixture(scope="module")
def gated(tmp_path_factory):
    """A real run, a baseline recorded from it, and a re-run of the same configuration elsewhere."""
    root = tmp_path_factory.mktemp("gate")
    with pytest.MonkeyPatch.context() as patch:  # a clean commit, whatever state the test checkout is in
        patch.setattr("rapt_audit.pipeline.results.git_sha", lambda: CLEAN_SHA)
        assert main(GATE_RUN + ["--out", str(root / "first")]) == 0
        baseline = root / "baseline.json"
        assert main(["check", "--baseline", str(baseline), "--write-baseline", str(root / "first")]) == 0
        assert main(GATE_RUN + ["--out", str(root / "rerun")]) == 0
    return root, baseline


def test_gate_passes_on_a_rerun_of_the_baseline(gated, capsys):
    root, baseline = gated
    assert json.loads(baseline.read_text())["schema"] == BASELINE_SCHEMA
    capsys.readouterr()
    assert main(["check", "--baseline", str(baseline), str(root / "rerun")]) == 0
    out = capsys.readouterr().out
    # whitebox and random_guess (headline and content privacy each), and the worst case over the attacks that
    # read the release (headline and worst_case_privacy)
    assert "passed: 6 privacy measure(s)" in out and "whitebox" in out and "worst_case" in out


def lower_privacy(ep: dict, points: float, *, seed: int = 0) -> None:
    """Plant a drop of ``points`` in a stored privacy estimate, as a weaker defense would cause it.

    Tokens the attack missed become recovered, one at a time, in seeded random records, until the
    value has fallen by ``points``; the value and interval move with the per-record parts, so the
    document stays consistent.
    """
    rng = np.random.default_rng(seed)
    num, den = np.array(ep["per_record"]["num"], float), np.array(ep["per_record"]["den"], float)
    target = round(points * den.sum())
    for _ in range(target):
        k = rng.choice(np.flatnonzero(num >= 1))
        num[k] -= 1
    shift = ep["value"] - num.sum() / den.sum()
    ep["per_record"]["num"] = num.tolist()
    for key in ("value", "ci_low", "ci_high"):
        ep[key] -= shift
    ep["value"] = num.sum() / den.sum()


def _plant(root: Path, name: str, edit) -> Path:  # noqa: ANN001
    planted = root / name
    shutil.rmtree(planted, ignore_errors=True)
    shutil.copytree(root / "rerun", planted)
    path = planted / "result.json"
    doc = json.loads(path.read_text())
    edit(doc)
    path.write_text(json.dumps(doc))
    return planted


def test_gate_fails_on_a_planted_regression(gated, capsys):
    root, baseline = gated

    def weaken(doc):
        lower_privacy(doc["attacks"]["whitebox"]["empirical_privacy"], 0.1)

    planted = _plant(root, "weaker", weaken)
    capsys.readouterr()
    assert main(["check", "--baseline", str(baseline), str(planted)]) == 1
    captured = capsys.readouterr()
    assert "REGRESSED" in captured.out and "whitebox" in captured.out
    assert "FAILED: 1 privacy measure(s)" in captured.err and "whitebox empirical_privacy fell from" in captured.err
    assert "random_guess" not in captured.err  # the untouched attack is not blamed


def test_gate_fails_when_an_attack_stops_running(gated, capsys):
    root, baseline = gated

    def skip(doc):
        doc["attacks"]["whitebox"] = {"skipped": "disabled by a refactoring"}

    planted = _plant(root, "skipped", skip)
    assert main(["check", "--baseline", str(baseline), str(planted)]) == 1
    assert "no longer measured (skipped: disabled by a refactoring)" in capsys.readouterr().err


def test_gate_refuses_incomparable_or_missing_runs(gated, capsys):
    root, baseline = gated

    def other_signature(doc):
        doc["signature"] = doc["signature"].replace("splits:60/40/60/30", "splits:61/40/60/30")

    planted = _plant(root, "othersig", other_signature)
    assert main(["check", "--baseline", str(baseline), str(planted)]) == 2
    assert "signature changed (splits: 60/40/60/30 → 61/40/60/30)" in capsys.readouterr().err
    assert main(["check", "--baseline", str(baseline), str(planted), "--allow-signature-change"]) == 0

    def other_cell(doc):  # a cell is its settings, recomputed from the stored config (not the recorded id)
        doc["config"]["seed"] = 1
        doc["cell_id"] = "000000000000"

    planted = _plant(root, "othercell", other_cell)
    # The baseline's cell was recorded by the code here: unchanged by construction, it needs no new run.
    capsys.readouterr()
    assert main(["check", "--baseline", str(baseline), str(planted)]) == 0
    assert "1 unchanged by construction (code identical)" in capsys.readouterr().out
    # Stale (another digest of its defense), it does: the error names the cell and the command that runs it.
    doc = json.loads(baseline.read_text())
    doc["results"][0]["env"]["code"]["defense"] = "0" * 16
    stale = root / "stale-baseline.json"
    stale.write_text(json.dumps(doc))
    assert main(["check", "--baseline", str(stale), str(planted)]) == 2
    err = capsys.readouterr().err
    assert "no new run matches baseline run(s) t2t eta=75 seed 0 on synthetic" in err
    assert "stale here: defense:t2t" in err and "`rapt-audit run --defense t2t --attacks whitebox,random_guess" in err


def test_the_signature_names_the_attacks_and_the_code_and_a_code_change_alone_is_compared(gated, capsys):
    root, baseline = gated
    signature = json.loads((root / "rerun" / "result.json").read_text())["signature"]
    fields = dict(part.split(":", 1) for part in signature.split("|"))
    assert fields["attacks"].startswith("random_guess,whitebox@") and len(fields["code"]) == 8

    def other_code(doc):
        doc["signature"] = doc["signature"].replace(f"code:{fields['code']}", "code:00000000")

    planted = _plant(root, "othercode", other_code)  # what the gate is for: the same protocol, other code
    assert main(["check", "--baseline", str(baseline), str(planted)]) == 0
    assert f"the code changed since the baseline (code: {fields['code']} → 00000000)" in capsys.readouterr().err


def test_a_baseline_from_a_modified_tree_is_refused_unless_asked(tmp_path, capsys):
    write_result(replace(fake_result(), env={**fake_result().env, "git_sha": CLEAN_SHA + "-dirty"}), tmp_path / "run")
    baseline = tmp_path / "b.json"
    assert main(["check", "--baseline", str(baseline), "--write-baseline", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert "uncommitted changes" in err and f"{CLEAN_SHA}-dirty" in err and not baseline.exists()
    flag = "--allow-dirty-baseline"
    assert main(["check", "--baseline", str(baseline), "--write-baseline", str(tmp_path / "run"), flag]) == 0
    assert main(["check", "--baseline", str(baseline), str(tmp_path / "run")]) == 2  # reading it refuses too
    assert "uncommitted changes" in capsys.readouterr().err
    assert main(["check", "--baseline", str(baseline), str(tmp_path / "run"), flag]) == 0


def test_gate_refuses_unreadable_inputs(gated, tmp_path, capsys):
    root, baseline = gated
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "result.json").write_text("{", encoding="utf-8")
    assert main(["check", "--baseline", str(baseline), str(root / "rerun"), str(bad)]) == 2
    assert str(bad / "result.json") in capsys.readouterr().err
    assert main(["check", "--baseline", str(tmp_path / "none.json"), str(root / "rerun")]) == 2
    assert "--write-baseline" in capsys.readouterr().err


def test_committed_ci_baseline_is_readable_and_gates_both_defenses():
    results = read_baseline(ROOT / "baselines" / "ci-smoke.json")
    assert sorted(r.defense["name"] for r in results) == ["pct2t", "t2t"]
    for r in results:
        measured = [a for a, o in r.attacks.items() if not isinstance(o, Skip)]
        assert "whitebox" in measured and len(measured) >= 2
        assert r.config["profile"] == "smoke"


def test_gate_fails_when_the_defense_really_gets_weaker(gated, tmp_path, monkeypatch, capsys):
    """Not an edited file: the same configuration run with a mechanism that adds a third of the noise."""
    from rapt_audit.defenses._dchi_text import DchiTextDefense

    monkeypatch.setattr(DchiTextDefense, "effective_eta", lambda self, ctx: self.eta * 3)
    _, baseline = gated
    assert main(GATE_RUN + ["--out", str(tmp_path / "weak")]) == 0
    capsys.readouterr()
    assert main(["check", "--baseline", str(baseline), str(tmp_path / "weak")]) == 1
    assert "whitebox empirical_privacy fell from" in capsys.readouterr().err


# ----- the paired rule ------------------------------------------------------------------------------

def _ratio(num: list[float], den: list[float]) -> Estimate:
    parts = PerRecord(tuple(num), tuple(den))
    return Estimate(parts.value, parts.value, parts.value, len(num), "test", per_record=parts)


def test_paired_drop_is_zero_on_identical_records_and_sees_a_consistent_small_drop():
    rng = np.random.default_rng(1)
    den = rng.integers(5, 15, size=100).astype(float)
    num = np.minimum(den, rng.binomial(den.astype(int), 0.5)).astype(float)
    same = _ratio(num.tolist(), den.tolist())
    assert paired_drop(same.per_record, same.per_record, higher_is_better=True) == (0.0, 0.0, 0.0)
    assert compare_paired(same, same, higher_is_better=True)[0] == "ok"
    # One token fewer in each of 12 records: a drop of about one point, far inside either interval.
    weaker = num.copy()
    weaker[rng.choice(np.flatnonzero(num >= 1), 12, replace=False)] -= 1
    drop, lower, upper = paired_drop(same.per_record, _ratio(weaker.tolist(), den.tolist()).per_record,
                                     higher_is_better=True)
    assert 0.008 < drop < 0.014 and 0.001 < lower <= drop <= upper
    assert compare_paired(same, _ratio(weaker.tolist(), den.tolist()), higher_is_better=True)[0] == "regressed"
    # For a lower-is-better measure the same change is a gain.
    assert compare_paired(same, _ratio(weaker.tolist(), den.tolist()), higher_is_better=False)[0] == "improved"
    # Records that change both ways (noise) do not fail the gate.
    mixed = num.copy()
    up, down = rng.choice(np.flatnonzero((num >= 1) & (num < den)), (2, 6), replace=False)
    mixed[up] += 1
    mixed[down] -= 1
    assert compare_paired(same, _ratio(mixed.tolist(), den.tolist()), higher_is_better=True)[0] == "ok"


def test_one_comparison_serves_the_gate_and_verify_and_refuses_fewer_records_unpaired():
    """``compare_measure`` is the comparison the gate and ``benchmark verify`` (its utility metrics) share."""
    from rapt_audit.benchmark.verify import compare_headlines

    base = Estimate(0.80, 0.75, 0.85, 100, "bootstrap-percentile")
    fewer = Estimate(0.80, 0.70, 0.90, 60, "bootstrap-percentile")  # the same value on fewer records
    same_size = Estimate(0.79, 0.74, 0.84, 100, "bootstrap-percentile")
    assert compare_measure("c", "utility", "accuracy", base, fewer, higher_is_better=True, seed_key="k").status == \
        "records"
    assert compare_measure("c", "utility", "accuracy", base, same_size, higher_is_better=True,
                           seed_key="k").status == "ok"
    # verify's utility comparison had a copy of this loop without the check: a re-run on fewer records passed.
    submitted = fake_result()
    rerun = replace(submitted, utility={"accuracy": replace(submitted.utility["accuracy"], n=40)})
    status = {c.metric: c.status for c in compare_headlines(submitted, rerun) if c.attack == "utility"}
    assert status == {"accuracy": "records"}


def _ci_baseline_runs():
    return {r.defense["name"]: r for r in read_baseline(ROOT / "baselines" / "ci-smoke.json")}


def test_a_one_point_drop_in_whitebox_recovery_at_the_ci_size_is_caught_paired_but_not_unpaired():
    """The committed CI baseline against itself with white-box privacy one point lower."""
    import copy

    from rapt_audit.pipeline.results import RunResult

    base = _ci_baseline_runs()["t2t"]
    doc = copy.deepcopy(base.to_dict())
    lower_privacy(doc["attacks"]["whitebox"]["empirical_privacy"], 0.01)
    planted = RunResult.from_dict(doc)
    comparisons, _ = gate([base], [planted])
    status = {(c.attack, c.metric): c.status for c in comparisons}
    headline = ("whitebox", "empirical_privacy")
    assert status[headline] == "regressed" and all(s == "ok" for m, s in status.items() if m != headline)
    # The same files without per-record outcomes: two independent intervals let the drop pass.
    for d in (doc, base_doc := copy.deepcopy(base.to_dict())):
        for outcome in d["attacks"].values():
            outcome.get("empirical_privacy", {}).pop("per_record", None)
    unpaired, warnings = gate([RunResult.from_dict(base_doc)], [RunResult.from_dict(doc)])
    assert {(c.attack, c.metric): c.status for c in unpaired}[headline] == "ok"
    assert any("keeps no per-record outcomes" in w for w in warnings)
    # A rerun of unchanged code gives the same per-record outcomes and passes, paired, at a drop of 0 (the
    # worst case, a minimum taken inside each resample, keeps no per-record parts: unpaired, and equal).
    rerun, _ = gate([base], [RunResult.from_dict(copy.deepcopy(base.to_dict()))])
    assert all(c.status == "ok" and c.drop == 0.0 for c in rerun)
    assert all(c.test == "paired" and c.bound == 0.0 for c in rerun if c.attack != "worst_case")


def test_a_result_with_fewer_records_than_its_baseline_fails(gated, capsys):
    root, baseline = gated

    def drop_records(doc):
        ep = doc["attacks"]["whitebox"]["empirical_privacy"]
        parts = PerRecord.from_dict(ep["per_record"])
        fewer = PerRecord(parts.num[:-5], parts.den[:-5])
        ep.update(per_record=fewer.to_dict(), value=fewer.value, ci_low=min(ep["ci_low"], fewer.value),
                  ci_high=max(ep["ci_high"], fewer.value), n=ep["n"] - 5)

    planted = _plant(root, "fewer", drop_records)
    capsys.readouterr()
    assert main(["check", "--baseline", str(baseline), str(planted)]) == 1
    captured = capsys.readouterr()
    assert "RECORDS" in captured.out and "scored 35 records, the baseline 40" in captured.err


def test_per_record_parts_that_disagree_with_the_value_are_refused(gated, capsys):
    root, baseline = gated

    def tamper(doc):
        doc["attacks"]["whitebox"]["empirical_privacy"]["value"] -= 0.05  # the parts still say otherwise
        doc["attacks"]["whitebox"]["empirical_privacy"]["ci_low"] -= 0.05

    planted = _plant(root, "tampered", tamper)
    assert main(["check", "--baseline", str(baseline), str(planted)]) == 2
    assert "disagrees with its per-record parts" in capsys.readouterr().err


def test_a_baseline_with_a_malformed_result_names_it_and_the_field(tmp_path, capsys):
    doc = json.loads((ROOT / "baselines" / "ci-smoke.json").read_text())
    doc["results"][1]["attacks"]["whitebox"]["empirical_privacy"]["n"] = "many"
    bad = tmp_path / "baseline.json"
    bad.write_text(json.dumps(doc))
    assert main(["check", "--baseline", str(bad), str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert f"{bad} results[1]" in err and "attacks.whitebox.empirical_privacy.n" in err
