"""Sweeps on Ray (``--executor ray``, issue #17 part 3): same numbers, resume, killed workers, failed cells.

The Ray tests share one local Ray instance (2 CPUs, no dashboard) for the module and run the tiny
smoke grid of ``test_sweep.py``; the executor uses a Ray that is already initialized as it is. The
cell hooks below run inside Ray workers: this module is pickled by value for them, so the workers
need not import ``tests``.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from rapt_audit.api.errors import DataError, UsageError
from rapt_audit.api.locks import LOCK_FILE
from rapt_audit.cli import main
from rapt_audit.pipeline import ray_executor, runner, sweep
from rapt_audit.pipeline.ray_executor import RayExecutor, probe_address
from tests.sweep_files import TINY, interrupt_after_first_cell
from tests.sweep_files import docs as _docs
from tests.sweep_files import numbers as _numbers
from tests.sweep_files import seed_cells as _cells
from tests.sweep_files import statuses as _statuses

RUN = ["run", "--defense", "identity", "--attacks", "random_guess", "--profile", "smoke", "--dataset", "synthetic",
       "--quiet", *TINY]
GRID = ["--sweep", "seed=0,1,2"]
RAY = ["--executor", "ray"]
SEEDS = (0, 1, 2)


# ---------------------------------------------------------------- cell hooks (run inside Ray workers)


def _die_once(marker_dir: Path, config):
    """Cell seed=1's first attempt kills its own worker (SIGKILL, as the OOM killer would)."""
    marker = Path(marker_dir) / f"killed-seed={config.seed}"
    if config.seed == 1 and not marker.exists():
        marker.touch()
        os.kill(os.getpid(), signal.SIGKILL)
    return runner.compute(config)


def _fail_seed_one(config, **kw):
    if config.seed == 1:
        raise DataError("seed=1 cannot be read (test failure)")
    return runner.compute(config, **kw)


def _never(config, **kw):
    raise AssertionError(f"cell seed={config.seed} was finished and ran again")


def _only_seed_one(config, **kw):
    if config.seed != 1:
        raise AssertionError(f"cell seed={config.seed} was finished and ran again")
    return runner.compute(config, **kw)


def _other_data(config):
    """A worker whose data differs from the driver's (another RAPT_AUDIT_DATA on its node)."""
    result = runner.compute(config)
    result.env["data_fingerprint"] = "f" * 16
    return result


# ---------------------------------------------------------------- helpers


@pytest.fixture(scope="module")
def ray_local(tmp_path_factory):
    """One local Ray instance for the module; restores the SIGTERM handler that ray.init replaces.

    Its processes inherit this environment, so the cache goes where conftest puts every test's
    (drivers that join it with --address do not forward theirs, as on a real cluster).
    """
    import ray  # the [test] extra: missing, the Ray tests fail rather than skip
    from ray import cloudpickle

    before, cache = signal.getsignal(signal.SIGTERM), os.environ.get("RAPT_AUDIT_CACHE")
    os.environ["RAPT_AUDIT_CACHE"] = str(tmp_path_factory.getbasetemp() / "cache")
    started = not ray.is_initialized()
    try:
        if started:
            ray.init(num_cpus=2, include_dashboard=False, logging_level=logging.WARNING)
    finally:
        signal.signal(signal.SIGTERM, before)
        if cache is None:
            os.environ.pop("RAPT_AUDIT_CACHE")
        else:
            os.environ["RAPT_AUDIT_CACHE"] = cache
    module = sys.modules[__name__]
    cloudpickle.register_pickle_by_value(module)
    yield ray
    cloudpickle.unregister_pickle_by_value(module)
    if started:
        ray.shutdown()
    signal.signal(signal.SIGTERM, before)


@pytest.fixture(autouse=True)
def _no_ray_address(monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)  # a local Ray, not the cluster of a developer's shell


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---------------------------------------------------------------- on Ray


