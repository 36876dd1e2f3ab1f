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

import contextlib
import json
import os
import re
import signal
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


# ------------------------------------------------ issue 60: deep nesting, huge integers, odd files, impossible values

#: How deep a generated file nests lists or tables (Python's parsers recurse once a level).
DEEP = st.integers(1_000, 5_000)
#: Integers too large for a float: 310 to 5,000 digits (past 4,300 Python refuses to turn the text into an int).
HUGE_INTS = st.builds("{}{}".format, st.integers(1, 9), st.integers(309, 4_999).map(lambda n: "9" * n))
#: Where a TOML or JSON file is read: a run's config (TOML, JSON), a benchmark file, a result read by each reader.
FILE_PLACES = st.sampled_from(["config.toml", "config.json", "benchmark", "report", "leaderboard", "claims", "slim",
                               "check"])


def _nested(depth: int, fmt: str, table: bool) -> str:
    """A value nested ``depth`` deep, as lists or as tables, in TOML or JSON."""
    if table:
        key = '{"a": ' if fmt == "json" else "{a = "
        return key * depth + "1" + "}" * depth
    return "[" * depth + "]" * depth


def _bad_file_argv(root: Path, place: str, value: str) -> tuple[list[str], Path]:
    """The command that reads a file holding ``value`` where a number or a table may stand, and that file."""
    if place.startswith("config"):
        fmt = place.split(".")[1]
        path = root / place
        path.write_text(f'{{"defense_args": {{"eta": {value}}}}}' if fmt == "json" else f"[defense_args]\neta = {value}\n",
                        encoding="utf-8")
        return ["run", "--defense", "t2t", "--profile", "smoke", "--config", str(path), "--dry-run"], path
    if place == "benchmark":
        path = root / "deep.toml"
        path.write_text(BENCH.replace("eta = [25, 75]", f"eta = [25, {value}]"), encoding="utf-8")
        return ["benchmark", "run", str(path), "--dry-run", "--out", str(root / "new")], path
    cell = root / "bad" / "eta=5"
    cell.mkdir(parents=True)
    text = fake_result(eta=5.0).to_dict()
    text["dataset"]["notes"] = {"deep": "PLACEHOLDER"}
    path = cell / "result.json"
    path.write_text(json.dumps(text).replace('"PLACEHOLDER"', value), encoding="utf-8")
    argv = {"report": ["report", str(root / "bad"), "--out", str(root / "r.html")],
            "leaderboard": ["leaderboard", str(root / "bad"), "--out", str(root / "lb.md")],
            "claims": ["claims", str(root / "bad")],
            "slim": ["slim", str(root / "bad")],
            "check": ["check", str(root / "bad"), "--baseline", str(path)]}[place]
    return argv, path


def _names_the_file(line: str, path: Path) -> None:
    assert str(path) in line or path.name in line, line
    assert len(line) < 1_500, f"the message echoes the whole value ({len(line)} characters)"


@SETTINGS
@given(depth=DEEP, table=st.booleans(), place=FILE_PLACES)
def test_a_file_nested_thousands_deep_is_refused_wherever_it_is_read(capsys, depth, table, place):
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        _users_folder(root)
        fmt = "json" if place == "config.json" or place not in ("config.toml", "benchmark") else "toml"
        argv, path = _bad_file_argv(root, place, _nested(depth, fmt, table))
        before = snapshot(root)
        capsys.readouterr()
        line = _refused(_exit_code(argv), capsys, before, root)
        _names_the_file(line, path)
        assert "deep" in line, line


@SETTINGS
@given(digits=HUGE_INTS, sign=st.sampled_from(["", "-"]), place=FILE_PLACES)
def test_an_integer_too_large_for_a_float_is_refused_wherever_a_file_is_read(capsys, digits, sign, place):
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        _users_folder(root)
        argv, path = _bad_file_argv(root, place, sign + digits)
        if place not in ("config.toml", "config.json", "benchmark"):  # a measure's value, which reports format
            doc = path.read_text(encoding="utf-8")
            path.write_text(doc.replace('"value": 0.8', f'"value": {sign}{digits}', 1), encoding="utf-8")
        before = snapshot(root)
        capsys.readouterr()
        line = _refused(_exit_code(argv), capsys, before, root)
        _names_the_file(line, path)
        assert "too large" in line, line


