"""Faults lose nothing: kills, SIGTERM, a second process on one --out, and a full disk (issue #18, item 3).

The in-process tests run in the default suite. The subprocess tests start the real command line
(``python -c DRIVER``); :data:`DRIVER` can stop the process at a named point (inside a cell's
training, or inside the result write just before the rename), announce it on stderr and wait
there to be killed. Kill moments are drawn from seeded generators, so every run of the suite
kills at the same points.
"""

from __future__ import annotations

import errno
import json
import os
import random
import re
import signal
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from rapt_audit.api import files, locks
from rapt_audit.api.errors import ResultError
from rapt_audit.api.files import (
    DiskFullError,
    write_atomic,
    write_cache_atomic,
    write_json_atomic,
)
from rapt_audit.api.locks import LOCK_FILE, hold_out_dir
from rapt_audit.api.types import Release
from rapt_audit.cli import main
from rapt_audit.pipeline import runner
from rapt_audit.pipeline.cache import ReleaseStore
from rapt_audit.pipeline.results import read_result

TINY = ["--set", "data.victim_train=60", "--set", "data.victim_test=40", "--set", "data.attacker_train=60",
        "--set", "data.attacker_valid=30"]
RUN = ["run", "--defense", "identity", "--attacks", "random_guess", "--profile", "smoke", "--dataset", "synthetic",
       "--quiet", *TINY]
SEEDS = (0, 1, 2, 3)
SWEEP = [*RUN, "--sweep", "seed=" + ",".join(map(str, SEEDS))]

# Test-only driver: FAULT_POINT=train:SEED pauses inside the identity defense's training (its utility
# probe) of cell seed=SEED; FAULT_POINT=write:SEED pauses inside that cell's result write, after the
# temporary file is complete and synced and before it is renamed over result.json. Either prints
# "FAULT-POINT ..." on stderr first, so the test knows when to send its signal; the pause lasts
# FAULT_PAUSE seconds (default 120), then the run goes on.
DRIVER = r"""
import os, sys, time
from pathlib import Path

point = os.environ.get("FAULT_POINT", "")
kind, _, seed = point.partition(":")

def pause():
    print(f"FAULT-POINT {point}", file=sys.stderr, flush=True)
    time.sleep(float(os.environ.get("FAULT_PAUSE", "120")))

if kind == "train":
    from rapt_audit.api.plugins import DEFENSES, load
    load()
    cls = DEFENSES.get("identity")
    real_utility = cls.utility
    def utility(self, test, *, ctx):
        if ctx.seed == int(seed):
            pause()
        return real_utility(self, test, ctx=ctx)
    cls.utility = utility
elif kind == "write":
    real_replace = os.replace
    def replace(src, dst):
        if Path(dst).name == "result.json" and Path(dst).parent.name == f"seed={seed}":
            pause()
        return real_replace(src, dst)
    os.replace = replace

from rapt_audit.cli.main import main
sys.exit(main(sys.argv[1:]))
"""

# Holds the lock of the folder given as its argument until it is killed.
HOLDER = """
import sys, time
from rapt_audit.api.locks import hold_out_dir
with hold_out_dir(sys.argv[1]):
    print("held", flush=True)
    time.sleep(120)
"""


def _env(point: str = "", pause: float = 120) -> dict[str, str]:
    return {**os.environ, "FAULT_POINT": point, "FAULT_PAUSE": str(pause), "OMP_NUM_THREADS": "1"}


def _start(argv: list[str], point: str = "", pause: float = 120) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", DRIVER, *argv], env=_env(point, pause), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _wait_for_point(proc: subprocess.Popen[str], point: str) -> None:
    """Read stderr until the driver says it paused at ``point`` (the process then waits to be killed)."""
    seen = []
    for line in proc.stderr:  # type: ignore[union-attr]
        seen.append(line)
        if line.strip() == f"FAULT-POINT {point}":
            return
    raise AssertionError(f"the process ended (code {proc.wait()}) without reaching {point}: {''.join(seen)}")


def _results(out: Path) -> dict[str, bytes]:
    return {p.parent.name: p.read_bytes() for p in sorted(out.glob("*/result.json"))}