def test_a_grid_on_ray_gives_the_local_numbers_and_resumes_without_resubmitting(ray_local, tmp_path, monkeypatch,
                                                                              capsys):
    local, remote = tmp_path / "local", tmp_path / "ray"
    assert main([*RUN, *GRID, "--out", str(local)]) == 0
    assert main([*RUN, *GRID, *RAY, "--out", str(remote)]) == 0
    a, b = _docs(local), _docs(remote)
    assert sorted(b) == [f"seed={s}" for s in SEEDS]
    assert {k: _numbers(v) for k, v in a.items()} == {k: _numbers(v) for k, v in b.items()}  # bit-identical
    index = json.loads((remote / "sweep.json").read_text())
    assert [c["status"] for c in index["cells"]] == ["complete"] * 3
    assert index["cells"] == json.loads((local / "sweep.json").read_text())["cells"]
    assert not list(remote.rglob(LOCK_FILE))

    # Resume: the finished cells are reused, not submitted; only the missing one runs.
    written = {k: (remote / k / "result.json").read_bytes() for k in b}
    (remote / "seed=1" / "result.json").unlink()
    (remote / "seed=1").rmdir()
    monkeypatch.setattr(runner, "compute", _only_seed_one)
    capsys.readouterr()
    assert main([*RUN, *GRID, *RAY, "--out", str(remote)]) == 0
    assert (remote / "seed=0" / "result.json").read_bytes() == written["seed=0"]
    assert (remote / "seed=2" / "result.json").read_bytes() == written["seed=2"]
    assert _numbers(_docs(remote)["seed=1"]) == _numbers(b["seed=1"])
    printed = capsys.readouterr().out
    assert "seed=0" in printed and "seed=2" in printed and "random_guess" in printed
    monkeypatch.setattr(runner, "compute", _never)  # all finished: nothing is submitted
    assert main([*RUN, *GRID, *RAY, "--out", str(remote)]) == 0


def test_a_killed_worker_is_retried_and_every_cell_is_written(ray_local, tmp_path):
    out = tmp_path / "sw"
    cells, axes = _cells(out)
    lines: list[str] = []
    executor = RayExecutor(compute=functools.partial(_die_once, tmp_path))
    results = sweep.run_sweep(cells, out=out, axes=axes, log=lines.append, executor=executor)
    assert (tmp_path / "killed-seed=1").exists()  # the first attempt did die
    assert [c.name for c, _ in results] == [f"seed={s}" for s in SEEDS]
    assert sorted(_docs(out)) == [f"seed={s}" for s in SEEDS] and _statuses(out) == ["complete"] * 3
    assert any("cell 2/3 seed=1: done in" in line for line in lines), lines


def test_each_task_is_given_its_cells_threads_to_set_in_its_worker(tmp_path, monkeypatch):
    """Ray sets OMP_NUM_THREADS only in a fresh worker; a reused one (torch loaded) needs the count in the task."""
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    fake_ray = SimpleNamespace(remote=lambda fn: SimpleNamespace(
        options=lambda **_kw: SimpleNamespace(remote=lambda *args: (fn, *args))))
    cells, axes = _cells(tmp_path / "sw", "0")
    index = sweep.SweepIndex(tmp_path, cells, axes, {"seed=0": "pending"})
    driver = ray_executor._Driver(RayExecutor(cpus_per_cell=3.5), fake_ray, cells, index, print, owns_ray=True)
    fn, _compute, config, threads, reused = driver.start(cells[0])
    assert fn.__name__ == "cell_task" and config == cells[0].config and threads == 3 and reused is None


