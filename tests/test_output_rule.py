"""The output rule (issue 43, Deliver 1 and the output cases of 6): nothing the user owns is overwritten.

Every case runs the command line in process (``main([...])``) and checks three things: exit 2, a message
of one line (no traceback), and the user's files byte for byte as they were. No model is trained: each
refusal comes before any work, and the few commands that do run are ``identity`` on two lines.
"""

from __future__ import annotations

import errno
import io
import json
import os
import socket
import stat
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest

from rapt_audit.api.errors import ResultError, UsageError
from rapt_audit.api.files import UnwritableError, write_atomic, write_text_atomic
from rapt_audit.api.outputs import check_out_folder, check_outputs
from rapt_audit.benchmark.run import INDEX_FILE
from rapt_audit.cli import main
from rapt_audit.pipeline.sweep import SWEEP_SCHEMA
from tests.result_factory import benchmark_folder, t2t_sweep

ONE_IDENTITY = """\
name = "one"
profile = "smoke"
seeds = [0]
attacks = ["whitebox"]

[datasets]
utility = "synthetic"
inversion = "synthetic"

[defenses.identity]
"""
#: The command line in a process of its own (``python -m`` would warn that the module is imported twice).
CLI = [sys.executable, "-c", "import sys; from rapt_audit.cli.main import main; sys.exit(main(sys.argv[1:]))"]
SMOKE_RUN = ["--profile", "smoke", "--dataset", "synthetic", "--device", "cpu"]


def snapshot(root: Path) -> dict[str, object]:
    """Every entry below ``root`` (links not followed): a file's bytes, a link's target, else its kind."""
    seen: dict[str, object] = {}
    for path in sorted(root.rglob("*")):
        info = os.lstat(path)
        key = path.relative_to(root).as_posix()
        if stat.S_ISLNK(info.st_mode):
            seen[key] = ("link", os.readlink(path))
        elif stat.S_ISREG(info.st_mode):
            seen[key] = path.read_bytes()
        else:
            seen[key] = stat.S_IFMT(info.st_mode)
    return seen


def refused(capsys: pytest.CaptureFixture[str], *says: str) -> str:
    """The one-line error message of a refused command (no traceback), holding each of ``says``."""
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("rapt-audit: error: "), err
    assert "Traceback" not in err
    for part in says:
        assert part in lines[0], (part, lines[0])
    return lines[0]


def users_folder(root: Path) -> Path:
    """A folder holding what a user keeps: a page, two Markdown files, an unrelated sweep.json and a figure."""
    root.mkdir(parents=True)
    for name, text in {"index.html": "<p>my page</p>", "leaderboard.md": "# mine\n", "claims.md": "mine\n",
                       "sweep.json": '{"my": "settings"}\n'}.items():
        (root / name).write_text(text, encoding="utf-8")
    (root / "figures").mkdir()
    (root / "figures" / "g0-pareto.png").write_bytes(b"\x89PNG mine")
    return root


# ---------------------------------------------------------------- 1. privatize over its own input


@pytest.mark.parametrize("flags", [["--out", "{inp}"], ["--sidecar", "{inp}"], ["--out", "{o}", "--sidecar", "{o}"],
                                   ["--out", "{inp}", "--sidecar", "{side}"]])
def test_privatize_never_writes_over_its_input_or_one_output_over_the_other(tmp_path, capsys, flags):
    inp, o = tmp_path / "same.txt", tmp_path / "o.txt"
    inp.write_text("the cat sat on the mat\nmy secret name is Alice\n", encoding="utf-8")
    o.write_text("earlier output\n", encoding="utf-8")
    link = tmp_path / "link.txt"
    link.symlink_to(inp)  # the input named through a link is still the input
    before = snapshot(tmp_path)
    argv = [part.format(inp=inp, o=o, side=tmp_path / "side.json") for part in flags]
    source = link if "{inp}" in flags and flags[-1] == "{side}" else inp
    assert main(["privatize", str(source), "--defense", "t2t", *argv]) == 2
    refused(capsys, "same file", "name another output" if "{inp}" in flags else "its own path")
    assert snapshot(tmp_path) == before


