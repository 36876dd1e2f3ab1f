"""Estimates that learn (issue #65 item 2): one estimator behind the dry run, the time budget and the progress line.

Synthetic throughout: hand-made evidence and result files, no cell is run.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest

from rapt_audit.benchmark import plan
from rapt_audit.benchmark.costs import read_costs
from rapt_audit.benchmark.listing import dry_run_text
from rapt_audit.benchmark.plan import bench_evidence, estimate_costs, plan_cells
from rapt_audit.benchmark.validate import load_benchmark
from rapt_audit.pipeline.config import RunConfig
from rapt_audit.pipeline.estimates import (
    ESTIMATES_FILE,
    Estimator,
    Evidence,
    Figure,
    read_evidence,
    write_evidence,
)
from rapt_audit.pipeline.results import write_result
from rapt_audit.pipeline.time_budget import TimeBudget, cells_that_fit, sweep_estimator
from tests.result_factory import fake_result

BENCH = """\
name = "learn"
profile = "cpu"
seeds = [0, 1]
attacks = ["whitebox", "attribute_gender"]

[service]
method = "full"

[datasets]
utility = "sst2"
inversion = "sst2"
attribute = "trustpilot"

[defenses.identity]

[defenses.t2t]
eta = [25, 200]
"""

#: t2t has no figure here: it stands for a plugin's defense.
COSTS = """\
[models]
minilm = ["minilm"]
mpnet = ["mpnet", "all-mpnet-base-v2"]

[cpu]
default = 120

[cpu.minilm.full]
"identity.sst2" = 100
"identity.trustpilot" = 20

[cpu.minilm.prompt]
"t2t.sst2" = 40
"""


def _cell(name: str, defense: str, dataset: str, expected: float | None = None) -> SimpleNamespace:
    return SimpleNamespace(name=name, config=RunConfig(defense=defense, dataset=dataset), expected_s=expected)


@pytest.fixture
def bench(tmp_path, monkeypatch):
    (tmp_path / "costs.toml").write_text(COSTS, encoding="utf-8")
    monkeypatch.setattr(plan, "read_costs", lambda profile: read_costs(profile, tmp_path / "costs.toml"))
    path = tmp_path / "learn.toml"
    path.write_text(BENCH, encoding="utf-8")
    return load_benchmark(str(path), check_data=False)


def _finish(cell: plan.BenchCell, seconds: float) -> None:
    """Write a finished result of exactly ``cell``'s run that took ``seconds``."""
    config = cell.cell.config
    result = fake_result(defense=cell.defense, dataset=cell.dataset)
    result = replace(result, config=config.to_dict(), cell_id=config.cell_id(),
                     env={**result.env, "wall_time_s": seconds})
    write_result(result, config.out)


# ---------------------------------------------------------------- the estimator's order of evidence


def test_the_first_finished_cell_of_a_pair_sets_its_other_cells_estimate_over_the_figure():
    est = Estimator(Evidence(figures=(Figure("t2t", "sst2", 99.0, "figure for t2t.sst2"),)))
    assert est.estimate(_cell("b", "t2t", "sst2")).seconds == 99.0
    est.observe("a", ("t2t", "sst2"), 60.0)
    after = est.estimate(_cell("b", "t2t", "sst2"))
    assert (after.seconds, after.basis) == (60.0, "measured") and "1 finished t2t cell(s) on sst2" in after.source
    est.observe("a", ("t2t", "sst2"), 80.0)  # the same cell again replaces its figure, never counts twice
    assert est.estimate(_cell("b", "t2t", "sst2")).seconds == 80.0


def test_figures_are_scaled_by_how_this_machine_compares_with_them():
    est = Estimator(Evidence(figures=(Figure("identity", "sst2", 100.0, "f1"), Figure("t2t", "sst2", 50.0, "f2"),
                                      Figure("t2t", "conll", 80.0, "f3"))))
    est.observe("a", ("identity", "sst2"), 150.0)  # this machine: 1.5 times the figures
    scaled = est.estimate(_cell("b", "t2t", "sst2"))
    assert scaled.seconds == pytest.approx(75.0) and "× 1.50" in scaled.source and scaled.basis == "figure"
    # No finished cell on conll: the machine's factor from the other datasets (exact figures only).
    assert est.estimate(_cell("c", "t2t", "conll")).seconds == pytest.approx(120.0)


