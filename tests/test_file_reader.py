"""Issue 60, items 3 and 4: one reader for every TOML and JSON file, and folders that cannot be written.

The reader (:func:`rapt_audit.api.parsing.read_document`) refuses, each with one line naming the file: what is not a
regular file (before opening it: a FIFO would hang the command), a file over the size limit, nesting deeper than the
depth limit, and an integer too large for a float. A result file whose values no measurement can give is refused by
the result schema, naming the field and the rule. A folder that cannot be created or written is one line too.
"""

from __future__ import annotations

import errno
import json
import os
import re
import sys
from pathlib import Path

import pytest

from rapt_audit.api import parsing
from rapt_audit.api.errors import ResultError, UsageError
from rapt_audit.api.locks import hold_out_dir
from rapt_audit.api.parsing import MAX_DEPTH, DocumentError, FloatRangeError, read_document
from rapt_audit.cli.main import main
from rapt_audit.pipeline.results import read_result
from rapt_audit.reporting.collect import collect
from tests.result_factory import fake_result, t2t_sweep, write_sweep
from tests.test_bad_input_property import odd_file
from tests.test_output_rule import snapshot

REPO = Path(__file__).resolve().parent.parent


def _one_line(capsys: pytest.CaptureFixture[str], code: int, *says: str) -> str:
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2, err
    assert len(lines) == 1 and lines[0].startswith("rapt-audit") and "error: " in lines[0], err
    assert "Traceback" not in err, err
    for text in says:
        assert text in lines[0], lines[0]
    return lines[0]


# ------------------------------------------------------------------------------------------------ the reader