def _assert_consistent(out: Path, kept: dict[str, bytes]) -> dict[str, bytes]:
    """Every result file parses and validates; every one finished before the fault is unchanged."""
    now = _results(out)
    for name, data in now.items():
        assert data, f"{name}/result.json is empty"
        read_result(out / name / "result.json")  # raises on a corrupt or partial file
    for name, data in kept.items():
        assert now.get(name) == data, f"the finished cell {name} was lost or changed"
    if (out / "sweep.json").exists():
        json.loads((out / "sweep.json").read_text())
    return now


def _strays(out: Path) -> list[Path]:
    return sorted(out.rglob("*.tmp"))


# ---------------------------------------------------------------- the atomic writer


def test_write_atomic_syncs_the_file_then_its_folder(tmp_path, monkeypatch):
    synced = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(stat.S_ISDIR(os.fstat(fd).st_mode)), real_fsync(fd)))
    write_json_atomic(tmp_path / "r" / "result.json", {"a": 1})
    assert synced == [False, True]  # the content before the rename, the folder entry after it


def test_an_interrupted_write_leaves_the_old_file_and_no_temporary(tmp_path):
    path = tmp_path / "result.json"
    write_json_atomic(path, {"v": 1})
    before = path.read_bytes()

    def half_then_interrupt(handle):
        handle.write(b'{"v": 2, "trunc')
        raise KeyboardInterrupt  # what Ctrl-C or the CLI's SIGTERM handler raises mid-write

    with pytest.raises(KeyboardInterrupt):
        write_atomic(path, half_then_interrupt)
    assert path.read_bytes() == before and _strays(tmp_path) == []


# ---------------------------------------------------------------- full disk


def _no_space(*_args, **_kwargs):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_disk_full_during_the_result_write_keeps_the_previous_result(tmp_path, monkeypatch, capsys):
    out = tmp_path / "run"
    argv = [*RUN, "--out", str(out)]
    assert main(argv) == 0
    before = (out / "result.json").read_bytes()
    monkeypatch.setattr(os, "fsync", _no_space)  # the disk fills while the new result is flushed
    capsys.readouterr()
    assert main([*argv, "--force"]) == 2
    err = capsys.readouterr().err
    assert f"no space left on device while writing {out / 'result.json'}; the previous result.json is intact; " \
           "free space and rerun" in err
    assert (out / "result.json").read_bytes() == before
    assert sorted(p.name for p in out.iterdir()) == ["result.json"]  # no temporary file, no lock file


def test_disk_full_on_a_first_write_says_nothing_was_written(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "replace", _no_space)
    with pytest.raises(DiskFullError, match="no result.json was written; free space") as caught:
        write_json_atomic(tmp_path / "result.json", {"v": 1})
    assert caught.value.errno == errno.ENOSPC and isinstance(caught.value, ResultError)
    assert list(tmp_path.iterdir()) == []


def test_disk_full_in_the_caches_warns_and_goes_on(tmp_path, monkeypatch):
    store = ReleaseStore(tmp_path / "releases")
    release = Release(uids=["a"], texts=["hello"], meta={})
    monkeypatch.setattr(os, "fsync", _no_space)
    monkeypatch.setattr(files, "_warned_unwritable", False)  # the cache warns once a process (write_cache_atomic)
    with pytest.warns(UserWarning, match=r"releases/ab cannot be written \(No space left on device\)"):
        store.save("ab" * 32, release)
    monkeypatch.setattr(files, "_warned_unwritable", False)
    with pytest.warns(UserWarning, match="cannot be written"):
        assert write_cache_atomic(tmp_path / "c" / "entry.npz", lambda h: np.save(h, np.zeros(3))) is False
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == []


# ---------------------------------------------------------------- the lock on --out