def test_a_defense_without_a_figure_takes_the_other_defenses_cost_scaled_by_its_own_cells():
    kinds = {"plugin": "texts", "t2t": "texts", "pct2t": "texts", "embedding": "token_embeddings"}
    est = Estimator(Evidence(figures=(Figure("t2t", "sst2", 100.0, "f"), Figure("pct2t", "sst2", 120.0, "f"),
                                      Figure("t2t", "tp", 60.0, "f"), Figure("pct2t", "tp", 40.0, "f"),
                                      Figure("embedding", "tp", 9.0, "f")),
                             kinds=kinds, guess=(130.0, "a flat guess"), no_figure="no figure for {defense}"))
    before = est.estimate(_cell("x", "plugin", "tp"))
    # The defenses that release texts as it does (not embedding's 9 s): the median of 60 and 40, unscaled yet.
    assert (before.seconds, before.basis) == (50.0, "others") and "no plugin cell has finished yet" in before.source
    assert before.source.startswith("no figure for plugin") and "releasing texts" in before.source
    est.observe("p", ("plugin", "sst2"), 55.0)  # half of the text defenses' median on sst2 (110 s)
    after = est.estimate(_cell("x", "plugin", "tp"))
    assert after.seconds == pytest.approx(25.0) and "× 0.50" in after.source


def test_a_fallback_figure_and_then_the_flat_guess_come_last_and_say_so():
    fallback = Figure("plugin", "tp", 70.0, "fallback: measured with service minilm", exact=False)
    est = Estimator(Evidence(figures=(fallback,), guess=(130.0, "a flat guess")))
    got = est.estimate(_cell("x", "plugin", "tp"))
    assert (got.seconds, got.basis) == (70.0, "fallback") and got.source.startswith("fallback")
    guessed = est.estimate(_cell("y", "other", "tp"))
    assert (guessed.seconds, guessed.basis) == (130.0, "guess") and "a flat guess" in guessed.source
    assert Estimator().estimate(_cell("z", "other", "tp")).seconds is None  # nothing at all: no estimate


def test_a_stale_cell_costs_its_own_figure_and_the_callers_estimate_yields_to_a_measured_pair():
    est = Estimator(Evidence(fixed={"s": (12.0, "stale (attack:x)")}))
    assert est.estimate(_cell("s", "t2t", "sst2")).basis == "fixed"
    assert est.estimate(_cell("g", "t2t", "sst2", expected=33.0)).seconds == 33.0
    est.observe("m", ("t2t", "sst2"), 44.0)
    assert est.estimate(_cell("g", "t2t", "sst2", expected=33.0)).seconds == 44.0


def test_time_left_counts_running_cells_by_what_they_have_left():
    est = Estimator(Evidence(figures=(Figure("a", "d", 100.0, "f"),)))
    cells = [_cell(str(k), "a", "d") for k in range(3)]
    assert est.time_left([(cells[0], 30.0)], cells[1:], 2) == (70.0 + 200.0) / 2
    assert est.time_left([(cells[0], 300.0)], [], 1) == 0.0  # past its estimate: about to end
    assert est.time_left([], [_cell("u", "unknown", "e")], 1) is None  # nothing on that dataset at all


# ---------------------------------------------------------------- the time budget judges by the same estimates


def test_the_budget_starts_a_cheap_cell_that_fits_though_a_longer_one_finished_before():
    now = [0.0]
    expensive, cheap = _cell("e2", "t2t", "sst2"), _cell("c2", "t2t", "tp")
    budget = TimeBudget((0.0, 100.0), [expensive, cheap], out=None, finished={}, clock=lambda: now[0])
    assert budget.spent(expensive) is None  # nothing measured yet: the first cells start freely
    budget.estimator.observe("e1", ("t2t", "sst2"), 72.0)
    budget.estimator.observe("c1", ("t2t", "tp"), 9.0)
    now[0] = 75.0  # 25 s left: the 72 s cell does not fit, the 9 s one does (the longest so far, 72 s, would not)
    assert budget.spent(expensive) == 25.0 and budget.spent(cheap) is None
    assert budget.note([], [cheap, cheap]) == ", about 18 s left"


def test_cells_that_fit_applies_the_budget_rule_in_order():
    assert cells_that_fit([10.0, 10.0, 10.0], budget=25.0, workers=1) == 2
    assert cells_that_fit([10.0, 10.0, 10.0], budget=25.0, workers=2) == 3  # 0 s, 0 s, then 10 s <= 15 s left
    assert cells_that_fit([10.0, 50.0, 1.0], budget=40.0) == 1  # once one does not fit, none starts again
    assert cells_that_fit([100.0, 100.0], budget=50.0, measured=False) == 1  # the first starts freely


# ---------------------------------------------------------------- a benchmark's evidence, learnt and persisted