def test_privatize_refuses_standard_input_that_is_its_output(tmp_path, capsys):
    inp = tmp_path / "notes.txt"
    inp.write_text("hello world\n", encoding="utf-8")
    saved = os.dup(0)
    with open(inp, "rb") as handle:
        os.dup2(handle.fileno(), 0)
        try:
            code = main(["privatize", "--defense", "identity", "--out", str(inp)])
        finally:
            os.dup2(saved, 0)
            os.close(saved)
    assert code == 2
    refused(capsys, "standard input")
    assert inp.read_text(encoding="utf-8") == "hello world\n"


def test_privatize_from_the_shell_standard_streams_closed_full_or_the_input(tmp_path):
    """The cases only a real process shows: ``>> input``, ``<&-`` and ``> /dev/full`` (only read from)."""
    inp = tmp_path / "in.txt"
    inp.write_text("hello world\n", encoding="utf-8")
    with open(inp, "ab") as append:
        done = subprocess.run([*CLI, "privatize", str(inp), "--defense",
                               "identity"], stdout=append, stderr=subprocess.PIPE, text=True)
    assert done.returncode == 2 and "standard output is the same file as input" in done.stderr
    assert inp.read_text(encoding="utf-8") == "hello world\n"
    closed = subprocess.run([*CLI, "privatize", "--defense", "identity"],
                            stdin=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, stdout=subprocess.PIPE,
                            preexec_fn=lambda: os.close(0))
    assert closed.returncode == 2 and "standard input is closed" in closed.stderr, closed.stderr
    if os.path.exists("/dev/full"):
        with open("/dev/full", "w") as full:
            done = subprocess.run([*CLI, "privatize", str(inp), "--defense",
                                   "identity", "--quiet"], stdout=full, stderr=subprocess.PIPE, text=True)
        assert done.returncode == 2 and "Traceback" not in done.stderr
        assert "No space left on device" in done.stderr and len(done.stderr.strip().splitlines()) == 1


class _Failing(io.TextIOBase):
    """A standard output whose writes fail as a closed pipe or a full disk do (no fileno: never redirected)."""

    def __init__(self, error: OSError) -> None:
        self.error = error

    def write(self, text: str) -> int:
        raise self.error


@pytest.mark.parametrize("error, says", [(BrokenPipeError(errno.EPIPE, "Broken pipe"), "broken pipe"),
                                         (OSError(errno.ENOSPC, "No space left on device"), "No space left")])
def test_privatize_to_a_failing_standard_output_is_one_line(tmp_path, capsys, monkeypatch, error, says):
    inp = tmp_path / "in.txt"
    inp.write_text("hello world\n", encoding="utf-8")
    monkeypatch.setattr(sys, "stdout", _Failing(error))
    assert main(["privatize", str(inp), "--defense", "identity", "--quiet"]) == 2
    refused(capsys, says, "incomplete")


@pytest.mark.parametrize("stream", ["stdin", "stdout"])
def test_privatize_with_a_closed_standard_stream_is_one_line(tmp_path, capsys, monkeypatch, stream):
    monkeypatch.setattr(sys, stream, None)  # what Python makes of <&- or >&-
    argv = ["privatize", "--defense", "identity", "--quiet"]
    if stream == "stdout":
        (tmp_path / "in.txt").write_text("hello\n", encoding="utf-8")
        argv.insert(1, str(tmp_path / "in.txt"))
    assert main(argv) == 2
    refused(capsys, f"standard {stream[3:].replace('in', 'input').replace('out', 'output')} is closed")


# ---------------------------------------------------------------- 2. folders of the user's files


@pytest.mark.parametrize("command", ["sweep", "sweep dry", "benchmark", "benchmark dry"])
def test_a_sweep_or_benchmark_never_writes_into_a_folder_of_the_users_files(tmp_path, capsys, command):
    folder = users_folder(tmp_path / "mine")
    before = snapshot(folder)
    if command.startswith("sweep"):
        argv = ["run", "--defense", "identity", *SMOKE_RUN, "--sweep", "seed=0,1", "--out", str(folder)]
    else:
        bench = tmp_path / "one.toml"
        bench.write_text(ONE_IDENTITY, encoding="utf-8")
        argv = ["benchmark", "run", str(bench), "--out", str(folder)]
    assert main(argv + (["--dry-run"] if command.endswith("dry") else [])) == 2
    message = refused(capsys, f"--out {folder}")
    assert "sweep.json that rapt-audit did not write" in message or "holds no rapt-audit benchmark" in message
    assert snapshot(folder) == before


