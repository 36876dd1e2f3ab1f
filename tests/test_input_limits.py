"""Issue 43, items 3, 4 and 6: no silent "no privacy", bounded work, and a message (never a traceback) for bad
settings and input files.

* A finite-looking number that reads as infinity (``1e309``) is refused wherever a value is parsed (``--set``,
  ``--sweep``, config files, benchmark grids, plugins built in Python); infinity is only ever spelled so.
* Grids are counted from their axes' lengths before any cell is built and refused over ``--max-cells``; the
  duplicate checks are linear (counted comparisons, never timings).
* Seeds out of range, a byte-order mark, a byte that is not UTF-8, an over-long benchmark name and a loop of
  links where a result belongs each get one line and exit 2.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest

from rapt_audit.api import parsing
from rapt_audit.api.errors import PrivacyParameterError, UsageError
from rapt_audit.api.params import coerce, make_plugin
from rapt_audit.api.plugins import DEFENSES, load
from rapt_audit.benchmark import spec, validate
from rapt_audit.benchmark.join import join
from rapt_audit.benchmark.spec import BenchmarkError, check_seeds
from rapt_audit.benchmark.validate import load_benchmark
from rapt_audit.cli.main import main
from rapt_audit.cli.privatize import replacement_summary
from rapt_audit.mechanisms.noise import check_eta
from rapt_audit.pipeline import sweep
from rapt_audit.pipeline.cell_limit import DEFAULT_MAX_CELLS
from rapt_audit.pipeline.config import build_config, load_config_file
from tests.result_factory import benchmark_folder

BENCH = """\
profile = "smoke"
seeds = [0]

[datasets]
utility = "synthetic"

[defenses.t2t]
eta = [25, 75]
"""


def _one_line_error(capsys: pytest.CaptureFixture[str], *says: str) -> str:
    """The command's standard error: one ``rapt-audit: error:`` line, no traceback, holding every ``says``."""
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err and err.count("\n") == 0 and err.startswith("rapt-audit: error:"), err
    for text in says:
        assert text in err, err
    return err


def _write(path: Path, text: str | bytes) -> Path:
    path.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8"))
    return path


# ---------------------------------------------------------------- item 3: infinity only when spelled so


@pytest.mark.parametrize("text", ["inf", "INF", "+inf", "Infinity", "∞", " inf "])
def test_infinity_is_read_only_from_its_spellings(text):
    assert parsing.parse_float(text, key="eta") == math.inf
    assert coerce(text, float, key="t2t.eta") == math.inf


@pytest.mark.parametrize("text", ["1e309", "1E309", "+1e309", "-1e400", "1e-400", "179769313486231590000e290"])
def test_a_finite_looking_number_out_of_the_float_range_is_refused(text):
    with pytest.raises(UsageError, match=r"too (large|small) for a float"):
        coerce(text, float, key="t2t.eta")
    with pytest.raises(UsageError, match="too large|too small"):
        coerce(text, float | None, key="pct2t.replacement")  # an optional float: the same rule


def test_a_plugin_built_in_python_refuses_an_integer_too_large_for_a_float():
    load()
    with pytest.raises(UsageError, match="too large for a float"):
        DEFENSES.get("t2t")(eta=10**400)  # once read as infinity: no privacy
    with pytest.raises(PrivacyParameterError, match="too large for a float"):
        check_eta(10**400)  # the public validator, called with a raw value
    with pytest.raises(UsageError, match="too large for a float"):
        make_plugin(DEFENSES, "dpnr", {"epsilon": 10**400})


def test_set_eta_1e309_is_refused_by_run_and_privatize(tmp_path, capsys):
    assert main(["run", "--defense", "t2t", "--profile", "smoke", "--set", "eta=1e309", "--dry-run"]) == 2
    _one_line_error(capsys, "eta=1e309", "too large for a float", "inf")
    text = _write(tmp_path / "in.txt", "my rent is due\n")
    out = tmp_path / "out.txt"
    assert main(["privatize", str(text), "--defense", "t2t", "--set", "eta=1e309", "--out", str(out)]) == 2
    _one_line_error(capsys, "eta=1e309", "too large for a float")
    assert not out.exists()