def test_a_benchmark_cell_of_a_defense_without_figures_learns_from_its_first_finished_cell(bench, tmp_path):
    cells = plan_cells(bench, out=tmp_path / "out")
    t2t = [c for c in cells if c.defense == "t2t"]
    costs, _ = estimate_costs(t2t, bench)
    sst2 = [cost for c, cost in zip(t2t, costs) if c.dataset == "sst2"]
    # No t2t figure for method full (the prompt one is a fallback), so identity's cost on the dataset, unscaled.
    assert {c.seconds for c in sst2} == {100.0} and all(c.basis == "others" for c in sst2)
    assert "costs.toml has no cpu-profile figure for t2t on sst2 (service minilm)" in sst2[0].source
    _finish(t2t[0], 50.0)  # the first t2t cell (sst2) took half of identity's figure
    costs, evidence = estimate_costs(t2t, bench)
    by = {(c.dataset, cost.basis): cost.seconds for c, cost in zip(t2t[1:], costs[1:])}
    assert by == {("sst2", "measured"): 50.0, ("trustpilot", "others"): pytest.approx(10.0)}  # 20 s × 0.5
    assert any(m[0] == t2t[0].name and m[3] == 50.0 for m in evidence.measured)


def test_the_fallback_figure_names_the_service_it_was_measured_with(bench, tmp_path):
    mpnet = replace(bench, service_model="all-mpnet-base-v2")
    evidence = bench_evidence(mpnet, plan_cells(mpnet, out=tmp_path / "out"))
    figure = next(f for f in evidence.figures if (f.defense, f.dataset) == ("identity", "sst2"))
    assert not figure.exact and "service mpnet" in figure.source and "measured with service minilm" in figure.source


def test_the_shipped_costs_are_keyed_by_service_model_and_method():
    cpu = read_costs("cpu")
    exact = cpu.figure("identity", "sst2", model="mpnet", method="lora")
    assert exact.exact and "service mpnet, method lora" in exact.source
    assert cpu.figure("identity", "sst2", model="minilm", method="full").seconds != exact.seconds
    fallback = cpu.figure("identity", "trustpilot", model="all-mpnet-base-v2", method="lora")
    assert not fallback.exact and fallback.source.startswith("fallback")
    assert cpu.figure("cape", "sst2", model="minilm", method=None).exact  # takes no method: any of its service's


def test_a_bad_costs_section_is_refused_naming_it(tmp_path):
    (tmp_path / "c.toml").write_text('[cpu]\ndefault = 1\n[cpu.minilm]\n"t2t.sst2" = 3\n', encoding="utf-8")
    with pytest.raises(ValueError, match=r"\[cpu.minilm\] must hold one table per method"):
        read_costs("cpu", tmp_path / "c.toml")


def test_the_evidence_round_trips_through_the_folder_and_the_sweeps_loop_reads_it(bench, tmp_path):
    cells = plan_cells(bench, out=tmp_path / "out")
    _finish(cells[0], 40.0)
    costs, evidence = estimate_costs(cells, bench)
    write_evidence(tmp_path / "out", evidence)
    assert read_evidence(tmp_path / "out") == evidence
    loop = sweep_estimator([c.cell for c in cells], out=tmp_path / "out", finished={})
    pending = [(c, cost) for c, cost in zip(cells, costs) if cost.status == "pending"]
    assert [loop.estimate(c.cell).seconds for c, _ in pending] == [cost.seconds for _, cost in pending]


def test_an_unreadable_estimates_file_warns_and_is_not_used(tmp_path):
    (tmp_path / ESTIMATES_FILE).write_text('{"schema": "rapt-audit/estimates/1"}', encoding="utf-8")
    with pytest.warns(UserWarning, match="unreadable"):
        assert read_evidence(tmp_path) == Evidence()
    assert read_evidence(tmp_path / "missing") == Evidence()


def test_the_dry_run_says_what_each_estimate_rests_on_and_what_fits_the_budget(bench, tmp_path):
    cells = plan_cells(bench, out=tmp_path / "out")
    costs, _ = estimate_costs(cells, bench)
    text = dry_run_text(bench, cells, costs, out=Path(tmp_path / "out"), jobs=1, time_budget=250, measured=True,
                        disk="disk: about 1 MB")
    assert "estimates of the pending cells: 8 from other defenses' costs, 4 from costs.toml" in text
    # Seed 0's sst2 cells come first, 100 s each: two fit in 250 s, the third does not (and none after it).
    assert "time budget: 250 s on 1 worker(s) starts about 2 of the 12 cells to run" in text
    assert "disk: about 1 MB" in text
