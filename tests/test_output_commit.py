"""Outputs replaced whole, with what the user set (issue 60, item 2).

An output and its sidecar are committed together or not at all; a replaced file keeps its mode, owner
and group (a new one gets the umask); no temporary file of privatized text outlives the command; a pipe
or FIFO works as privatize's input. Every privatize here is ``identity`` on a few lines: no model.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import shlex
import signal
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from rapt_audit.api.files import remove_stray_temps
from rapt_audit.cli import main
from tests.result_factory import t2t_sweep

CLI = [sys.executable, "-c", "import sys; from rapt_audit.cli.main import main; sys.exit(main(sys.argv[1:]))"]
OTHER_GROUP = 1234


def _privatize(src, out, *extra):
    return main(["privatize", str(src), "--defense", "identity", "--out", str(out), "--quiet", *map(str, extra)])


def _text(path: Path, *lines: str) -> Path:
    path.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    return path


def _temps(*folders: Path) -> list[Path]:
    return sorted(p for folder in folders for p in folder.glob(".*.tmp"))


def _no_space(*_args, **_kwargs):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def _fd_name(fd: int) -> str:
    return os.path.basename(os.readlink(f"/proc/self/fd/{fd}"))


# ---------------------------------------------------------------- a. the output and its sidecar together


def _fail(monkeypatch, victim: Path, phase: str) -> None:
    """The disk fills while ``victim`` is written aside (``write``) or moved into place (``rename``)."""
    if phase == "write":
        real_fsync = os.fsync
        prefix = f".{victim.name}."
        monkeypatch.setattr(os, "fsync", lambda fd: _no_space() if _fd_name(fd).startswith(prefix) else real_fsync(fd))
    else:
        real_replace = os.replace
        monkeypatch.setattr(os, "replace", lambda src, dst, **kw: _no_space() if Path(dst) == victim
                            else real_replace(src, dst, **kw))


@pytest.mark.parametrize("phase", ["write", "rename"])
@pytest.mark.parametrize("victim", ["out", "sidecar"])
@pytest.mark.parametrize("where", ["default", "elsewhere"])
def test_a_failed_write_keeps_the_old_output_and_its_sidecar_as_a_pair(tmp_path, monkeypatch, capsys, phase,
                                                                       victim, where):
    (tmp_path / "o").mkdir()
    out = tmp_path / "o" / "out.txt"
    side = out.with_name("out.txt.privatize.json") if where == "default" else tmp_path / "records" / "side.json"
    flags = [] if where == "default" else ["--sidecar", side]
    assert _privatize(_text(tmp_path / "a.txt", "first run"), out, *flags) == 0
    before = out.read_bytes(), side.read_bytes()
    _fail(monkeypatch, out if victim == "out" else side, phase)
    capsys.readouterr()
    assert _privatize(_text(tmp_path / "b.txt", "second run", "two lines"), out, *flags) == 2
    err = capsys.readouterr().err
    assert (out.read_bytes(), side.read_bytes()) == before  # the η = 1000 output still beside its own record
    assert f"the previous {out.name} and {side.name} are intact" in err and "free space and rerun" in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert _temps(out.parent, side.parent) == []


@pytest.mark.parametrize("victim", ["out", "sidecar"])
def test_a_first_run_on_a_full_disk_leaves_neither_file(tmp_path, monkeypatch, capsys, victim):
    out = tmp_path / "out.txt"
    side = tmp_path / "out.txt.privatize.json"
    _fail(monkeypatch, out if victim == "out" else side, "rename")
    assert _privatize(_text(tmp_path / "in.txt", "hello world"), out) == 2
    assert f"no {out.name} or {side.name} was written" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.txt"]


# ---------------------------------------------------------------- b. mode, owner and group kept


def _own(path: Path, mode: int, gid: int | None) -> None:
    if gid is not None:
        os.chown(path, -1, gid)
    os.chmod(path, mode)


def _check(path: Path, mode: int, gid: int | None) -> None:
    info = path.stat()
    assert stat.S_IMODE(info.st_mode) == mode, f"{path.name}: {oct(stat.S_IMODE(info.st_mode))}"
    assert info.st_gid == (os.getgid() if gid is None else gid) and info.st_uid == os.getuid()


needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="giving a file another group needs root")
SETTINGS = [(0o600, None), (0o640, None), pytest.param(0o640, OTHER_GROUP, marks=needs_root)]


@pytest.mark.parametrize("mode,gid", SETTINGS)
def test_privatize_keeps_the_mode_and_group_of_the_output_and_sidecar_it_replaces(tmp_path, mode, gid):
    out, side = tmp_path / "out.txt", tmp_path / "side.json"
    src = _text(tmp_path / "in.txt", "hello world")
    assert _privatize(src, out, "--sidecar", side) == 0
    _own(out, mode, gid)
    _own(side, mode, gid)
    assert _privatize(src, out, "--sidecar", side) == 0
    _check(out, mode, gid)
    _check(side, mode, gid)


@pytest.mark.parametrize("mode,gid", SETTINGS)
def test_leaderboard_keeps_the_mode_and_group_of_the_file_it_replaces(tmp_path, mode, gid):
    runs, out = t2t_sweep(tmp_path / "runs"), tmp_path / "leaderboard.md"
    out.write_text("an older leaderboard\n", encoding="utf-8")
    _own(out, mode, gid)
    assert main(["leaderboard", str(runs), "-o", str(out)]) == 0
    assert out.read_text(encoding="utf-8").startswith("# rapt-audit leaderboard")
    _check(out, mode, gid)


@needs_root
def test_a_group_that_cannot_be_kept_never_widens_the_mode(tmp_path, monkeypatch):
    out = _text(tmp_path / "out.txt", "old")
    _own(out, 0o640, OTHER_GROUP)
    for name in ("chown", "fchown"):  # as for a user outside that group
        monkeypatch.setattr(os, name, lambda *a, **k: _no_perm())
    src = _text(tmp_path / "in.txt", "hello world")
    assert _privatize(src, out, "--sidecar", tmp_path / "side.json") == 0
    assert out.read_text(encoding="utf-8") == "hello world\n"
    assert stat.S_IMODE(out.stat().st_mode) == 0o600  # the group's read right is not handed to our group


def _no_perm():
    raise PermissionError(errno.EPERM, os.strerror(errno.EPERM))


def test_a_new_file_gets_the_umask_as_open_gives_it(tmp_path):
    old = os.umask(0o027)
    try:
        assert _privatize(_text(tmp_path / "in.txt", "hello world"), tmp_path / "out.txt") == 0
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "out.txt").stat().st_mode) == 0o640
    assert stat.S_IMODE((tmp_path / "out.txt.privatize.json").stat().st_mode) == 0o640


# ---------------------------------------------------------------- c. no temporary outlives the command


def test_a_killed_runs_temporaries_are_removed_by_the_next_run_and_nothing_else(tmp_path):
    out = tmp_path / "out.txt"
    strays = [tmp_path / ".out.txt.k1ll3d_x.tmp", tmp_path / ".out.txt.privatize.json.a1b2c3d4.tmp"]
    for stray in strays:
        stray.write_text("privatized text of a killed run\n", encoding="utf-8")
    kept = [tmp_path / name for name in (".out.txt.my.notes.tmp", "out.txt.k1ll3d_x.tmp", ".other.txt.a1b2c3d4.tmp",
                                         ".out.txt.k1ll3d_x.tmp.bak", ".out.txtXa1b2c3d4.tmp")]
    for path in kept:
        path.write_text("the user's\n", encoding="utf-8")
    (tmp_path / ".out.txt.d1r.tmp").mkdir()  # a folder of that name is not ours either
    assert _privatize(_text(tmp_path / "in.txt", "hello world"), out) == 0
    assert not any(stray.exists() for stray in strays)
    assert all(path.read_text(encoding="utf-8") == "the user's\n" for path in kept)
    assert (tmp_path / ".out.txt.d1r.tmp").is_dir()


def test_a_temporary_a_live_writer_holds_is_left_to_it(tmp_path):
    live = tmp_path / ".out.txt.l1vewr1t.tmp"
    with open(live, "wb") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        assert remove_stray_temps(tmp_path, "out.txt") == []
        assert live.exists()
    assert remove_stray_temps(tmp_path, "out.txt") == [live]


def _open_writer(fifo: Path, proc: subprocess.Popen, deadline: float) -> int:
    """The FIFO's write end, once ``proc`` has opened it for reading."""
    while time.monotonic() < deadline:
        try:
            return os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as exc:
            if exc.errno != errno.ENXIO:
                raise
        assert proc.poll() is None, proc.communicate()[1]
        time.sleep(0.05)
    pytest.fail("privatize never opened its input")