def test_a_sweep_value_that_reads_as_infinity_is_refused(tmp_path, capsys):
    code = main(["run", "--defense", "t2t", "--profile", "smoke", "--sweep", "eta=25,1e309",
                 "--out", str(tmp_path / "sweep"), "--dry-run"])
    assert code == 2
    _one_line_error(capsys, "eta=1e309", "too large for a float")


@pytest.mark.parametrize("name, text, line", [
    ("c.toml", "seed = 1\n\n[defense_args]\neta = 1e309\n", 4),
    ("c.json", '{"seed": 1,\n "defense_args": {"eta": 1e999}}', 2),
])
def test_a_config_file_value_that_reads_as_infinity_is_refused_at_its_line(tmp_path, name, text, line):
    path = _write(tmp_path / name, text)
    with pytest.raises(UsageError, match=rf"line {line}: .* too large for a float"):
        load_config_file(path)
    spelled = _write(tmp_path / f"ok{path.suffix}", "[defense_args]\neta = inf\n" if name.endswith("toml")
                     else '{"defense_args": {"eta": "inf"}}')
    assert build_config(file=spelled).defense_args["eta"] in ("inf", math.inf)


def test_a_benchmark_grid_value_that_reads_as_infinity_is_refused_at_its_line(tmp_path, capsys):
    path = _write(tmp_path / "b.toml", BENCH.replace("eta = [25, 75]", "eta = [25, 1e309]"))
    assert main(["benchmark", "run", str(path), "--dry-run", "--out", str(tmp_path / "out")]) == 2
    _one_line_error(capsys, f"{path}:8:", "1e309", "too large for a float")
    written = _write(tmp_path / "s.toml", BENCH.replace("eta = [25, 75]", 'eta = [25, "1e309"]'))
    with pytest.raises(BenchmarkError, match="too large for a float"):
        load_benchmark(written, check_data=False)
    spelled = _write(tmp_path / "i.toml", BENCH.replace("eta = [25, 75]", "eta = [25, inf]"))
    assert load_benchmark(spelled, check_data=False).defenses[0].points()[-1] == (("eta", "inf"),)


def test_the_summary_counts_every_unit_released_unchanged_as_sent_in_the_clear():
    # eta = inf: every unit went through the mechanism and came out as itself.
    units = {"perturbed": 18, "replaced": 0, "passed": 0, "dropped": 0}
    text = replacement_summary(units, 18)
    assert "0 of 18 unit(s) replaced; 18 of 18 sent in the clear" in text and "output is the input" in text
    assert "0 sent in the clear" not in text
    # PCT2T: words outside the selected categories, and privatized words that drew themselves.
    text = replacement_summary({"perturbed": 6, "replaced": 4, "passed": 3, "dropped": 0}, 5)
    assert text == ("4 of 9 unit(s) replaced; 5 of 9 sent in the clear (released unchanged: 3 not privatized, "
                    "2 privatized as themselves)")


# ---------------------------------------------------------------- item 4: bounded work


def _never_built(monkeypatch):
    """Make building a sweep cell or a benchmark grid point fail the test: a refusal must come first."""
    def boom(*args, **kwargs):
        raise AssertionError("a cell was built before the count was checked")

    monkeypatch.setattr(sweep, "build_config", boom)
    monkeypatch.setattr(validate, "make_plugin", boom)


def test_a_sweep_grid_over_the_limit_is_refused_before_any_cell_is_built(tmp_path, capsys, monkeypatch):
    _never_built(monkeypatch)
    values = ",".join(str(v) for v in range(1, 101))
    args = ["run", "--defense", "t2t", "--profile", "smoke", "--sweep", f"eta={values}", "--sweep",
            f"seed={','.join(str(s) for s in range(100))}", "--out", str(tmp_path / "s"), "--dry-run"]
    assert main(args) == 2
    _one_line_error(capsys, "10,000 cells", "100 × 100", f"limit of {DEFAULT_MAX_CELLS:,}", "--max-cells 10000")
    assert main(args[:-1] + ["--max-cells", "0", "--dry-run"]) == 2
    _one_line_error(capsys, "--max-cells must be a whole number >= 1")