def test_the_folder_rule_names_what_is_there_and_accepts_our_own_index(tmp_path):
    mine = tmp_path / "repo"
    mine.mkdir()
    (mine / "leaderboard.md").write_text("# the repository's own\n", encoding="utf-8")
    with pytest.raises(UsageError, match="leaderboard.md; choose a new or empty folder"):
        check_out_folder(mine, index="sweep.json", schema=SWEEP_SCHEMA, what="sweep")
    ours = tmp_path / "sweep"
    ours.mkdir()
    (ours / "sweep.json").write_text(json.dumps({"schema": SWEEP_SCHEMA, "cells": []}), encoding="utf-8")
    (ours / "report.html").write_text("rendered here by rapt-audit report", encoding="utf-8")
    assert check_out_folder(ours, index="sweep.json", schema=SWEEP_SCHEMA, what="sweep") is True
    assert check_out_folder(tmp_path / "new", index="sweep.json", schema=SWEEP_SCHEMA) is False
    (tmp_path / "hidden").mkdir()
    (tmp_path / "hidden" / ".rapt-audit.lock").write_text("", encoding="utf-8")  # hidden files do not count
    assert check_out_folder(tmp_path / "hidden", index="sweep.json", schema=SWEEP_SCHEMA) is False


def test_a_dry_run_into_our_own_sweep_or_benchmark_folder_is_accepted(tmp_path, capsys):
    sweep_dir = tmp_path / "sweep"
    sweep_dir.mkdir()
    (sweep_dir / "sweep.json").write_text(json.dumps({"schema": SWEEP_SCHEMA, "cells": []}), encoding="utf-8")
    assert main(["run", "--defense", "identity", *SMOKE_RUN, "--sweep", "seed=0", "--out", str(sweep_dir),
                 "--dry-run"]) == 0
    bench = tmp_path / "one.toml"
    bench.write_text(ONE_IDENTITY, encoding="utf-8")
    folder = tmp_path / "bench"
    folder.mkdir()
    (folder / INDEX_FILE).write_text(json.dumps({"schema": "rapt-audit/benchmark/1", "cells": []}), encoding="utf-8")
    assert main(["benchmark", "run", str(bench), "--out", str(folder), "--dry-run"]) == 0


def test_bundle_replaces_only_an_earlier_bundle_even_with_force(tmp_path, capsys):
    folder = users_folder(tmp_path / "mine")
    before = snapshot(folder)
    assert main(["bundle", "--out", str(folder), "--force", "--dry-run", "--", "run", "--defense", "identity"]) == 2
    refused(capsys, "holds no rapt-audit bundle")
    assert snapshot(folder) == before


# ---------------------------------------------------------------- 3. outputs that are not regular files


def test_write_atomic_writes_into_a_fifo_and_leaves_it_a_fifo(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()), daemon=True)
    reader.start()
    write_text_atomic(fifo, "streamed\n")
    reader.join(timeout=10)
    assert got == [b"streamed\n"] and stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_privatize_streams_into_a_fifo(tmp_path, capsys):
    inp, fifo = tmp_path / "in.txt", tmp_path / "pipe"
    inp.write_text("hello world\n", encoding="utf-8")
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()), daemon=True)
    reader.start()
    assert main(["privatize", str(inp), "--defense", "identity", "--out", str(fifo), "--quiet"]) == 0
    reader.join(timeout=10)
    assert got == [b"hello world\n"] and stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.txt", "pipe"]  # a stream has no sidecar beside it


def test_a_symlink_to_a_file_is_kept_and_its_target_replaced(tmp_path, capsys):
    target, link = tmp_path / "target.md", tmp_path / "link.md"
    target.write_text("old\n", encoding="utf-8")
    link.symlink_to(target.name)
    write_text_atomic(link, "new\n")
    assert os.readlink(link) == target.name and target.read_text(encoding="utf-8") == "new\n"
    runs = t2t_sweep(tmp_path / "runs")
    assert main(["leaderboard", str(runs), "--out", str(link)]) == 0
    assert link.is_symlink() and target.read_text(encoding="utf-8").startswith("# rapt-audit leaderboard")