def odd_file(path: Path, kind: str) -> None:
    """``path`` made a FIFO, a folder, or a link to a character device (``/dev/null``)."""
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "directory":
        path.mkdir()
    else:
        path.symlink_to(os.devnull)


class _Hung(Exception):
    pass


def _within(seconds: int):
    """Fail instead of hanging: a FIFO opened for reading waits forever for a writer."""
    @contextlib.contextmanager
    def guard():
        def hung(signum, frame):
            raise _Hung(f"the command hung for {seconds} s (it opened a FIFO)")
        previous = signal.signal(signal.SIGALRM, hung)
        signal.alarm(seconds)
        try:
            yield
        finally:
            signal.alarm(0)
            signal.signal(signal.SIGALRM, previous)
    return guard()


@SETTINGS
@given(kind=st.sampled_from(["fifo", "directory", "device"]),
       place=st.sampled_from(["config", "benchmark", "report", "leaderboard", "claims"]))
def test_a_file_that_is_not_a_regular_file_is_refused_without_being_opened(capsys, kind, place):
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        _users_folder(root)
        if place in ("config", "benchmark"):
            path = root / ("config.toml" if place == "config" else "odd.toml")
            argv = (["run", "--defense", "t2t", "--profile", "smoke", "--config", str(path), "--dry-run"]
                    if place == "config" else ["benchmark", "run", str(path), "--dry-run", "--out", str(root / "n")])
        else:
            (root / "odd" / "eta=5").mkdir(parents=True)
            path = root / "odd" / "eta=5" / "result.json"
            argv = {"report": ["report", str(root / "odd"), "--out", str(root / "r.html")],
                    "leaderboard": ["leaderboard", str(root / "odd"), "--out", str(root / "lb.md")],
                    "claims": ["claims", str(root / "odd")]}[place]
        odd_file(path, kind)
        before = snapshot(root)
        capsys.readouterr()
        with _within(10):
            code = _exit_code(argv)
        line = _refused(code, capsys, before, root)
        _names_the_file(line, path)
        assert "not a regular file" in line, line


#: Estimates no measurement can give: a bounded measure outside [0, 1], or an interval that leaves out its value.
IMPOSSIBLE = st.one_of(
    st.tuples(st.floats(1.001, 1e300), st.just(-3.0), st.just(1e300)),
    st.tuples(st.floats(0.0, 0.4), st.floats(0.5, 0.9), st.just(0.95)),
    st.tuples(st.floats(-1e300, -0.001), st.just(-1e300), st.just(0.5)))


@SETTINGS
@given(estimate=IMPOSSIBLE, field=st.sampled_from(["utility", "attack"]),
       command=st.sampled_from(["report", "leaderboard", "claims", "check"]))
def test_a_result_with_impossible_values_is_refused_by_name(capsys, estimate, field, command):
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        _users_folder(root)
        doc = fake_result(eta=5.0).to_dict()
        target = doc["utility"]["accuracy"] if field == "utility" else doc["attacks"]["whitebox"]["empirical_privacy"]
        target.update(value=estimate[0], ci_low=estimate[1], ci_high=estimate[2])
        target.pop("per_record", None)
        (root / "bad" / "eta=5").mkdir(parents=True)
        path = root / "bad" / "eta=5" / "result.json"
        path.write_text(json.dumps(doc), encoding="utf-8")
        argv = {"report": ["report", str(root / "bad"), "--out", str(root / "r.html")],
                "leaderboard": ["leaderboard", str(root / "bad"), "--out", str(root / "lb.md")],
                "claims": ["claims", str(root / "bad")],
                "check": ["check", str(root / "bad"), "--baseline", str(path)]}[command]
        before = snapshot(root)
        capsys.readouterr()
        line = _refused(_exit_code(argv), capsys, before, root)
        _names_the_file(line, path)
        assert ("utility.accuracy" if field == "utility" else "attacks.whitebox.empirical_privacy") in line, line