def test_max_cells_raises_and_lowers_the_limit_of_a_sweep(tmp_path):
    axes = sweep.parse_axes(["eta=25,75,inf"])
    with pytest.raises(UsageError, match="3 cells.*limit of 2.*--max-cells 3"):
        sweep.expand(axes=axes, file=None, cli={"defense": "t2t"}, sets=[], out=tmp_path, max_cells=2)
    assert len(sweep.expand(axes=axes, file=None, cli={"defense": "t2t"}, sets=[], out=tmp_path, max_cells=3)) == 3


def test_a_small_benchmark_file_with_a_million_cells_is_refused_before_any_point_is_built(tmp_path, capsys,
                                                                                         monkeypatch):
    grid = "\n".join(f"{key} = [{', '.join(str(v) for v in values)}]" for key, values in
                     (("eta", range(1, 101)), ("epochs", range(1, 101)), ("batch_size", range(1, 101))))
    path = _write(tmp_path / "big.toml", BENCH.replace("eta = [25, 75]", grid))
    assert path.stat().st_size < 1500  # a small file
    _never_built(monkeypatch)
    assert main(["benchmark", "run", str(path), "--dry-run", "--out", str(tmp_path / "out")]) == 2
    _one_line_error(capsys, "1,000,000 cells", "t2t 100 × 100 × 100 point(s)", "--max-cells 1000000")


def test_max_cells_raises_and_lowers_the_limit_of_a_benchmark(tmp_path, capsys):
    path = _write(tmp_path / "b.toml", BENCH)
    assert main(["benchmark", "run", str(path), "--dry-run", "--out", str(tmp_path / "o"), "--max-cells", "1"]) == 2
    _one_line_error(capsys, "2 cells", "--max-cells 2")
    assert len(load_benchmark(path, check_data=False, max_cells=2).defenses[0].points()) == 2


class _Seed(int):
    """An int that counts how often it is compared for equality."""

    comparisons = 0

    def __eq__(self, other: object) -> bool:
        _Seed.comparisons += 1
        return int.__eq__(self, other)

    __hash__ = int.__hash__


def test_the_duplicate_seed_check_is_linear_in_the_seeds(tmp_path):
    seeds = [_Seed(s) for s in range(3000)]
    _Seed.comparisons = 0
    assert check_seeds(tmp_path / "b.toml", "seeds = [...]", seeds) == tuple(range(3000))
    assert _Seed.comparisons < 3 * len(seeds)  # list.count per seed made 9,000,000
    with pytest.raises(BenchmarkError, match="seeds lists 7 more than once"):
        check_seeds(tmp_path / "b.toml", "seeds = [...]", [_Seed(s) for s in (*range(10), 7)])


def test_the_sweep_duplicate_checks_use_one_counting_pass(monkeypatch):
    calls = []
    monkeypatch.setattr(sweep, "repeated", lambda items: calls.append(list(items)) or [])
    sweep.parse_axes(["eta=1,2,3", "seed=0,1"])  # each axis's values, then the keys: one call each, no .count
    assert calls == [["1", "2", "3"], ["0", "1"], ["eta", "seed"]]
    assert parsing.repeated(["a", "b", "a", "c", "b", "a"]) == ["a", "b"]


# ---------------------------------------------------------------- item 6: seeds, files, names, links


@pytest.mark.parametrize("seed", ["-1", "4294967296"])
def test_a_seed_out_of_range_is_one_line_in_run_privatize_and_sweeps(tmp_path, capsys, seed):
    assert main(["run", "--defense", "t2t", "--profile", "smoke", "--seed", seed, "--dry-run"]) == 2
    _one_line_error(capsys, f"seed={seed}", "0 to 4294967295")
    text = _write(tmp_path / "in.txt", "my rent is due\n")
    assert main(["privatize", str(text), "--defense", "t2t", "--seed", seed, "--out", str(tmp_path / "o.txt")]) == 2
    _one_line_error(capsys, f"seed={seed}")
    assert main(["run", "--defense", "t2t", "--profile", "smoke", "--sweep", f"seed={seed},0",
                 "--out", str(tmp_path / "s"), "--dry-run"]) == 2
    _one_line_error(capsys, "not a seed")
    path = _write(tmp_path / "b.toml", BENCH.replace("seeds = [0]", f"seeds = [0, {seed}]"))
    with pytest.raises(BenchmarkError, match="0 to 4294967295" if seed != "-1" else "from 0"):
        load_benchmark(path, check_data=False)