def _special(tmp_path: Path, kind: str) -> Path:
    short = Path(tempfile.mkdtemp(dir="/tmp" if os.path.isdir("/tmp") else None))  # a socket's path is short
    path = (short if kind == "socket" else tmp_path) / kind
    if kind == "folder":
        path.mkdir()
        (path / "keep.txt").write_text("mine", encoding="utf-8")
    elif kind == "link to a folder":
        (tmp_path / "real").mkdir()
        path.symlink_to(tmp_path / "real")
    elif kind == "loop":
        path.symlink_to(tmp_path / "other")
        (tmp_path / "other").symlink_to(path)
    elif kind == "socket":
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(path))
        sock.close()
    elif kind == "device":
        try:
            os.mknod(path, stat.S_IFCHR | 0o600, os.makedev(1, 7))  # a copy of /dev/full's node, in tmp
        except (PermissionError, AttributeError, OSError):
            pytest.skip("creating a device node needs root")
    return path


@pytest.mark.parametrize("kind", ["folder", "link to a folder", "loop", "socket", "device"])
def test_write_atomic_never_renames_over_what_is_not_a_file(tmp_path, kind):
    path = _special(tmp_path, kind)
    before = os.lstat(path)
    with pytest.raises(UsageError, match="rapt-audit does not replace|loop of symbolic links"):
        write_text_atomic(path, "x")
    after = os.lstat(path)
    assert (after.st_ino, after.st_mode) == (before.st_ino, before.st_mode)
    assert not list(path.parent.glob(f".{path.name}.*.tmp"))


@pytest.mark.parametrize("kind", ["folder", "socket", "device"])
def test_commands_refuse_an_output_that_is_not_a_file_before_work(tmp_path, capsys, kind):
    path = _special(tmp_path, kind)
    inp = tmp_path / "in.txt"
    inp.write_text("hello\n", encoding="utf-8")
    before = os.lstat(path)
    assert main(["privatize", str(inp), "--defense", "t2t", "--out", str(path)]) == 2
    refused(capsys, "rapt-audit does not replace")
    assert main(["report", str(t2t_sweep(tmp_path / "runs")), "--out", str(path)]) == 2
    refused(capsys, "rapt-audit does not replace")
    assert os.lstat(path).st_ino == before.st_ino


def test_other_write_failures_are_one_line_and_keep_the_file(tmp_path, monkeypatch):
    path = tmp_path / "kept.json"
    path.write_text("before", encoding="utf-8")

    def refuse(src: object, dst: object) -> None:
        raise PermissionError(errno.EACCES, "Permission denied")

    monkeypatch.setattr(os, "replace", refuse)
    with pytest.raises(UnwritableError) as caught:
        write_atomic(path, lambda handle: handle.write(b"after"))
    assert isinstance(caught.value, ResultError) and isinstance(caught.value, OSError)
    assert "Permission denied" in str(caught.value) and "intact" in str(caught.value)
    assert path.read_text(encoding="utf-8") == "before" and not list(tmp_path.glob(".kept.json.*.tmp"))


# ---------------------------------------------------------------- 4. reports over their inputs


