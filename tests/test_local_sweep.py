"""Sweeps side by side on this machine (``--jobs N``, issue #29): threads per worker, same numbers, failures.

The cell hooks below run in the pool's worker processes, which import them by name from this module
(``tests`` is importable there: a spawned worker gets this process's ``sys.path``).
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from rapt_audit.api.errors import DataError
from rapt_audit.api.locks import LOCK_FILE
from rapt_audit.cli import main
from rapt_audit.encoder.threads import available_cores, cell_threads
from rapt_audit.pipeline import runner, sweep
from rapt_audit.pipeline.cell_driver import CellDriver, CellError, cell_task
from rapt_audit.pipeline.local_executor import LocalExecutor
from tests.sweep_files import TINY, docs, interrupt_after_first_cell, numbers, seed_cells, statuses

SMOKE = ["--attacks", "random_guess", "--profile", "smoke", "--dataset", "synthetic", "--quiet", *TINY]
IDENTITY = ["run", "--defense", "identity", *SMOKE]


# ---------------------------------------------------------------- cell hooks (run in the pool's workers)


def _compute_seeing_threads(config, **kw):
    """The real run, with the thread counts its worker computed with recorded in env (free-form)."""
    import threadpoolctl
    import torch

    result = runner.compute(config, **kw)
    result.env["seen"] = {"torch": torch.get_num_threads(), "omp": os.environ.get("OMP_NUM_THREADS"),
                          "pools": sorted({p["num_threads"] for p in threadpoolctl.threadpool_info()})}
    return result


def _fail_seed_one(config, **kw):
    if config.seed == 1:
        raise DataError("seed=1 cannot be read (test failure)")
    return runner.compute(config, **kw)


def _slow_unless_seed_zero(config):
    """Cells other than seed=0 outlast the test, and say so in a marker file if they are not stopped."""
    if config.seed != 0:
        time.sleep(30)
        (Path(config.out).parent / f"finished-seed={config.seed}").touch()
    return runner.compute(config)


def _only_seed_two(config):
    if config.seed != 2:
        raise AssertionError(f"cell seed={config.seed} was finished and ran again")
    return runner.compute(config)


def _die_once(config):
    """Cell seed=1's first attempt kills its own worker (SIGKILL, as the OOM killer would)."""
    marker = Path(config.out).parent / f"killed-seed={config.seed}"
    if config.seed == 1 and not marker.exists():
        marker.touch()
        os.kill(os.getpid(), signal.SIGKILL)
    return runner.compute(config)


def _clock(out: Path):
    """The test's clock: 100 s per ``result.json`` written in ``out``, so a cell takes, as the command times it from
    its start to its write, 100 s for each cell written meanwhile (itself included)."""
    return lambda: 100.0 * len(list(out.glob("*/result.json")))


class _InProcess:
    """An executor that runs :class:`~rapt_audit.pipeline.cell_driver.CellDriver`'s loop, the one ``--jobs N`` and Ray
    share, with two cells "running" at once in this process: each is computed when it starts and ends in the order
    cells started. The budget's rule lives in that loop; the pool's processes (tested end to end by the CLI test
    above) would only add their start-up, seconds per pool."""

    def __init__(self, compute):
        self.compute = compute

    def run_cells(self, cells, *, index, log, deadline=None, clock=time.monotonic):
        return _InProcessDriver(cells, index, log, self.compute, deadline=deadline, clock=clock).run()


class _InProcessDriver(CellDriver):
    worker = "this process"

    def capacity(self, *, quiet: bool = False) -> int:
        return 2

    def start(self, cell):
        handle = _Ended()
        try:
            handle.doc = cell_task(self.compute, cell.config)
        except Exception as exc:  # noqa: BLE001 - reported as the pool reports a run that raised
            handle.error = f"{type(exc).__name__}: {exc}"
        return handle

    def wait(self):
        return [next(iter(self.running))]  # the cell started first ends first

    def outcome(self, handle):
        if handle.error is not None:
            raise CellError(handle.error)
        return handle.doc


class _Ended:
    """A cell computed in :meth:`_InProcessDriver.start`: its document, or why it raised."""

    doc: dict | None = None
    error: str | None = None


# ---------------------------------------------------------------- tests