@pytest.mark.parametrize("name, text", [
    ("deep.json", "[" * 3000 + "]" * 3000),
    ("deep.json", '{"a": ' * 3000 + "1" + "}" * 3000),
    ("deep.toml", "x = " + "[" * 3000 + "]" * 3000),
    ("deep.toml", "x = " + "{a = " * 3000 + "1" + "}" * 3000),
    ("shallow.json", "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1)),
])
def test_nesting_past_the_depth_limit_is_refused_naming_the_file(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    with pytest.raises(DocumentError, match=rf"{re.escape(str(path))}.*deeper than {MAX_DEPTH}"):
        read_document(path, source=str(path))


def test_nesting_within_the_limit_is_read(tmp_path):
    path = tmp_path / "ok.json"
    path.write_text("[" * MAX_DEPTH + "]" * MAX_DEPTH, encoding="utf-8")
    assert read_document(path, source=str(path))[1] is not None


@pytest.mark.parametrize("digits", [310, 401, 4_300, 4_301, 5_000])
@pytest.mark.parametrize("fmt", ["json", "toml"])
def test_an_integer_too_large_for_a_float_is_refused_at_its_line(tmp_path, digits, fmt):
    path = tmp_path / f"big.{fmt}"
    big = "9" * digits
    path.write_text('{\n"seed": 1,\n"x": ' + big + "\n}" if fmt == "json" else f"seed = 1\n\nx = {big}\n",
                    encoding="utf-8")
    with pytest.raises(FloatRangeError, match="too large") as caught:
        read_document(path, source=str(path))
    assert caught.value.line == 3 and len(str(caught.value)) < 500, str(caught.value)


def test_the_largest_integers_a_float_holds_are_read(tmp_path):
    path = tmp_path / "ok.json"
    path.write_text(json.dumps({"x": 2**1023, "seed": 2**32 - 1}), encoding="utf-8")
    assert read_document(path, source=str(path))[1] == {"x": 2**1023, "seed": 2**32 - 1}


@pytest.mark.parametrize("kind", ["fifo", "directory", "device"])
def test_what_is_not_a_regular_file_is_refused_before_it_is_opened(tmp_path, kind, monkeypatch):
    path = tmp_path / "result.json"
    odd_file(path, kind)
    opened = []

    def never(*args, **_kwargs):  # opening a FIFO with no writer would hang: the test fails instead
        opened.append(args)
        raise AssertionError(f"opened {args[0]}")

    monkeypatch.setattr(parsing, "open", never, raising=False)  # the reader's own name for the built-in open
    with pytest.raises(DocumentError, match=f"{re.escape(str(path))}: is not a regular file"):
        read_document(path, source=str(path))
    assert not opened


def test_a_file_over_the_size_limit_is_refused_before_it_is_read(tmp_path, monkeypatch):
    monkeypatch.setattr(parsing, "MAX_FILE_BYTES", 100)
    path = tmp_path / "big.json"
    path.write_text(json.dumps({"x": "a" * 200}), encoding="utf-8")
    with pytest.raises(DocumentError, match="larger than"):
        read_document(path, source=str(path))


def test_a_missing_file_is_named(tmp_path):
    with pytest.raises(DocumentError, match="does not exist"):
        read_document(tmp_path / "absent.toml", source="config file absent.toml")


# ----------------------------------------------------------------------------------------- results and reports


def _cell(root: Path, text: str) -> Path:
    cell = root / "eta=5"
    cell.mkdir(parents=True)
    (cell / "result.json").write_text(text, encoding="utf-8")
    return cell / "result.json"


def _with_value(value: str) -> str:
    doc = json.dumps(fake_result(eta=5.0).to_dict())
    return doc.replace('"value": 0.8', f'"value": {value}', 1)


@pytest.mark.parametrize("text, says", [
    ('{"schema": ' + "[" * 3000 + "]" * 3000 + "}", "deeper than"),
    (_with_value("9" * 401), "too large"),
    (_with_value("9" * 5000), "too large"),
])
def test_a_bad_result_among_good_ones_is_left_out_as_a_corrupt_one_is(tmp_path, text, says):
    root = t2t_sweep(tmp_path / "sweep")
    bad = _cell(root, text)
    found = collect([root])
    assert len(found.results) == 4
    assert [(p.path, p.kind) for p in found.problems] == [(bad, "corrupt")]
    assert says in found.problems[0].message and str(bad) in found.problems[0].message


def test_a_fifo_among_results_does_not_hang_the_leaderboard(tmp_path, capsys):
    root = t2t_sweep(tmp_path / "sweep")
    (root / "eta=5").mkdir()
    os.mkfifo(root / "eta=5" / "result.json")
    found = collect([root])
    assert len(found.results) == 4 and "not a regular file" in found.problems[0].message
    assert main(["leaderboard", str(root), "--out", str(tmp_path / "lb.md")]) == 0
    assert "not a regular file" in capsys.readouterr().err


@pytest.mark.parametrize("where, value, low, high, rule", [
    ("utility.accuracy", 5.0, -3.0, 1e300, "must lie in [0, 1]"),
    ("utility.accuracy", 0.3, 0.5, 0.9, "interval"),
    ("attacks.whitebox.empirical_privacy", 0.3, 0.4, 0.5, "interval"),
    ("attacks.whitebox.metrics.token_accuracy", 1.5, 1.4, 1.6, "must lie in [0, 1]"),
    ("attacks.whitebox.empirical_privacy", 0.5, 0.6, 0.4, "interval"),
])
def test_impossible_values_are_refused_by_the_schema_naming_field_and_rule(tmp_path, where, value, low, high, rule):
    doc = fake_result(eta=5.0).to_dict()
    target = doc
    for key in where.split("."):
        target = target[key]
    target.update(value=value, ci_low=low, ci_high=high)
    path = _cell(tmp_path, json.dumps(doc))
    with pytest.raises(ResultError) as caught:
        read_result(path)
    message = str(caught.value)
    assert str(path) in message and where in message and rule in message, message
    assert len(message) < 700 and "e+300" in message or "1e300" not in message, message


def test_an_unbounded_measure_may_exceed_one(tmp_path):
    doc = fake_result(eta=5.0).to_dict()
    doc["attacks"]["whitebox"]["metrics"]["reconstruction_mse"] = {"value": 42.0, "ci_low": 40.0, "ci_high": 44.0,
                                                                   "n": 100, "method": "bootstrap-percentile", "level": 0.95}
    doc["attacks"]["whitebox"]["empirical_privacy"].update(value=42.0, ci_low=40.0, ci_high=44.0)
    assert read_result(_cell(tmp_path, json.dumps(doc))).attacks["whitebox"].empirical_privacy.value == 42.0


def test_every_committed_result_still_reads():
    files = sorted(REPO.glob("reports/*/*/result.json"))
    assert files
    for path in files[::25]:  # a sample here; the full loop is run by hand (issue 60)
        read_result(path)


# ----------------------------------------------------------------------------------- folders that cannot be written


def _read_only(monkeypatch, error: OSError) -> None:
    real = Path.mkdir

    def mkdir(self, *args, **kwargs):
        if not self.exists():
            raise error
        return real(self, *args, **kwargs)
    monkeypatch.setattr(Path, "mkdir", mkdir)


@pytest.mark.parametrize("error", [PermissionError(errno.EACCES, "Permission denied"),
                                   OSError(errno.EROFS, "Read-only file system")])
def test_the_lock_of_a_folder_that_cannot_be_created_is_one_line(tmp_path, monkeypatch, error):
    _read_only(monkeypatch, error)
    with pytest.raises(UsageError, match=rf"{re.escape(str(tmp_path / 'out'))}.*{error.strerror}"):
        with hold_out_dir(tmp_path / "out"):
            pass


def test_a_lock_file_that_cannot_be_created_is_one_line(tmp_path, monkeypatch):
    real = os.open

    def refuse(path, *args, **kwargs):
        if str(path).endswith(".rapt-audit.lock"):
            raise OSError(errno.EROFS, "Read-only file system")
        return real(path, *args, **kwargs)
    monkeypatch.setattr(os, "open", refuse)
    with pytest.raises(UsageError, match=rf"{re.escape(str(tmp_path))}.*Read-only file system.*--out"):
        with hold_out_dir(tmp_path):
            pass


@pytest.mark.parametrize("argv", [
    ["run", "--defense", "t2t", "--profile", "smoke", "--dataset", "synthetic", "--out", "{root}/new"],
    ["run", "--defense", "t2t", "--profile", "smoke", "--dataset", "synthetic", "--sweep", "eta=25,75",
     "--out", "{root}/new"],
    ["report", "{root}/sweep", "--out", "{root}/new/report.html"],
])
def test_a_read_only_output_folder_is_one_line_from_each_command(tmp_path, monkeypatch, capsys, argv):
    write_sweep(tmp_path / "sweep", {"eta=25": fake_result(eta=25.0), "eta=75": fake_result(eta=75.0)})
    _read_only(monkeypatch, OSError(errno.EROFS, "Read-only file system"))
    before = snapshot(tmp_path)
    capsys.readouterr()
    code = main([a.format(root=tmp_path) for a in argv])
    _one_line(capsys, code, str(tmp_path / "new"), "Read-only file system")
    assert snapshot(tmp_path) == before


def test_a_stray_os_error_is_one_line_not_a_traceback(monkeypatch, capsys):
    def broken(args):
        raise OSError(errno.EIO, "Input/output error", "/some/where")
    monkeypatch.setattr(sys.modules["rapt_audit.cli.main"], "cmd_ls", broken)
    _one_line(capsys, main(["ls"]), "/some/where", "Input/output error")