@pytest.fixture(scope="module")
def bench(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return benchmark_folder(tmp_path_factory.mktemp("bench") / "out", "smoke")


@pytest.mark.parametrize("flags, says", [
    (["--out", "{d}/benchmark.json"], "the same file as the index"),
    (["--leaderboard", "{d}/{cell}/result.json"], "the same file as a cell's result"),
    (["--out", "{t}/x.md", "--leaderboard", "{t}/x.md"], "are the same file"),
    (["--leaderboard", "{d}/claims.md"], "are the same file"),
    (["--out", "{d}"], "is a folder"),
])
def test_benchmark_report_never_writes_over_its_inputs_or_one_output_over_another(bench, tmp_path, capsys, flags,
                                                                                    says):
    cell = json.loads((bench / INDEX_FILE).read_text(encoding="utf-8"))["cells"][0]["name"]
    argv = [f.format(d=bench, t=tmp_path, cell=cell) for f in flags]
    before = snapshot(bench)
    assert main(["benchmark", "report", str(bench), *argv]) == 2
    refused(capsys, says)
    assert snapshot(bench) == before and not (tmp_path / "x.md").exists()


@pytest.mark.parametrize("command", ["report", "leaderboard", "check", "preamble"])
def test_reports_never_write_over_a_result_they_read(tmp_path, capsys, command):
    runs = t2t_sweep(tmp_path / "runs")
    victim = runs / "eta=75" / "result.json"
    before = snapshot(runs)
    argv = {"report": ["report", str(runs), "--out", str(victim)],
            "leaderboard": ["leaderboard", str(runs), "--out", str(victim)],
            "check": ["check", str(runs), "--baseline", str(victim), "--write-baseline", "--allow-dirty-baseline"],
            "preamble": ["leaderboard", str(runs), "--out", str(runs / "pre.md"), "--preamble",
                         str(runs / "pre.md")]}[command]
    if command == "preamble":
        (runs / "pre.md").write_text("how these runs were made\n", encoding="utf-8")
        before = snapshot(runs)
    assert main(argv) == 2
    refused(capsys, "is the same file as", "name another output")
    assert snapshot(runs) == before


def test_check_outputs_compares_files_through_links_and_paths_not_yet_made(tmp_path):
    a = tmp_path / "a.json"
    a.write_text("{}", encoding="utf-8")
    (tmp_path / "alias.json").symlink_to(a)
    os.link(a, tmp_path / "hard.json")
    for other in ("alias.json", "hard.json"):
        with pytest.raises(UsageError, match="same file"):
            check_outputs([("--out", tmp_path / other)], [("input", a)])
    with pytest.raises(UsageError, match="same file"):
        check_outputs([("--out", tmp_path / "new.md"), ("--leaderboard", tmp_path / "." / "new.md")])
    check_outputs([("--out", "-"), ("--sidecar", tmp_path / "side.json")], [("input", a)])  # nothing in common


# ---------------------------------------------------------------- 6. tracebacks that were outputs


def test_run_out_naming_a_file_is_one_line_and_keeps_it(tmp_path, capsys):
    out = tmp_path / "notes.txt"
    out.write_text("keep me\n", encoding="utf-8")
    assert main(["run", "--defense", "identity", *SMOKE_RUN, "--out", str(out), "--quiet"]) == 2
    refused(capsys, "is a file, not a folder")
    assert out.read_text(encoding="utf-8") == "keep me\n"


def test_a_symlink_loop_at_figures_is_one_line(tmp_path, capsys, bench):
    runs = t2t_sweep(tmp_path / "runs")
    site = tmp_path / "site"
    site.mkdir()
    (site / "figures").symlink_to(site / "loop")
    (site / "loop").symlink_to(site / "figures")
    assert main(["report", str(runs), "--out", str(site / "index.html")]) == 2
    refused(capsys, "figures", "loop of symbolic links")
    assert not (site / "index.html").exists()
    mine = tmp_path / "bench"
    mine.mkdir()
    (mine / INDEX_FILE).write_bytes((bench / INDEX_FILE).read_bytes())
    (mine / "figures").symlink_to(mine / "figures")
    spec = tmp_path / "one.toml"
    spec.write_text(ONE_IDENTITY, encoding="utf-8")
    assert main(["benchmark", "run", str(spec), "--out", str(mine), "--dry-run"]) == 2  # before any cell runs
    refused(capsys, "loop of symbolic links")


@pytest.mark.parametrize("index", [
    '{"schema": "rapt-audit/benchmark/1", "cells": [1]}',
    '{"schema": "rapt-audit/benchmark/1", "cells": [{"name": "x"}]}',
    '{"schema": "rapt-audit/benchmark/1", "cells": []}',
    'not json',
])
def test_a_malformed_benchmark_index_is_one_line(tmp_path, capsys, index):
    folder = tmp_path / "bench"
    folder.mkdir()
    (folder / INDEX_FILE).write_text(index, encoding="utf-8")
    assert main(["benchmark", "report", str(folder)]) == 2
    refused(capsys, str(folder / INDEX_FILE))
    assert sorted(p.name for p in folder.iterdir()) == [INDEX_FILE]


def test_a_cell_name_that_is_a_path_is_malformed(tmp_path, capsys, bench):
    folder = tmp_path / "bench"
    folder.mkdir()
    doc = json.loads((bench / INDEX_FILE).read_text(encoding="utf-8"))
    doc["cells"][0]["name"] = "../../elsewhere"
    (folder / INDEX_FILE).write_text(json.dumps(doc), encoding="utf-8")
    assert main(["benchmark", "report", str(folder)]) == 2
    refused(capsys, "is not a folder name")