def test_a_failing_cell_is_reported_and_the_others_are_kept(ray_local, tmp_path, monkeypatch, capsys):
    out = tmp_path / "sw"
    monkeypatch.setattr(runner, "compute", _fail_seed_one)
    assert main([*RUN, *GRID, *RAY, "--out", str(out)]) == 2
    captured = capsys.readouterr()
    assert f"1 of 3 cells failed; 2 finished cells are kept in {out}" in captured.err
    assert "seed=1: DataError: seed=1 cannot be read (test failure)" in captured.err
    assert "seed=0" in captured.out and "seed=2" in captured.out  # the finished cells' table
    assert sorted(_docs(out)) == ["seed=0", "seed=2"] and not (out / "seed=1").exists()
    index = json.loads((out / "sweep.json").read_text())
    assert [c["status"] for c in index["cells"]] == ["complete", "failed", "complete"]
    assert "DataError" in index["cells"][1]["error"]
    monkeypatch.setattr(runner, "compute", _only_seed_one)  # a rerun runs only the failed cell
    assert main([*RUN, *GRID, *RAY, "--out", str(out)]) == 0
    assert _statuses(out) == ["complete"] * 3


def test_a_time_budget_on_ray_lets_the_running_tasks_finish_and_the_same_command_goes_on(ray_local, tmp_path, capsys):
    """The 2-CPU instance runs two tasks at once; once one has taken longer than the 1 ms left, the third is not
    submitted, the other finishes and is written, and the command exits 75; an hour then runs only the third."""
    out = tmp_path / "sw"
    assert main([*RUN, *GRID, *RAY, "--time-budget", "0.001", "--out", str(out)]) == sweep.BudgetSpent.EXIT_CODE
    assert "the 1 cell left was not started; 2 finished in" in capsys.readouterr().err
    assert _statuses(out) == ["complete", "complete", "pending"] and not (out / "seed=2").exists()
    written = {k: (out / k / "result.json").read_bytes() for k in ("seed=0", "seed=1")}
    assert main([*RUN, *GRID, *RAY, "--time-budget", "3600", "--out", str(out)]) == 0
    assert _statuses(out) == ["complete"] * 3
    assert all((out / k / "result.json").read_bytes() == v for k, v in written.items())


def test_the_driver_refuses_a_result_computed_on_other_data(ray_local, tmp_path):
    out = tmp_path / "sw"
    cells, axes = _cells(out)
    with pytest.raises(sweep.CellsFailed, match="ran on other data on its worker") as failed:
        sweep.run_sweep(cells, out=out, axes=axes, executor=RayExecutor(compute=_other_data))
    assert len(failed.value.failures) == 3 and not _docs(out)
    assert _statuses(out) == ["failed"] * 3 and sorted(p.name for p in out.iterdir()) == ["sweep.json"]


def test_workers_get_the_drivers_environment(monkeypatch):
    """Offline flags always; the data and cache paths only on a local instance (a node has its own disks)."""
    monkeypatch.setenv("RAPT_AUDIT_CACHE", "/driver/cache")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    local = RayExecutor().worker_env()
    assert local["RAPT_AUDIT_CACHE"] == "/driver/cache" and local["HF_HUB_OFFLINE"] == "1"
    cluster = RayExecutor(address="10.0.0.5:6379").worker_env()
    assert "RAPT_AUDIT_CACHE" not in cluster and cluster["HF_HUB_OFFLINE"] == "1"
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.5:6379")  # as ray.init itself would
    assert RayExecutor().address == "10.0.0.5:6379"


def test_ctrl_c_cancels_the_running_cells_and_keeps_the_finished_ones(ray_local, tmp_path):
    out = tmp_path / "sw"
    cells, axes = _cells(out)

    with pytest.raises(KeyboardInterrupt) as stop:
        sweep.run_sweep(cells, out=out, axes=axes, log=interrupt_after_first_cell, executor=RayExecutor())
    assert str(stop.value) == f"1 of 3 finished cells kept in {out}; rerun the same command to resume"
    assert len(_docs(out)) == 1 and not list(out.rglob(LOCK_FILE))
    assert sorted(p.name for p in out.iterdir()) == [*_docs(out), "sweep.json"]  # no empty folder left


