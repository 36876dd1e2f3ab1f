"""Issue 43, Deliver 6, as a property: generated bad input to each command gets exit 2, one line, no file changed.

Each example builds a fresh folder holding what a user keeps (a text file, a result, a benchmark file),
feeds one generated bad value to one command — a seed out of range or not a number, a number that reads as
infinity, a benchmark file with bytes that are not UTF-8 or a name that cannot name a folder, an output
path that is an input reached another way (``./x``, ``d/../x``, a chain of symbolic links, a hard link) —
and checks the three promises: exit code 2; standard error one line, ``PROG: error: ...``, no traceback;
every file in the folder byte for byte as it was (nothing is written: each refusal comes before any work).
The examples are drawn with ``derandomize=True``, so CI sees the same ones on every run.
"""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rapt_audit.cli.main import main
from tests.result_factory import benchmark_folder, fake_result, write_sweep
from tests.test_input_limits import BENCH
from tests.test_output_rule import snapshot

SETTINGS = settings(max_examples=12, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

#: Seeds the tools refuse: below 0, above 2**32 - 1, or not a whole number.
BAD_SEEDS = st.one_of(st.integers(min_value=-(2**70), max_value=-1).map(str),
                      st.integers(min_value=2**32, max_value=2**70).map(str),
                      st.sampled_from(["1.5", "seven", "", "0x10", "1e3", "7 7", "-0.5"]))

#: Finite-looking numbers that a float reads as infinity.
OVERFLOWING = st.one_of(st.builds("{}e{}".format, st.integers(1, 9), st.integers(309, 9_999)),
                        st.builds("-{}.5E+{}".format, st.integers(1, 9), st.integers(309, 9_999)),
                        st.integers(310, 400).map(lambda digits: "9" * digits))

#: Bytes that are not UTF-8 anywhere they stand.
NOT_UTF8 = st.sampled_from([b"\xff", b"\xfe", b"\xc3", b"\xe9", b"\x80", b"\xed\xa0\x80", b"\xf8\x88\x80\x80\x80"])

#: Benchmark names that cannot name a folder: a character outside [A-Za-z0-9_.-], a leading dot or dash,
#: or more than 100 characters.
BAD_NAMES = st.one_of(
    st.text(min_size=1, max_size=30).filter(lambda n: not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", n)),
    st.text(alphabet="abcxyz019_-.", min_size=101, max_size=300).map(lambda n: "b" + n))

def _toml_string(text: str) -> str:
    """``text`` as a TOML basic string (every character escaped that TOML would not take as it is)."""
    return '"' + "".join(c if c.isprintable() and c not in '"\\' else f"\\U{ord(c):08x}" for c in text) + '"'


def _exit_code(argv: list[str]) -> int:
    """The command's exit code, as the console script would exit with it (argparse's errors exit from inside)."""
    try:
        return main(argv)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 1


def _refused(code: int, capsys: pytest.CaptureFixture[str], before: dict[str, object], root: Path) -> str:
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2, err
    assert len(lines) == 1 and re.match(r"rapt-audit( [a-z]+)*: error: ", lines[0]) and "Traceback" not in err, err
    assert snapshot(root) == before, "a refused command changed the user's files"
    return lines[0]


def _users_folder(root: Path) -> dict[str, Path]:
    """What a user keeps: notes, a JSON Lines file, a result, a benchmark file."""
    notes = root / "notes.txt"
    notes.write_text("my rent is due on friday\nsee you at the clinic\n", encoding="utf-8")
    records = root / "reviews.jsonl"
    records.write_text('{"body": "the room was cold", "stars": 1.10}\n', encoding="utf-8")
    results = write_sweep(root / "sweep", {"eta=25": fake_result(eta=25.0), "eta=75": fake_result(eta=75.0)})
    bench = root / "bench.toml"
    bench.write_text(BENCH, encoding="utf-8")
    return {"notes": notes, "records": records, "results": results, "bench": bench}


@SETTINGS
@given(seed=BAD_SEEDS, command=st.sampled_from(["run", "sweep", "privatize", "calibrate", "audit"]))
def test_a_bad_seed_is_refused_by_every_command_that_takes_one(capsys, seed, command):
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        files = _users_folder(root)
        argv = {
            "run": ["run", "--defense", "t2t", "--profile", "smoke", f"--seed={seed}", "--dry-run"],
            "sweep": ["run", "--defense", "t2t", "--profile", "smoke", "--sweep", f"seed=0,{seed}",
                      "--out", str(root / "new"), "--dry-run"],
            "privatize": ["privatize", str(files["notes"]), "--defense", "t2t", f"--seed={seed}",
                          "--out", str(root / "out.txt")],
            "calibrate": ["calibrate", "--defense", "t2t", "--eta", "75", f"--seed={seed}"],
            "audit": ["audit", "--defense", "t2t", "--set", "eta=5", f"--seed={seed}", "--samples", "100"],
        }[command]
        before = snapshot(root)
        capsys.readouterr()
        line = _refused(_exit_code(argv), capsys, before, root)
        assert "seed" in line


@SETTINGS
@given(value=OVERFLOWING, where=st.sampled_from(["set", "sweep", "privatize", "calibrate", "benchmark"]))
def test_a_number_that_reads_as_infinity_is_refused_wherever_it_is_read(capsys, value, where):
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        files = _users_folder(root)
        bench = root / "big.toml"
        bench.write_text(BENCH.replace("eta = [25, 75]", f"eta = [25, {value}]"), encoding="utf-8")
        argv = {
            "set": ["run", "--defense", "t2t", "--profile", "smoke", "--set", f"eta={value}", "--dry-run"],
            "sweep": ["run", "--defense", "t2t", "--profile", "smoke", "--sweep", f"eta=25,{value}",
                      "--out", str(root / "new"), "--dry-run"],
            "privatize": ["privatize", str(files["notes"]), "--defense", "t2t", "--set", f"eta={value}",
                          "--out", str(root / "out.txt")],
            "calibrate": ["calibrate", "--defense", "t2t", "--eta", f"75,{value}"],
            "benchmark": ["benchmark", "run", str(bench), "--dry-run", "--out", str(root / "new")],
        }[where]
        before = snapshot(root)
        capsys.readouterr()
        line = _refused(_exit_code(argv), capsys, before, root)
        assert "infinity" in line


@SETTINGS
@given(bad=NOT_UTF8, line=st.integers(0, BENCH.count("\n")), where=st.sampled_from(["comment", "string"]))
def test_a_benchmark_file_that_is_not_utf8_is_named_at_its_line(capsys, bad, line, where):
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        _users_folder(root)
        rows = BENCH.encode().split(b"\n")
        inserted = b"# caf" + bad if where == "comment" else b'description = "caf' + bad + b'"'
        rows.insert(line, inserted)
        bench = root / "broken.toml"
        bench.write_bytes(b"\n".join(rows))
        before = snapshot(root)
        capsys.readouterr()
        message = _refused(_exit_code(["benchmark", "run", str(bench), "--dry-run", "--out", str(root / "new")]),
                           capsys, before, root)
        assert f"{bench}:{line + 1}:" in message and "not UTF-8" in message, message


@SETTINGS
@given(name=BAD_NAMES)
def test_a_benchmark_name_that_cannot_name_a_folder_is_refused_by_the_dry_run(capsys, name):
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        _users_folder(root)
        bench = root / "named.toml"
        bench.write_text(f"name = {_toml_string(name)}\n" + BENCH, encoding="utf-8")
        before = snapshot(root)
        capsys.readouterr()
        message = _refused(_exit_code(["benchmark", "run", str(bench), "--dry-run"]), capsys, before, root)
        assert f"{bench}:1:" in message, message


def _same_file(root: Path, target: Path, how: str, depth: int) -> Path:
    """A path that names ``target`` another way: ``how`` in relative, dotdot, links (a chain of ``depth``), hardlink."""
    if how == "relative":
        return Path(os.path.relpath(target, Path.cwd()))
    if how == "dotdot":
        (root / "d").mkdir(exist_ok=True)
        return root / "d" / ".." / target.relative_to(root)
    if how == "hardlink":
        os.link(target, root / "hard")
        return root / "hard"
    previous = target
    for i in range(depth):
        link = root / f"link{i}"
        link.symlink_to(previous)
        previous = link
    return previous


@SETTINGS
@given(how=st.sampled_from(["relative", "dotdot", "links", "hardlink"]), depth=st.integers(1, 4),
       command=st.sampled_from(["privatize --out", "privatize --sidecar", "privatize jsonl", "report",
                                "leaderboard", "leaderboard --preamble", "benchmark report"]))
def test_an_output_that_is_an_input_reached_another_way_is_refused(capsys, how, depth, command):
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        files = _users_folder(root)
        result = next((files["results"]).rglob("result.json"))
        bench = benchmark_folder(root / "bench-out")
        target = {"privatize --out": files["notes"], "privatize --sidecar": files["notes"],
                  "privatize jsonl": files["records"], "report": result, "leaderboard": result,
                  "leaderboard --preamble": files["notes"], "benchmark report": bench / "benchmark.json"}[command]
        path = str(_same_file(root, target, how, depth))
        argv = {
            "privatize --out": ["privatize", str(files["notes"]), "--defense", "identity", "--out", path],
            "privatize --sidecar": ["privatize", str(files["notes"]), "--defense", "identity",
                                    "--out", str(root / "o.txt"), "--sidecar", path],
            "privatize jsonl": ["privatize", str(files["records"]), "--field", "body", "--defense", "identity",
                                "--out", path],
            "report": ["report", str(files["results"]), "--out", path],
            "leaderboard": ["leaderboard", str(files["results"]), "--out", path],
            "leaderboard --preamble": ["leaderboard", str(files["results"]), "--out", path, "--preamble", str(files["notes"])],
            "benchmark report": ["benchmark", "report", str(bench), "--out", path],
        }[command]
        before = snapshot(root)
        capsys.readouterr()
        message = _refused(_exit_code(argv), capsys, before, root)
        assert "same file" in message, message