def test_a_byte_order_mark_is_accepted_in_benchmark_and_config_files(tmp_path):
    bench = load_benchmark(_write(tmp_path / "b.toml", b"\xef\xbb\xbf" + BENCH.encode()), check_data=False)
    assert bench.profile == "smoke" and len(bench.defenses[0].points()) == 2
    assert build_config(file=_write(tmp_path / "c.toml", b"\xef\xbb\xbfseed = 3\n")).seed == 3


def test_a_byte_that_is_not_utf8_is_named_at_its_line_and_column(tmp_path, capsys):
    path = _write(tmp_path / "b.toml", BENCH.encode().replace(b'utility = "synthetic"', b'utility = "caf\xe9"'))
    with pytest.raises(BenchmarkError, match=r"column 15: not UTF-8 text \(byte 0xe9") as caught:
        load_benchmark(path, check_data=False)
    assert caught.value.line == 5
    config = _write(tmp_path / "c.toml", b"seed = 1\n# caf\xe9\n")
    assert main(["run", "--config", str(config), "--dry-run"]) == 2
    _one_line_error(capsys, f"{config}:2:6: not UTF-8 text")


def test_an_overlong_benchmark_name_is_refused_by_the_dry_run(tmp_path, capsys):
    path = _write(tmp_path / "b.toml", f'name = "{"a" * 300}"\n' + BENCH)
    assert main(["benchmark", "run", str(path), "--dry-run"]) == 2
    _one_line_error(capsys, f"{path}:1:", "300 characters", "at most 100")
    # Listed, not stat'ed: where runs/ exists, a 300-character name makes stat fail (ENAMETOOLONG).
    runs = Path("runs")
    assert not (runs.is_dir() and any(p.name.startswith("benchmark-aaaa") for p in runs.iterdir()))


def test_a_cell_folder_name_stays_within_the_file_name_limit_and_distinct():
    long_a, long_b = sweep.cell_name([("model", "x" * 300 + "a")]), sweep.cell_name([("model", "x" * 300 + "b")])
    assert len(long_a) <= sweep.MAX_NAME and len(long_b) <= sweep.MAX_NAME and long_a != long_b
    assert sweep.cell_name([("eta", "25")]) == "eta=25"  # short names are unchanged


def _loop(path: Path) -> None:
    if path.exists():
        path.unlink()
    os.symlink(path.name, path)  # result.json -> result.json


def test_a_looped_result_in_a_sweep_folder_is_named_not_pending(tmp_path, capsys):
    out = tmp_path / "sweep"
    (out / "seed=0").mkdir(parents=True)
    (out / sweep.SWEEP_INDEX).write_text(json.dumps({"schema": sweep.SWEEP_SCHEMA, "cells": []}), encoding="utf-8")
    _loop(out / "seed=0" / "result.json")
    assert main(["run", "--defense", "identity", "--profile", "smoke", "--sweep", "seed=0,1", "--out", str(out),
                 "--dry-run"]) == 2
    _one_line_error(capsys, str(out / "seed=0" / "result.json"), "loop of symbolic links")


def test_a_looped_result_in_a_benchmark_folder_is_named_not_pending(tmp_path, capsys):
    out = benchmark_folder(tmp_path / "bench")
    cell = sorted(p.parent for p in out.glob("*/result.json"))[0]
    _loop(cell / "result.json")
    joined = join(out)
    assert any(str(cell / "result.json") in p.message and "loop of symbolic links" in p.message
               for p in joined.collection.problems)
    assert main(["benchmark", "run", "smoke", "--out", str(out), "--dry-run"]) == 2
    _one_line_error(capsys, str(cell / "result.json"), "loop of symbolic links")


def test_the_shipped_benchmarks_fit_the_default_limit():
    for name in spec.shipped():
        load_benchmark(name, check_data=False)  # would raise over DEFAULT_MAX_CELLS