def test_sigkill_mid_write_leaves_no_privatized_text_after_the_next_run(tmp_path):
    fifo, out = tmp_path / "feed", tmp_path / "out.txt"
    os.mkfifo(fifo)
    proc = subprocess.Popen([*CLI, "privatize", str(fifo), "--defense", "identity", "--out", str(out), "--quiet"],
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    writer = _open_writer(fifo, proc, deadline)
    try:
        os.write(writer, b"my landlord John Smith\n" * 200)
        while not _temps(tmp_path) and time.monotonic() < deadline:
            assert proc.poll() is None, proc.communicate()[1]
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        os.close(writer)
    assert [p.name.startswith(".out.txt.") for p in _temps(tmp_path)] == [True]  # what SIGKILL leaves
    assert _privatize(_text(tmp_path / "in.txt", "hello world"), out) == 0
    assert _temps(tmp_path) == [] and out.read_text(encoding="utf-8") == "hello world\n"


# ---------------------------------------------------------------- d. a pipe or FIFO as the input


def test_a_fifo_input_is_read_once_and_streamed(tmp_path):
    fifo, out = tmp_path / "feed", tmp_path / "out.jsonl"
    os.mkfifo(fifo)
    lines = b"".join(json.dumps({"id": i, "text": f"line {i}"}).encode() + b"\n" for i in range(50))
    writer = threading.Thread(target=lambda: fifo.write_bytes(lines), daemon=True)
    writer.start()
    try:
        assert main(["privatize", str(fifo), "--format", "jsonl", "--defense", "identity", "--out", str(out),
                     "--quiet"]) == 0
    finally:
        if writer.is_alive():  # the command never opened it: let the writer go
            os.close(os.open(fifo, os.O_RDONLY | os.O_NONBLOCK))
        writer.join(timeout=10)
    assert out.read_bytes() == lines
    assert json.loads((tmp_path / "out.jsonl.privatize.json").read_text(encoding="utf-8"))["records"] == 50


def test_process_substitution_works_as_the_input(tmp_path):
    command = f"{shlex.join(CLI)} privatize <(printf 'hello world\\nsecond line\\n') --defense identity --quiet"
    done = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "hello world\nsecond line\n"
