"""The privacy-regression gate: the rule, a real re-run passes, a planted regression fails."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from rapt_audit.api.types import Estimate, Skip
from rapt_audit.cli import main
from rapt_audit.reporting.check import BASELINE_SCHEMA, compare_estimates, read_baseline, standard_error

ROOT = Path(__file__).resolve().parent.parent
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
    assert "passed: 2 privacy measure(s)" in out and "whitebox" in out


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
        ep = doc["attacks"]["whitebox"]["empirical_privacy"]
        for key in ("value", "ci_low", "ci_high"):
            ep[key] = max(0.0, ep[key] - 0.1)

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

    def other_cell(doc):
        doc["cell_id"] = "000000000000"

    planted = _plant(root, "othercell", other_cell)
    assert main(["check", "--baseline", str(baseline), str(planted)]) == 2
    assert "no new run matches baseline run(s) t2t eta=75 seed 0 on synthetic" in capsys.readouterr().err


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
    from rapt_audit.defenses._text import TextDefense

    monkeypatch.setattr(TextDefense, "effective_eta", lambda self, ctx: self.eta * 3)
    _, baseline = gated
    assert main(GATE_RUN + ["--out", str(tmp_path / "weak")]) == 0
    capsys.readouterr()
    assert main(["check", "--baseline", str(baseline), str(tmp_path / "weak")]) == 1
    assert "whitebox empirical_privacy fell from" in capsys.readouterr().err