def test_jobs_2_gives_the_numbers_of_jobs_1_each_worker_with_its_share_of_the_cores(tmp_path, capsys, monkeypatch):
    """A t2t grid of two η: the same utility and attack numbers, cells and index, whether side by side or not;
    each of the two workers computes with its share of the cores, torch and the native pools alike (left
    alone, torch would take every core in each).

    Without the release cache, so the workers privatize and score rather than read the first command's
    releases back (the embedding table, the same for every run, is still shared). A share above this
    machine's cores would not show (torch caps the count it reads from ``OMP_NUM_THREADS`` at the cores),
    and shares never exceed them.
    """
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    t2t = ["run", "--defense", "t2t", *SMOKE, "--no-release-cache", "--sweep", "eta=50,150"]
    one, two = tmp_path / "one", tmp_path / "two"
    assert main([*t2t, "--out", str(one)]) == 0
    # The workers import the hook by name and record the thread counts they computed with (env is free-form).
    monkeypatch.setattr(runner, "compute", _compute_seeing_threads)
    assert main([*t2t, "--jobs", "2", "--out", str(two)]) == 0
    a, b = docs(one), docs(two)
    assert sorted(b) == ["eta=150", "eta=50"]
    assert {k: numbers(v) for k, v in a.items()} == {k: numbers(v) for k, v in b.items()}
    share = cell_threads(available_cores(), 2)  # what each of the two workers computed with
    assert [doc["env"]["threads"] for doc in b.values()] == [share, share]
    for doc in b.values():
        assert doc["env"]["seen"] == {"torch": share, "omp": str(share), "pools": [share]}
    index = [json.loads((d / "sweep.json").read_text())["cells"] for d in (one, two)]
    assert index[0] == index[1]
    assert not list(two.rglob(LOCK_FILE))
    assert "eta=50" in capsys.readouterr().out


def test_a_failing_cell_is_marked_failed_and_the_others_finish(tmp_path, monkeypatch, capsys):
    out = tmp_path / "sw"
    monkeypatch.setattr(runner, "compute", _fail_seed_one)  # looked up by the driver, imported by name by workers
    assert main([*IDENTITY, "--sweep", "seed=0,1,2", "--jobs", "2", "--out", str(out)]) == 2
    captured = capsys.readouterr()
    assert f"1 of 3 cells failed; 2 finished cells are kept in {out}" in captured.err
    assert "seed=1: DataError: seed=1 cannot be read (test failure)" in captured.err
    assert "seed=0" in captured.out and "seed=2" in captured.out  # the finished cells' table
    assert sorted(docs(out)) == ["seed=0", "seed=2"] and not (out / "seed=1").exists()
    assert statuses(out) == ["complete", "failed", "complete"]
    assert "DataError" in json.loads((out / "sweep.json").read_text())["cells"][1]["error"]


def test_a_killed_worker_is_run_again_in_a_fresh_pool(tmp_path):
    out = tmp_path / "sw"
    cells, axes = seed_cells(out, "0,1")
    lines: list[str] = []
    results = sweep.run_sweep(cells, out=out, axes=axes, log=lines.append,
                              executor=LocalExecutor(jobs=2, compute=_die_once))
    assert (out / "killed-seed=1").exists()  # the first attempt did die
    assert [c.name for c, _ in results] == ["seed=0", "seed=1"] and statuses(out) == ["complete"] * 2
    assert any("seed=1: a worker process died" in line and "running it again" in line for line in lines), lines


def test_ctrl_c_stops_the_workers_and_keeps_the_finished_cells(tmp_path):
    """The running cell's worker is stopped, not waited for (it would write its marker after 30 s)."""
    out = tmp_path / "sw"
    cells, axes = seed_cells(out)

    with pytest.raises(KeyboardInterrupt) as stop:
        sweep.run_sweep(cells, out=out, axes=axes, log=interrupt_after_first_cell,
                        executor=LocalExecutor(jobs=2, compute=_slow_unless_seed_zero))
    assert str(stop.value) == f"1 of 3 finished cells kept in {out}; rerun the same command to resume"
    assert sorted(docs(out)) == ["seed=0"] and not list(out.rglob(LOCK_FILE))
    assert sorted(p.name for p in out.iterdir()) == ["seed=0", "sweep.json"]  # no empty folder, no marker


@pytest.mark.parametrize(("extra", "message"), [
    (["--jobs", "0", "--sweep", "seed=0"], "--jobs must be a whole number >= 1"),
    (["--jobs", "2"], "--jobs runs the cells of a sweep side by side"),
    (["--jobs", "2", "--sweep", "seed=0", "--executor", "ray"], "--jobs applies to sweeps on this machine"),
])
def test_jobs_out_of_place_are_usage_errors(extra, message, tmp_path, capsys):
    assert main([*IDENTITY, *extra, "--out", str(tmp_path / "x")]) == 2
    assert message in capsys.readouterr().err
    assert not list((tmp_path / "x").glob("*/result.json"))


# ---------------------------------------------------------------- time budget with --jobs


