"""The regression gate per component (issue #62 item 4): what a change cannot have moved is unchanged by
construction, what it can is re-run and compared. Hand-made results (milliseconds, no run)."""

from __future__ import annotations

import json
import shlex
from dataclasses import replace
from pathlib import Path

import pytest

from rapt_audit.api.components import CellCode, current_code
from rapt_audit.api.errors import ResultError
from rapt_audit.api.files import package_code_digest
from rapt_audit.api.plugins import load_builtins
from rapt_audit.api.types import AttackResult
from rapt_audit.cli import main
from rapt_audit.cli.main import build_parser
from rapt_audit.pipeline.results import RunResult
from rapt_audit.reporting.check import BASELINE_SCHEMA, run_gate
from rapt_audit.reporting.gate_cells import rerun_command, summary_line
from tests.result_factory import SIG_A, est, fake_result, write_result

ATTACKS = ["whitebox", "random_guess"]
OTHER = "0" * 16


def here(defense: str = "t2t") -> dict:
    load_builtins()
    return current_code(defense, ATTACKS).to_dict()


def cell(*, defense: str = "t2t", code: dict | None = None, legacy: str | None = None, whitebox: float = 0.3,
         random_guess: float = 0.95, worst: float | None = None) -> RunResult:
    """A result of ``defense`` on whitebox and random_guess, recording ``code`` (env.code; default: the code
    here) or, signed before issue #62, only the one digest ``legacy`` in its signature."""
    r = fake_result(defense=defense, privacy={"whitebox": whitebox, "random_guess": random_guess})
    if worst is not None:  # the worst case over the attacks, stored beside them
        r = replace(r, attacks={**r.attacks, "worst_case": AttackResult(est(worst), {"worst_case_privacy": est(worst)},
                                                                        {})})
    if legacy is not None:
        return replace(r, signature=f"{SIG_A}|code:{legacy}")
    code = here(defense) if code is None else code
    shared = CellCode.stored("", {"code": code}).shared()
    return replace(r, signature=f"{SIG_A}|code:{shared}", env={**r.env, "code": code})


def stale_attack(defense: str = "t2t", attack: str = "whitebox") -> dict:
    code = here(defense)
    return {**code, "attacks": {**code["attacks"], attack: OTHER}}


def compared(outcome) -> set[str]:  # noqa: ANN001
    return {c.attack for c in outcome.comparisons}


def test_a_cell_fresh_against_the_code_here_is_unchanged_by_construction_without_a_new_run():
    outcome = run_gate([cell()], [])
    assert outcome.comparisons == [] and not outcome.plans[0].stale
    assert summary_line(outcome.plans) == "1 baseline cell: 1 unchanged by construction (code identical), " \
                                          "0 re-run and compared"
    # Given anyway, its new run is compared as usual, every attack (here: identical, so it passes).
    again = run_gate([cell()], [cell()])
    assert compared(again) == set(ATTACKS) and all(c.status == "ok" for c in again.comparisons)
    assert "1 given anyway and compared" in summary_line(again.plans)


def test_a_stale_defense_needs_its_new_run_and_then_every_measure_is_compared():
    base = cell(code={**here(), "defense": OTHER})
    with pytest.raises(ResultError) as err:
        run_gate([base], [])
    message = str(err.value)
    assert "no new run matches baseline run(s) t2t eta=50.0 seed 0 on sst2" in message
    assert "stale here: defense:t2t" in message and "`rapt-audit run --defense t2t --attacks whitebox,random_guess" \
        in message
    outcome = run_gate([base], [cell(whitebox=0.1)])  # the defense got weaker
    assert compared(outcome) == set(ATTACKS)
    assert {c.attack: c.status for c in outcome.comparisons}["whitebox"] == "regressed"
    assert summary_line(outcome.plans) == "1 baseline cell: 0 unchanged by construction (code identical), " \
                                          "1 re-run and compared (defense:t2t)"


def test_when_one_attack_is_stale_only_its_measures_and_the_worst_case_are_compared():
    base = cell(code=stale_attack(), worst=0.3)
    with pytest.raises(ResultError, match="stale here: attack:whitebox"):
        run_gate([base], [])
    # random_guess's code is identical here: a drop in it cannot come from this change and is not compared.
    outcome = run_gate([base], [cell(random_guess=0.2, worst=0.3)])
    assert compared(outcome) == {"whitebox", "worst_case"} and all(c.status == "ok" for c in outcome.comparisons)
    plan = outcome.plans[0]
    assert plan.unchanged() == ["random_guess"] and plan.components() == ["attack:whitebox"]
    assert "in part" in summary_line(outcome.plans)
    weaker = run_gate([base], [cell(whitebox=0.1, worst=0.1)])
    assert {c.attack for c in weaker.comparisons if c.status == "regressed"} == {"whitebox", "worst_case"}
    # The signature's code (core and attacks) moved with the attack: what the gate is for, named per component.
    assert any("the code changed since the baseline (code: " in w and "stale here: attack:whitebox; compared" in w
               for w in weaker.warnings)


def test_a_legacy_cell_is_one_component_stale_when_the_package_digest_moved():
    fresh = cell(legacy=package_code_digest()[:8])
    assert run_gate([fresh], []).comparisons == []  # the package is the one it was signed by
    old = cell(legacy="a6333bc5")
    with pytest.raises(ResultError, match=r"stale here: all \(code:a6333bc5"):
        run_gate([old], [])
    outcome = run_gate([old], [cell(whitebox=0.1)])  # today's gate: every attack compared
    assert compared(outcome) == set(ATTACKS) and outcome.plans[0].components()[0].startswith("all")
    assert any("signed before per-component digests" in w for w in outcome.warnings)


def test_a_new_run_of_other_code_than_here_is_named():
    base = cell(code={**here(), "defense": OTHER})
    outcome = run_gate([base], [cell(code={**here(), "defense": "1" * 16})])
    assert any("measured by other code than this checkout's (defense:t2t)" in w for w in outcome.warnings)


def test_the_command_named_for_a_missing_cell_runs_that_cell():
    config = {**cell().config, "defense_args": {"eta": "75"}, "attack_args": {"whitebox": {"topk": "5"}},
              "data_args": {"victim_test": 40}, "out": "runs/ci-gate/defense=t2t"}
    args = build_parser().parse_args(shlex.split(rerun_command(config))[1:])
    assert (args.defense, args.attacks, args.dataset, args.profile, args.seed, args.out) == \
        ("t2t", "whitebox,random_guess", "sst2", "smoke", 0, "runs/ci-gate/defense=t2t")
    assert sorted(args.sets) == ["attacks.whitebox.topk=5", "data.victim_test=40", "eta=75"]


def test_check_prints_the_per_component_summary_first(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    baseline = tmp_path / "baseline.json"
    results = [cell(), cell(defense="pct2t", code={**here("pct2t"), "defense": OTHER})]
    baseline.write_text(json.dumps({"schema": BASELINE_SCHEMA, "results": [r.to_dict() for r in results]}))
    write_result(cell(defense="pct2t"), tmp_path / "runs" / "defense=pct2t")  # only the changed defense's cell
    assert main(["check", "--baseline", str(baseline), str(tmp_path / "runs")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == (f"privacy-regression gate against {baseline}: 2 baseline cells: 1 unchanged by construction "
                      "(code identical), 1 re-run and compared (defense:pct2t)")
    assert any(line.startswith("  unchanged by construction, no new run needed: t2t") for line in out)
    assert "1 baseline cell(s) unchanged by construction" in out[-1]