def test_a_second_driver_joins_a_running_cluster_with_address(ray_local, tmp_path):
    """``--address``: the command joins a running Ray (here this module's) and writes the results itself."""
    address = ray_local.get_runtime_context().gcs_address
    out = tmp_path / "sw"
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    code = "import sys; from rapt_audit.cli import main; sys.exit(main(sys.argv[1:]))"
    argv = [*RUN, "--sweep", "seed=0", *RAY, "--address", address, "--out", str(out)]
    argv.remove("--quiet")
    done = subprocess.run([sys.executable, "-c", code, *argv], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=180)
    assert done.returncode == 0, done.stderr
    assert f"Ray cluster at {address}" in done.stderr and "cell 1/1 seed=0: done in" in done.stderr
    assert sorted(_docs(out)) == ["seed=0"] and _statuses(out) == ["complete"]


# ---------------------------------------------------------------- bad input (no Ray instance needed)


def test_an_unreachable_address_fails_fast_before_any_cell(tmp_path, capsys, monkeypatch):
    """Fast by counted work, not by the clock: one TCP connect bounded by the probe's timeout, and never
    ``ray.init``, which retries an unreachable address for minutes."""
    import ray  # the [test] extra

    connects, inits = [], []
    real_connect = ray_executor.socket.create_connection

    def connect(target, timeout=None, *args, **kwargs):
        connects.append((target, timeout))
        return real_connect(target, timeout, *args, **kwargs)

    def init(*args, **kwargs):
        inits.append(kwargs)
        raise ConnectionError("ray.init was called for an address nothing answers at")

    monkeypatch.setattr(ray_executor.socket, "create_connection", connect)
    monkeypatch.setattr(ray, "init", init)
    out = tmp_path / "sw"
    port = _free_port()
    address = f"127.0.0.1:{port}"
    assert main([*RUN, *GRID, *RAY, "--address", address, "--out", str(out)]) == 2
    assert f"no Ray cluster answers at {address}" in capsys.readouterr().err
    assert connects == [(("127.0.0.1", port), ray_executor.PROBE_TIMEOUT_S)] and inits == []
    assert not out.exists()


@pytest.mark.parametrize(("address", "message"), [("10.0.0.5:x", "is not HOST:PORT")])
def test_a_malformed_address_is_refused(address, message):
    with pytest.raises(UsageError, match=message):
        probe_address(address)


def test_a_missing_ray_names_the_extra(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray → ImportError
    assert main([*RUN, *GRID, *RAY, "--out", str(tmp_path / "sw")]) == 2
    assert "pip install 'rapt-audit[ray]'" in capsys.readouterr().err


@pytest.mark.parametrize(("extra", "message"), [
    (["--address", "h:1", *GRID], "--address apply only to --executor ray"),
    (["--gpus-per-cell", "1", *GRID], "--gpus-per-cell apply only to --executor ray"),
    ([*RAY], "--executor ray runs the cells of a sweep"),
    ([*RAY, *GRID, "--cpus-per-cell", "-1"], "--cpus-per-cell must be a number >= 0"),
])
def test_ray_flags_out_of_place_are_usage_errors(extra, message, tmp_path, capsys):
    assert main([*RUN, *extra, "--out", str(tmp_path / "x")]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


def test_cuda_cells_need_a_gpu_per_cell(tmp_path):
    out = tmp_path / "sw"
    cells, axes = _cells(out)
    cells = [sweep.Cell(c.assignments, c.name, dataclasses.replace(c.config, device="cuda")) for c in cells]
    with pytest.raises(UsageError, match="--gpus-per-cell 1"):
        sweep.run_sweep(cells, out=out, axes=axes, executor=RayExecutor())


def test_help_and_ls_do_not_import_ray():
    code = ("import sys; from rapt_audit.cli.main import build_parser, main; build_parser().format_help(); "
            "main(['ls']); assert 'ray' not in sys.modules, 'ray imported'")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