def test_time_budget_with_jobs_lets_the_running_cells_finish_and_the_same_command_goes_on(tmp_path, capsys):
    """Two cells start side by side (none has finished to judge by); once one has taken longer than the 1 ms left,
    the third does not start, the second finishes and is written, and the command exits 75. It used to be
    refused (exit 2) before any cell ran."""
    out = tmp_path / "sw"
    argv = [*IDENTITY, "--sweep", "seed=0,1,2", "--jobs", "2", "--out", str(out)]
    assert main([*argv, "--time-budget", "0.001"]) == sweep.BudgetSpent.EXIT_CODE
    captured = capsys.readouterr()
    assert "the 1 cell left was not started; 2 finished in" in captured.err
    assert "seed=0" in captured.out and "seed=1" in captured.out  # the finished cells' table
    assert statuses(out) == ["complete", "complete", "pending"] and sorted(docs(out)) == ["seed=0", "seed=1"]
    assert not (out / "seed=2").exists() and not list(out.rglob(LOCK_FILE))
    written = {k: (out / k / "result.json").read_bytes() for k in ("seed=0", "seed=1")}
    assert main([*argv, "--time-budget", "3600"]) == 0
    assert statuses(out) == ["complete"] * 3
    assert all((out / k / "result.json").read_bytes() == v for k, v in written.items())


@pytest.mark.parametrize(("budget", "started"), [(150, ["seed=0", "seed=1"]), (250, ["seed=0", "seed=1", "seed=2"])])
def test_time_budget_with_jobs_starts_a_cell_only_while_its_estimate_fits(budget, started, tmp_path):
    """seed=0 and seed=1 start at 0 s; seed=0 is written first, at 100 s, having taken 100 s, which is now the
    estimate of seed=2 (the same defense and dataset). With 150 s, the 50 s left do not hold it: seed=2 stays
    pending, seed=1 finishes, BudgetSpent. With 250 s, 150 s do: all three run.

    Then, resuming the 150 s sweep: the folder's cells (their own ``env.wall_time_s``) leave no room in 1 ms, so
    nothing starts; with an hour, only seed=2 runs."""
    out = tmp_path / "sw"
    cells, axes = seed_cells(out)
    executor = _InProcess(runner.compute)
    lines: list[str] = []
    if len(started) == 3:
        results = sweep.run_sweep(cells, out=out, axes=axes, executor=executor, time_budget=budget, clock=_clock(out))
        assert [c.name for c, _ in results] == started and statuses(out) == ["complete"] * 3
        return
    with pytest.raises(sweep.BudgetSpent) as spent:
        sweep.run_sweep(cells, out=out, axes=axes, log=lines.append, executor=executor, time_budget=budget,
                        clock=_clock(out))
    assert [c.name for c, _ in spent.value.results] == started and spent.value.pending == 1
    assert "50 s left, and the next cell is estimated at 100 s, so the 1 cell left was not started" in str(spent.value)
    assert statuses(out) == ["complete", "complete", "pending"] and not (out / "seed=2").exists()
    assert not list(out.rglob(LOCK_FILE))
    assert any("no further cell starts (1 running, 1 left for the next call)" in line for line in lines), lines
    written = {k: (out / k / "result.json").read_bytes() for k in started}

    with pytest.raises(sweep.BudgetSpent) as spent:  # the real clock: 1 ms is less than any finished cell took
        sweep.run_sweep(cells, out=out, axes=axes, executor=_InProcess(_only_seed_two), time_budget=0.001)
    assert spent.value.pending == 1 and not (out / "seed=2").exists()

    results = sweep.run_sweep(cells, out=out, axes=axes, executor=_InProcess(_only_seed_two), time_budget=3600,
                              clock=_clock(out))
    assert [c.name for c, _ in results] == ["seed=0", "seed=1", "seed=2"] and statuses(out) == ["complete"] * 3
    assert all((out / k / "result.json").read_bytes() == v for k, v in written.items())


@pytest.mark.parametrize("budget", [150, 250])
def test_a_spent_budget_wins_over_failed_cells_and_lists_them(budget, tmp_path):
    """seed=1 fails after seed=0 was written (at 100 s). With 150 s seed=2 is left pending: BudgetSpent (exit 75,
    "the same command goes on"), naming the failed cell, which that command runs again. With 250 s seed=2 runs
    and nothing is left pending: CellsFailed (exit 2), as without a budget."""
    out = tmp_path / "sw"
    cells, axes = seed_cells(out)
    executor = _InProcess(_fail_seed_one)
    if budget == 250:
        with pytest.raises(sweep.CellsFailed) as failed:
            sweep.run_sweep(cells, out=out, axes=axes, executor=executor, time_budget=budget, clock=_clock(out))
        assert [c.name for c, _ in failed.value.failures] == ["seed=1"]
        assert statuses(out) == ["complete", "failed", "complete"]
        return
    with pytest.raises(sweep.BudgetSpent) as spent:
        sweep.run_sweep(cells, out=out, axes=axes, executor=executor, time_budget=budget, clock=_clock(out))
    assert [c.name for c, _ in spent.value.results] == ["seed=0"] and spent.value.pending == 1
    assert [c.name for c, _ in spent.value.failures] == ["seed=1"]
    assert "1 cell failed (marked in sweep.json; that command runs it again):\n  seed=1: DataError: seed=1 cannot " \
        "be read" in str(spent.value)
    assert statuses(out) == ["complete", "failed", "pending"] and sorted(docs(out)) == ["seed=0"]
