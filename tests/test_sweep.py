"""Sweeps: parsing, cell naming, one result per cell, reuse of finished cells and resume after Ctrl-C."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from rapt_audit.api.errors import UsageError
from rapt_audit.cli import main
from rapt_audit.pipeline import sweep
from rapt_audit.pipeline.cell_driver import CellDriver

TINY = ["--set", "data.victim_train=60", "--set", "data.victim_test=40", "--set", "data.attacker_train=60",
        "--set", "data.attacker_valid=30"]
RUN = ["run", "--defense", "identity", "--attacks", "random_guess", "--profile", "smoke", "--dataset", "synthetic",
       "--quiet"] + TINY


@pytest.mark.parametrize(("spec", "message"), [
    ("eta", "expects KEY=V1,V2"),
    ("eta=", "expects KEY=V1,V2"),
    ("=1,2", "expects KEY=V1,V2"),
    ("eta=25,25", "lists 25 more than once"),
    ("out=a,b", "does not change the result"),
])
def test_bad_sweep_specs_are_refused(spec, message):
    with pytest.raises(UsageError, match=message):
        sweep.parse_axis(spec)


def test_same_key_twice_is_refused():
    with pytest.raises(UsageError, match="more than once"):
        sweep.parse_axes(["eta=1,2", "eta=3"])


def test_cell_names_are_stable_safe_and_distinct():
    assert sweep.cell_name([("eta", "25")]) == "eta=25"
    assert sweep.cell_name([("defense", "t2t"), ("eta", "inf")]) == "defense=t2t_eta=inf"
    a = sweep.cell_name([("model", "org/model a")])
    b = sweep.cell_name([("model", "org-model-a")])
    assert "/" not in a and " " not in a and a != b


def test_grid_expands_in_order_and_sweep_values_win_over_set(tmp_path):
    axes = sweep.parse_axes(["defense=t2t,pct2t", "eta=25,inf"])
    cells = sweep.expand(axes=axes, file=None, cli={"profile": "smoke"}, sets=["eta=999"], out=tmp_path)
    assert [c.name for c in cells] == ["defense=t2t_eta=25", "defense=t2t_eta=inf", "defense=pct2t_eta=25",
                                       "defense=pct2t_eta=inf"]
    assert cells[2].config.defense == "pct2t" and cells[2].config.defense_args["eta"] == "25"
    assert cells[1].config.out == str(tmp_path / "defense=t2t_eta=inf")
    assert len({c.config.cell_id() for c in cells}) == 4


def test_bad_value_fails_before_any_cell_runs(tmp_path, capsys):
    out = tmp_path / "sw"
    code = main(["run", "--defense", "t2t", "--attacks", "random_guess", "--profile", "smoke", "--dataset",
                 "synthetic", "--quiet", "--sweep", "eta=50,-1", "--out", str(out)])
    assert code == 2
    assert "eta" in capsys.readouterr().err
    assert not list(out.glob("*/result.json"))  # the valid cell was not run either


def test_sweep_writes_one_result_per_cell_and_resumes_after_interrupt(tmp_path, monkeypatch, capsys):
    """Ctrl-C in the second cell keeps the first; running the same command again reuses it."""
    from rapt_audit.pipeline import runner

    out = tmp_path / "seeds"
    argv = RUN + ["--sweep", "seed=0,1,2", "--out", str(out)]
    real_run = runner.run
    calls = []

    def interrupted(config, **kw):
        calls.append(config.seed)
        if config.seed == 1:
            raise KeyboardInterrupt
        return real_run(config, **kw)

    monkeypatch.setattr(runner, "run", interrupted)
    assert main(argv) == 130
    assert (out / "seed=0" / "result.json").is_file()
    assert not (out / "seed=1" / "result.json").exists() and not (out / "seed=2").exists()
    index = json.loads((out / "sweep.json").read_text())
    assert [c["status"] for c in index["cells"]] == ["complete", "pending", "pending"]
    first = (out / "seed=0" / "result.json").read_bytes()

    monkeypatch.setattr(runner, "run", real_run)
    capsys.readouterr()
    assert main(argv) == 0
    assert (out / "seed=0" / "result.json").read_bytes() == first  # reused, not re-run
    docs = {s: json.loads((out / f"seed={s}" / "result.json").read_text()) for s in (0, 1, 2)}
    assert {d["config"]["seed"] for d in docs.values()} == {0, 1, 2}
    assert len({d["cell_id"] for d in docs.values()}) == 3
    assert len({d["signature"] for d in docs.values()}) == 1  # seeds do not change comparability
    assert [c["status"] for c in json.loads((out / "sweep.json").read_text())["cells"]] == ["complete"] * 3
    printed = capsys.readouterr().out
    assert "seed=0" in printed and "seed=2" in printed and "random_guess" in printed


def test_sweep_refuses_a_cell_directory_that_holds_another_run(tmp_path, capsys):
    out = tmp_path / "sw"
    assert main(RUN + ["--sweep", "seed=0", "--out", str(out)]) == 0
    # Same cell directory name, different base configuration (another defense argument set).
    assert main(RUN + ["--sweep", "seed=0", "--out", str(out), "--attacks", "random_guess,whitebox"]) == 2
    assert "holds a different run" in capsys.readouterr().err


def test_time_budget_stops_between_cells_and_the_same_command_goes_on(tmp_path, capsys):
    """With a budget too small for a second cell, the first finishes, the rest wait (exit 75), a rerun goes on."""
    out = tmp_path / "budget"
    argv = RUN + ["--sweep", "seed=0,1,2", "--out", str(out)]
    assert main(argv + ["--time-budget", "0.001"]) == sweep.BudgetSpent.EXIT_CODE
    captured = capsys.readouterr()
    assert "2 cells left were not started" in captured.err and "seed=0" in captured.out
    index = json.loads((out / "sweep.json").read_text())
    assert [c["status"] for c in index["cells"]] == ["complete", "pending", "pending"]
    first = (out / "seed=0" / "result.json").read_bytes()
    # The finished cell's own wall time (in its result) now says that no other fits: nothing starts.
    assert main(argv + ["--time-budget", "0.001"]) == sweep.BudgetSpent.EXIT_CODE
    assert (out / "seed=0" / "result.json").read_bytes() == first
    assert [c["status"] for c in json.loads((out / "sweep.json").read_text())["cells"]] == \
        ["complete", "pending", "pending"]
    assert main(argv + ["--time-budget", "3600"]) == 0
    assert (out / "seed=0" / "result.json").read_bytes() == first
    assert [c["status"] for c in json.loads((out / "sweep.json").read_text())["cells"]] == ["complete"] * 3


def test_time_budget_judges_each_cell_by_its_estimate_not_by_the_longest_so_far(tmp_path):
    from rapt_audit.pipeline.results import read_result

    now = [0.0]
    durations = {"0": 10.0, "1": 30.0, "2": 5.0, "3": 5.0}

    def runner(config, **_kw):  # a cell that takes its seed's duration on the test's clock
        now[0] += durations[str(config.seed)]
        return read_result(finished)

    base = tmp_path / "one"
    assert main(RUN + ["--sweep", "seed=0", "--out", str(base)]) == 0
    finished = base / "seed=0" / "result.json"
    axes = sweep.parse_axes(["seed=0,1,2,3"])
    cells = sweep.expand(axes=axes, file=None, cli={"defense": "identity", "attacks": "random_guess",
                                                    "profile": "smoke", "dataset": "synthetic"},
                         sets=[s for s in TINY if s != "--set"], out=tmp_path / "grid")
    # 0 runs (nothing to judge by), 1 fits (its estimate, the mean so far, 10 <= 55 left); then the estimate is
    # the mean of 10 and 30, 20 <= 25 left (the longest, 30, would not have fitted), then 15 <= 20: all four run.
    results = sweep.run_sweep(cells, out=tmp_path / "grid", axes=axes, runner=runner, time_budget=65,
                              clock=lambda: now[0])
    assert [cell.name for cell, _ in results] == ["seed=0", "seed=1", "seed=2", "seed=3"] and now[0] == 50.0
    # With 10 s less, seed=2's estimate (20 s) no longer fits in the 15 s left: it and seed=3 wait.
    now[0] = 0.0
    with pytest.raises(sweep.BudgetSpent) as spent:
        sweep.run_sweep(cells, out=tmp_path / "again", axes=axes, runner=runner, time_budget=55,
                        clock=lambda: now[0])
    assert [cell.name for cell, _ in spent.value.results] == ["seed=0", "seed=1"] and spent.value.pending == 2
    assert "15 s left, and the next cell is estimated at 20 s" in str(spent.value)


@pytest.mark.parametrize(("extra", "message"), [
    (["--time-budget", "0"], "positive number of seconds"),
    (["--time-budget", "-5"], "positive number of seconds"),
])
def test_bad_time_budgets_are_refused(extra, message, tmp_path, capsys):
    assert main(RUN + ["--sweep", "seed=0", "--out", str(tmp_path / "b")] + extra) == 2
    assert message in capsys.readouterr().err
    assert main(RUN + ["--out", str(tmp_path / "c"), "--time-budget", "60"]) == 2
    assert "applies to sweeps" in capsys.readouterr().err


class _Estimating(CellDriver):
    """The driver's bookkeeping alone (nothing runs): two workers, the test's clock."""

    def capacity(self, *, quiet: bool = False) -> int:
        return 2


def _driver(cells, now, out=None):
    index = SimpleNamespace(status={c.name: "pending" for c in cells}, finished={}, out=out)
    return _Estimating(cells, index, lambda _msg: None, None, clock=lambda: now[0])


def _cells(tmp_path, pairs, expected=None):
    """Sweep cells of the given (defense, dataset) pairs, each with its own folder (and caller's estimate)."""
    from rapt_audit.pipeline.config import RunConfig

    expected = expected or [None] * len(pairs)
    return [sweep.Cell((("cell", str(k)),), f"cell={k}", RunConfig(defense=d, dataset=x, out=str(tmp_path / str(k))),
                       expected_s=e) for k, ((d, x), e) in enumerate(zip(pairs, expected))]


def test_time_left_sums_the_estimates_of_what_is_left_and_learns_from_each_finished_cell(tmp_path):
    """The caller's estimates until a cell of the pair finishes; then that cell's time for its pair's others."""
    now = [0.0]
    cells = _cells(tmp_path, [("identity", "sst2")] * 4, [100.0, 200.0, 300.0, 400.0])
    driver = _driver(cells, now)
    assert driver.time_left() == 500.0  # nothing finished: the estimates as they are, over two workers
    first = driver.queue.popleft()
    driver.budget.estimator.observe(first.name, ("identity", "sst2"), 50.0)  # the first took 50 s
    driver.running[object()] = (driver.queue.popleft(), 0.0, None)
    now[0] = 40.0
    # The pair is measured now: every other cell of it is estimated at 50 s, the running one has 10 s left.
    assert driver.time_left() == (10.0 + 50.0 + 50.0) / 2
    assert driver.counts() == "1 running, 2 queued, about 55 s left"
    now[0] = 500.0  # a running cell past its estimate counts as about to end, never as negative time
    assert driver.time_left() == 50.0


def test_without_estimates_time_left_waits_for_a_finished_cell(tmp_path):
    driver = _driver(_cells(tmp_path, [("identity", "sst2")] * 3), [0.0])
    assert driver.time_left() is None and driver.counts() == "0 running, 3 queued"
    first = driver.queue.popleft()
    driver.budget.estimator.observe(first.name, ("identity", "sst2"), 20.0)
    assert driver.time_left() == 20.0  # two cells left, two workers: one round of the pair's 20 s