def test_a_second_process_on_the_same_out_fails_at_once_and_a_killed_holder_leaves_no_lock(tmp_path, monkeypatch,
                                                                                           capsys):
    out = tmp_path / "run"
    real_execute = runner._execute
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(out)], env=_env(), stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"  # type: ignore[union-attr]
        monkeypatch.setattr(runner, "_execute", lambda *a, **k: pytest.fail("ran while the folder was in use"))
        assert main([*RUN, "--out", str(out)]) == 2  # refused before any work, not after the run
        err = capsys.readouterr().err
        assert f"{out} is in use by rapt-audit process {holder.pid} " in err
        assert "wait for it to finish, or use another --out. If no such process is running" in err
        assert not (out / "result.json").exists()
    finally:
        holder.kill()  # SIGKILL: the kernel releases the flock, so no stale lock can remain
        holder.wait()
    monkeypatch.setattr(runner, "_execute", real_execute)
    assert main([*RUN, "--out", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["result.json"]


def _try_hold(out: Path, errors: list[BaseException]) -> None:
    try:
        with hold_out_dir(out):
            pass
    except ResultError as exc:
        errors.append(exc)


def test_the_lock_is_reentrant_and_leaves_nothing_behind(tmp_path):
    out = tmp_path / "new"
    with hold_out_dir(out) as lock:
        record = json.loads(lock.read_text())
        assert record["pid"] == os.getpid()
        with hold_out_dir(out):  # a run inside a caller that already holds the folder: no deadlock
            pass
        assert lock.exists()
        other_thread: list[BaseException] = []
        worker = threading.Thread(target=lambda: _try_hold(out, other_thread))
        worker.start()
        worker.join()
        assert isinstance(other_thread[0], ResultError)  # but another thread of this process is refused
    assert not out.exists()  # created by the lock, nothing written: removed again
    kept = tmp_path / "kept"
    with hold_out_dir(kept):
        (kept / "result.json").write_text("{}")
    assert sorted(p.name for p in kept.iterdir()) == ["result.json"]


def test_without_fcntl_a_leftover_lock_file_is_reported_as_stale(tmp_path, monkeypatch):
    monkeypatch.setattr(locks, "fcntl", None)
    out = tmp_path / "run"
    with hold_out_dir(out) as lock:
        assert lock.exists()
    assert not out.exists()
    out.mkdir()
    (out / LOCK_FILE).write_text(json.dumps({"pid": 999999, "host": "h", "started": "2020-01-01T00:00:00+00:00",
                                             "command": "rapt-audit run"}))
    stale = rf"process 999999 .*the lock is stale .*delete {re.escape(str(out / LOCK_FILE))} and rerun"
    with pytest.raises(ResultError, match=stale), hold_out_dir(out):
        pass


# ---------------------------------------------------------------- stray temporary files


def test_a_killed_writers_temporary_files_are_never_read_and_removed_by_the_next_run(tmp_path):
    out = tmp_path / "sw"
    argv = [*RUN, "--sweep", "seed=0", "--out", str(out)]
    assert main(argv) == 0
    result = (out / "seed=0" / "result.json").read_bytes()
    # What SIGKILL leaves mid-write: half a document in a temporary file beside the real one.
    (out / "seed=0" / ".result.json.k1ll3d.tmp").write_bytes(b'{"schema": "rapt-audit/res')
    (out / ".sweep.json.k1ll3d.tmp").write_bytes(b"")
    read_result(out / "seed=0")
    assert main(argv) == 0
    assert (out / "seed=0" / "result.json").read_bytes() == result and _strays(out) == []


# ---------------------------------------------------------------- SIGTERM (and Ctrl-C) in process


@pytest.mark.parametrize("where", ["run", "write"])
def test_sigterm_abandons_the_cell_keeps_the_finished_ones_and_says_so(where, tmp_path, monkeypatch, capsys):
    """SIGTERM in cell seed=1 (during its run, or inside its result write) exits 143 and loses nothing."""
    out = tmp_path / "sw"
    argv = [*RUN, "--sweep", "seed=0,1,2", "--out", str(out)]
    real_run, real_replace = runner.run, os.replace
    before = signal.getsignal(signal.SIGTERM)

    def term_in_run(config, **kw):
        if config.seed == 1:
            os.kill(os.getpid(), signal.SIGTERM)
        return real_run(config, **kw)

    def term_in_write(src, dst):
        if Path(dst).parent.name == "seed=1" and Path(dst).name == "result.json":
            os.kill(os.getpid(), signal.SIGTERM)
        return real_replace(src, dst)

    if where == "run":
        monkeypatch.setattr(runner, "run", term_in_run)
    else:
        monkeypatch.setattr(os, "replace", term_in_write)
    assert main(argv) == 143
    err = capsys.readouterr().err
    assert f"rapt-audit: interrupted: 1 of 3 finished cells kept in {out}; rerun the same command to resume" in err
    assert list(_results(out)) == ["seed=0"]
    assert _strays(out) == [] and not list(out.rglob(LOCK_FILE))
    assert not (out / "seed=1").exists()  # the abandoned cell left not even an empty folder
    assert signal.getsignal(signal.SIGTERM) == before  # the CLI's handler is set only while a command runs
    kept = _results(out)
    monkeypatch.undo()
    assert main(argv) == 0
    assert _results(out)["seed=0"] == kept["seed=0"] and len(_results(out)) == 3
    assert signal.getsignal(signal.SIGTERM) == before


# ---------------------------------------------------------------- real processes (slow)


@pytest.mark.slow
def test_sigkill_at_seeded_points_never_corrupts_and_loses_no_finished_cell(tmp_path):
    """SIGKILL inside training, inside the result write and at a seeded random moment; then resume."""
    rng = random.Random(18)
    out = tmp_path / "sw"
    argv = [*SWEEP, "--out", str(out)]
    in_training = rng.choice(SEEDS[1:3])  # so that finished cells exist when the first kill comes
    in_write = rng.choice([s for s in SEEDS if s > in_training])
    kept: dict[str, bytes] = {}
    for point, seed in ((f"train:{in_training}", in_training), (f"write:{in_write}", in_write), (None, None)):
        proc = _start(argv, point or "")
        if point:
            _wait_for_point(proc, point)
        else:
            time.sleep(rng.uniform(0.5, 4.0))  # wherever the process is then: imports, a cell, a write
        kept = _assert_consistent(out, kept)  # what is finished now must survive the kill
        proc.kill()
        proc.communicate()
        kept = _assert_consistent(out, kept)
        if seed is not None:  # exactly the cells before the one killed are finished
            assert sorted(kept) == [f"seed={s}" for s in SEEDS if s < seed]
        if seed == in_write:
            assert _strays(out)  # killed between the complete temporary file and the rename
    proc = _start(argv)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    final = _assert_consistent(out, kept)
    assert sorted(final) == [f"seed={s}" for s in SEEDS]
    assert {read_result(out / name).config["seed"] for name in final} == set(SEEDS)
    assert _strays(out) == [] and not list(out.rglob(LOCK_FILE))


@pytest.mark.slow
@pytest.mark.parametrize("point", ["train:1", "write:2"])
def test_sigterm_to_the_command_exits_143_and_keeps_the_finished_cells(point, tmp_path):
    out = tmp_path / "sw"
    argv = [*SWEEP, "--out", str(out)]
    proc = _start(argv, point)
    _wait_for_point(proc, point)
    kept = _assert_consistent(out, {})
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err
    assert (f"rapt-audit: interrupted: {len(kept)} of {len(SEEDS)} finished cells kept in {out}; rerun the same "
            "command to resume") in err
    assert _assert_consistent(out, kept) == kept
    assert _strays(out) == [] and not list(out.rglob(LOCK_FILE))


@pytest.mark.slow
def test_two_commands_on_one_out_the_second_fails_fast_and_the_first_finishes(tmp_path):
    out = tmp_path / "sw"
    argv = [*SWEEP, "--out", str(out)]
    first = _start(argv, "train:1", pause=8)  # the second command runs while the first sits in cell seed=1
    _wait_for_point(first, "train:1")
    second = subprocess.run([sys.executable, "-c", DRIVER, *argv], env=_env(), capture_output=True, text=True,
                            check=False, timeout=60)
    assert second.returncode == 2
    assert f"rapt-audit: error: {out} is in use by rapt-audit process {first.pid} " in second.stderr
    assert first.poll() is None  # refused while the first still runs
    _, err = first.communicate(timeout=300)
    assert first.returncode == 0, err
    assert sorted(_assert_consistent(out, {})) == [f"seed={s}" for s in SEEDS]
