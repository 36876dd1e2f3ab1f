"""Benchmarks (issue 27): the declared file, its checks at the right line, cells run and reused, the report.

The end-to-end test runs a two-defense benchmark on the synthetic corpus (interrupted by its time budget
after one cell, then run again to the end) and reads its report and leaderboard; the shipped smoke
benchmark (all eight defenses) runs in the ``slow`` test.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import pytest

from rapt_audit.api.errors import UsageError
from rapt_audit.api.plugins import DEFENSES, capabilities_of, load
from rapt_audit.api.types import Estimate, Skip
from rapt_audit.benchmark.ceiling import HEAD_SERVICE, no_privacy_checks
from rapt_audit.benchmark.join import join
from rapt_audit.benchmark.locate import find_line
from rapt_audit.benchmark.matched import at_utility, matched
from rapt_audit.benchmark import run as bench_run
from rapt_audit.benchmark.plan import PLACEHOLDER_ATTACK, estimate_costs, plan_cells
from rapt_audit.benchmark.run import file_label
from rapt_audit.benchmark.spec import BenchmarkError, set_text, shipped, shipped_dir
from rapt_audit.benchmark.validate import load_benchmark
from rapt_audit.cli.main import main
from rapt_audit.reporting.pareto import Point
from rapt_audit.reporting.summary import group_results
from tests.result_factory import SIG_A, benchmark_folder, fake_result

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
SMOKE = (ROOT / "benchmarks" / "smoke.toml").read_text(encoding="utf-8")
BUILTIN = {"identity", "local", "t2t", "pct2t", "rapt", "embedding", "snd", "cape", "dpnr"}
#: The field's word-level sanitizers (issue 44): on the real-data benchmarks, not (yet) on the smoke one.
WORD = {"santext", "custext", "tem", "mahalanobis", "vickrey"}

TWO = """\
name = "two"
profile = "smoke"
seeds = [0, 1]
attacks = ["whitebox", "attribute_gender"]

[service]
method = "prompt"
epochs = 1

[datasets]
utility = "synthetic"
inversion = "synthetic"
attribute = "synthetic"

[splits]
victim_train = 30
victim_test = 20
attacker_train = 30
attacker_valid = 20

[defenses.identity]

[defenses.t2t]
eta = [25, 200]
"""


def _write(tmp_path: Path, text: str, name: str = "bench.toml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def _line_of(text: str, marker: str) -> int:
    """The 1-based line of ``text`` holding ``marker`` (found by hand, not by the code under test)."""
    return next(i for i, line in enumerate(text.splitlines(), 1) if marker in line)


# ---------------------------------------------------------------- the shipped files


def test_the_shipped_folder_is_the_repository_benchmarks_folder_and_pyproject_ships_it():
    shipped_files = {p.name: p.read_bytes() for p in shipped_dir().glob("*.toml")}
    repo_files = {p.name: p.read_bytes() for p in (ROOT / "benchmarks").glob("*.toml")}
    assert shipped_files == repo_files and {"smoke.toml", "sst2-cpu.toml", "sst2-paper.toml"} <= set(repo_files)
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]
    assert setuptools["package-dir"]["rapt_audit.benchmarks"] == "benchmarks"
    assert "*.toml" in setuptools["package-data"]["rapt_audit.benchmarks"]
    assert "costs.toml" in setuptools["package-data"]["rapt_audit.benchmark"]
    assert {"rapt_audit.benchmark", "rapt_audit.benchmarks"} <= set(setuptools["packages"])


def test_the_shipped_benchmarks_hold_every_builtin_defense_three_seeds_and_one_shape():
    load()
    # Every defense shipped with rapt-audit (registered from rapt_audit.defenses) is on the real-data benchmarks.
    shipped_defenses = {n for n in DEFENSES.names() if DEFENSES.get(n).__module__.startswith("rapt_audit.defenses.")}
    assert shipped_defenses == BUILTIN | WORD
    benches = {name: load_benchmark(name, check_data=False) for name in ("smoke", "sst2-cpu", "sst2-paper")}
    assert {b.profile for b in benches.values()} == {"smoke", "cpu", "paper"}
    for name, bench in benches.items():
        expected = BUILTIN if name == "smoke" else BUILTIN | WORD
        assert {d.name for d in bench.defenses} == expected, name
    # The smoke file stays the quick check (three seeds, prompt tuning); the two that decide follow issue 38:
    # full fine-tuning (reports/regime), at least five seeds and at least four finite settings per private defense.
    assert len(benches["smoke"].seeds) == 3 and dict(benches["smoke"].service)["method"] == "prompt"
    for name in ("sst2-cpu", "sst2-paper"):
        bench = benches[name]
        assert len(bench.seeds) >= 5 and dict(bench.service)["method"] == "full", name
        for defense in bench.defenses:
            if defense.name in {"identity", "local"}:
                continue
            finite = [value for _, values in defense.grid for value in values if str(value) != "inf"]
            assert len(defense.grid) == 1 and len(finite) >= 4, (name, defense.name, defense.grid)
    cpu, paper = benches["sst2-cpu"], benches["sst2-paper"]
    # The CPU grid is a cut of the paper grid (what two cores afford), with the same fixed settings.
    assert [d.name for d in cpu.defenses] == [d.name for d in paper.defenses]
    for small, wide in zip(cpu.defenses, paper.defenses):
        assert small.fixed == wide.fixed and {k for k, _ in small.grid} == {k for k, _ in wide.grid}
        assert all(set(values) <= set(dict(wide.grid)[k]) for k, values in small.grid), small.name
    assert cpu.datasets == paper.datasets == {"inversion": "sst2", "attribute": "trustpilot", "ner": "conll2003"}
    assert shipped() == ["smoke", "sst2-cpu", "sst2-paper"]


def test_the_smoke_dry_run_lists_every_cell_with_its_cost_and_the_total(tmp_path, capsys):
    code = main(["benchmark", "run", "smoke", "--out", str(tmp_path / "out"), "--dry-run"])
    text = capsys.readouterr().out
    # SnD's denoiser trains on WikiText-2: without the data folder the dry run lists the cells and says so.
    problems = [line for line in text.splitlines() if line.startswith("problem:")]
    assert (code, problems) == (0, []) or (code == 2 and len(problems) == 1 and "'wikitext2'" in problems[0]
                                           and f"smoke.toml:{_line_of(SMOKE, '[defenses.snd]')}:" in problems[0])
    bench = load_benchmark("smoke", check_data=False)
    expected = sum(len(d.points()) for d in bench.defenses) * len(bench.seeds)
    listed = [line for line in text.splitlines() if line.startswith("  defense=")]
    assert len(listed) == expected == 54 and all("pending" in line and " s " in line for line in listed)
    assert f"total: {expected} cells, 0 finished, {expected} to run" in text
    assert not (tmp_path / "out").exists()  # a dry run writes nothing


def test_a_dry_run_without_the_data_still_lists_the_cells_and_names_what_is_missing(tmp_path, capsys):
    code = main(["benchmark", "run", "sst2-cpu", "--out", str(tmp_path / "out"), "--dry-run",
                 "--data-dir", str(tmp_path)])
    text = capsys.readouterr().out
    assert code == 2 and "problem:" in text and "sst2-cpu.toml:" in text and "total:" in text


# ---------------------------------------------------------------- bad files, each at its line

BAD = [
    ("[defenses.t2tt]", "[defenses.t2t]\neta = [25, 200]", "[defenses.t2tt]\neta = [25, 200]", "Did you mean 't2t'"),
    ("attacks =", 'attacks = ["whitebox", "attribute_gender"]', 'attacks = ["whitebox", "whitebx"]',
     "Did you mean 'whitebox'"),
    ("eta =", "eta = [25, 200]", "eta = [25, -3]", "eta"),
    ("etaa =", "eta = [25, 200]", "etaa = [25, 200]", "Did you mean 'eta'"),
    ('method = "promt"', 'method = "prompt"', 'method = "promt"', "promt"),
    ('utility = "synthetc"', 'utility = "synthetic"', 'utility = "synthetc"', "Did you mean 'synthetic'"),
    ("atribute =", 'attribute = "synthetic"', 'atribute = "synthetic"', "Did you mean 'attribute'"),
    ("seeds =", "seeds = [0, 1]", "seeds = [0, 0]", "more than once"),
    ("victim_test =", "victim_test = 20", "victim_test = -1", "victim_test"),
    ("[datasets", "[datasets]", "[datasets", "not valid TOML"),
]


@pytest.mark.parametrize(("marker", "old", "new", "says"), BAD, ids=[b[0] for b in BAD])
def test_a_bad_benchmark_file_stops_before_any_work_naming_its_line(tmp_path, marker, old, new, says):
    text = TWO.replace(old, new)
    assert text != TWO
    path = _write(tmp_path, text)
    with pytest.raises(BenchmarkError) as caught:
        load_benchmark(path)
    message = str(caught.value)
    assert message.startswith(f"{path}:{_line_of(text, marker)}:"), message
    assert says in message
    assert not (tmp_path / "runs").exists()


def test_a_missing_dataset_is_named_at_its_line_with_the_fix(tmp_path):
    text = TWO.replace('attribute = "synthetic"', 'attribute = "trustpilot"')
    path = _write(tmp_path, text)
    with pytest.raises(BenchmarkError) as caught:
        load_benchmark(path, data_dir=str(tmp_path))  # a data folder without trustpilot/
    message = str(caught.value)
    assert message.startswith(f"{path}:{_line_of(text, 'attribute =')}:")
    assert "trustpilot" in message and "RAPT_AUDIT_DATA" in message


def test_the_cli_exits_2_on_a_bad_file_and_writes_nothing(tmp_path, capsys):
    path = _write(tmp_path, TWO.replace("[defenses.t2t]", "[defenses.t2tt]"))
    assert main(["benchmark", "run", str(path), "--out", str(tmp_path / "out")]) == 2
    assert f"{path}:{_line_of(TWO, '[defenses.t2t]')}:" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_an_unknown_benchmark_name_suggests_the_shipped_ones():
    with pytest.raises(UsageError, match="Did you mean 'smoke'"):
        load_benchmark("smoek", check_data=False)


# ---------------------------------------------------------------- pieces


def test_locate_finds_headers_keys_multiline_values_and_inline_tables():
    text = 'a = [\n  "x = 1",\n]\n[t]\nb = """\nc = 2\n"""\n[t.u]\nv = { w = [1] }\n"q.k" = 3\n'
    assert find_line(text, ("a",)) == 1 and find_line(text, ("t",)) == 4 and find_line(text, ("t", "b")) == 5
    assert find_line(text, ("t", "c")) == 4  # inside a multi-line string: not a key; its table's line
    assert find_line(text, ("t", "u", "v", "w")) == 9 and find_line(text, ("t", "u", "q.k")) == 10


def test_one_spelling_per_value_so_one_setting_is_one_cell():
    assert set_text(100) == set_text(100.0) == "100" and set_text(float("inf")) == "inf"
    assert set_text(0.45) == "0.45" and set_text(True) == "true" and set_text(["noun", "verb"]) == "noun,verb"


def test_the_frontier_is_interpolated_between_bracketing_settings_never_extrapolated():
    points = [Point(0.5, 0.9, "a"), Point(0.7, 0.2, "dominated"), Point(0.8, 0.3, "b"), Point(0.9, 0.1, "c")]
    value, kind, between = at_utility(points, 0.85)
    assert kind == "interpolated" and between == ("b", "c") and value == pytest.approx(0.2)
    value, kind, between = at_utility(points, 0.6)  # the dominated point is not on the frontier
    assert between == ("a", "b") and value == pytest.approx(0.9 + (0.1 / 0.3) * (0.3 - 0.9))
    assert at_utility(points, 0.95)[:2] == (None, "not reached")
    assert at_utility(points, 0.4) == (0.9, "lower bound", ("a",))
    assert at_utility(points, 0.8) == (0.3, "measured", ("b",))


def test_every_defense_at_no_privacy_is_checked_against_identity_and_a_gap_is_explained_or_flagged(tmp_path):
    joined = join(benchmark_folder(tmp_path, "sst2-cpu"))  # invented numbers: every ∞ setting at identity's
    table = matched(group_results(joined.collection.results)[0], resamples=50)
    checks = {c.defense: c for c in no_privacy_checks(table, joined.index)}
    assert set(checks) == {"t2t", "pct2t", "rapt", "embedding", "snd", "cape", "dpnr"}  # identity is the reference
    assert all(c.verdict == "within" for c in checks.values()) and checks["t2t"].setting == "η=∞"
    assert checks["cape"].setting == "ε=∞" and checks["cape"].reason == HEAD_SERVICE
    assert checks["t2t"].text(table.ceiling) == "within identity's interval"
    # A gap: explained where the service differs, flagged where it is the same service.
    for row in table.group.rows:
        if row.defense in ("pct2t", "cape", "snd") and str(row.params.get("eta", row.params.get("epsilon"))) == "inf":
            row.utility[table.utility] = Estimate(0.5, 0.45, 0.55, 100)
    checks = {c.defense: c for c in no_privacy_checks(table, joined.index)}
    assert {d for d, c in checks.items() if c.verdict == "outside"} == {"pct2t", "cape", "snd"}
    assert "unexplained" in checks["pct2t"].text(table.ceiling) and " below identity's interval" in checks[
        "pct2t"].text(table.ceiling)
    assert checks["snd"].reason == capabilities_of("snd").own_service and checks["cape"].reason == HEAD_SERVICE


def test_a_missing_no_privacy_row_says_whether_it_is_pending_or_measured_otherwise(tmp_path):
    joined = join(benchmark_folder(tmp_path, "sst2-cpu"))
    table = matched(group_results(joined.collection.results)[0], resamples=50)
    kept = [r for r in table.group.rows if not (r.defense in ("t2t", "cape") and r.no_privacy)]
    table.group.rows[:] = kept  # their ∞ rows are not in this group
    t2t_inf = {"defense": "t2t", "setting": {"method": "full", "eta": "inf"}, "seed": 0, "dataset": "sst2"}
    checks = {c.defense: c for c in no_privacy_checks(table, joined.index, [t2t_inf])}
    assert checks["t2t"].reason == "its cells have not finished"  # still to run
    assert checks["cape"].verdict == "not measured" and "measured otherwise" in checks["cape"].reason  # finished
    assert checks["pct2t"].verdict == "within"
    elsewhere = {**t2t_inf, "dataset": "trustpilot"}  # pending on another dataset: not this table's cell
    assert "measured otherwise" in no_privacy_checks(table, joined.index, [elsewhere])[0].reason


def test_an_attack_measured_only_at_no_privacy_is_not_read_as_a_bound(tmp_path):
    group = group_results(join(benchmark_folder(tmp_path, "sst2-cpu")).collection.results)[0]
    for row in group.rows:  # as SnD's mutual information: declined wherever the defense adds noise
        if row.defense == "snd" and not row.no_privacy:
            row.privacy["whitebox"] = Skip("declines clipped releases")
    readings = {r.defense: r for r in matched(group, resamples=50).readings["whitebox"][0.9]}
    assert readings["snd"].kind == "not measured" and readings["snd"].value is None
    assert readings["t2t"].value is not None and readings["identity"].kind == "reference"


def test_no_cell_runs_where_no_attack_can_read_the_release_and_the_row_says_why(tmp_path):
    cells = plan_cells(load_benchmark("sst2-cpu", check_data=False), out=tmp_path / "plan")
    by_dataset = {(c.defense, c.dataset) for c in cells}
    assert ("snd", "conll2003") not in by_dataset and ("embedding", "conll2003") not in by_dataset
    assert ("snd", "trustpilot") in by_dataset and ("t2t", "conll2003") in by_dataset  # the others all run
    joined = join(benchmark_folder(tmp_path / "bench", "sst2-cpu"))
    rows = {(r.defense["name"], r.config["seed"]): r for r in (item.result for item in joined.collection.results)}
    assert len({r.signature for r in rows.values()}) == 1  # rows without a CoNLL cell join the same group
    snd = rows[("snd", 0)].attacks["ner"]
    assert isinstance(snd, Skip) and snd.reason == "needs a release of kind texts; defense snd releases " \
                                                   "sequence_embeddings, token_embeddings"
    assert not isinstance(rows[("t2t", 0)].attacks["ner"], Skip)


def test_cells_that_share_a_trained_model_never_run_side_by_side_and_the_task_cell_comes_first(tmp_path):
    """One setting and seed on several datasets share what its first cell trains (SnD's denoiser): with
    ``--jobs 2`` neighbours in the plan run at once, so two such cells next to each other both train it."""
    cells = plan_cells(load_benchmark("sst2-cpu", check_data=False), out=tmp_path / "plan")
    setting = [(c.defense, c.setting, c.seed) for c in cells]
    assert all(a != b for a, b in zip(setting, setting[1:]))
    first = {}
    for cell in cells:
        first.setdefault((cell.defense, cell.setting, cell.seed), cell.dataset)
    assert set(first.values()) == {"sst2"}
    assert [c.seed for c in cells] == sorted(c.seed for c in cells)  # a budget stops between seeds


def test_a_benchmark_run_stores_the_dry_runs_evidence_for_the_time_left(tmp_path, monkeypatch):
    """The sweep's loops judge the cells by the very estimates the dry run listed: its evidence, in the folder."""
    from rapt_audit.pipeline.estimates import Estimator, read_evidence

    bench = load_benchmark(_write(tmp_path, TWO))
    cells = plan_cells(bench, out=tmp_path / "out")
    seen = {}
    monkeypatch.setattr(bench_run, "run_sweep", lambda given, **_kw: seen.setdefault("cells", list(given)))
    bench_run.run_benchmark(bench, cells, out=tmp_path / "out")
    costs, evidence = estimate_costs(cells, bench)
    assert read_evidence(tmp_path / "out") == evidence and evidence.figures
    estimator = Estimator(read_evidence(tmp_path / "out"))
    assert [estimator.estimate(c).seconds for c in seen["cells"]] == [c.seconds for c in costs]
    assert all(c.seconds > 0 for c in costs) and [c.name for c in seen["cells"]] == [c.cell.name for c in cells]


def test_a_task_without_attacks_of_its_own_runs_the_placeholder_attack(tmp_path):
    text = TWO.replace('inversion = "synthetic"\nattribute = "synthetic"\n', "")
    bench = load_benchmark(_write(tmp_path, text))
    cells = plan_cells(bench, out=tmp_path / "out")
    assert {c.attacks for c in cells} == {(PLACEHOLDER_ATTACK,)}
    assert set(bench.not_run) == {"inversion", "attribute"}


# ---------------------------------------------------------------- end to end


@pytest.fixture(scope="module")
def two_run(tmp_path_factory):
    """The two-defense benchmark: stopped by its time budget after one cell, then run again to the end."""
    root = tmp_path_factory.mktemp("bench")
    path = _write(root, TWO)
    out = root / "out"
    with pytest.MonkeyPatch.context() as patch:  # the session's cache, as conftest gives each test
        patch.setenv("RAPT_AUDIT_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))
        first = main(["benchmark", "run", str(path), "--out", str(out), "--time-budget", "0.001", "--quiet"])
        before = {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in out.glob("*/result.json")}
        second = main(["benchmark", "run", str(path), "--out", str(out), "--quiet"])
    return {"path": path, "out": out, "codes": (first, second), "before": before}


def test_an_interrupted_benchmark_run_again_reuses_what_finished(two_run):
    first, second = two_run["codes"]
    assert first == 75 and second == 0
    assert len(two_run["before"]) == 1  # the budget let one cell run
    for path, (data, mtime) in two_run["before"].items():
        assert path.read_bytes() == data and path.stat().st_mtime_ns == mtime  # reused, not run again
    assert len(list(two_run["out"].glob("*/result.json"))) == 6


def test_the_index_records_the_file_hash_and_every_cell(two_run):
    index = json.loads((two_run["out"] / "benchmark.json").read_text(encoding="utf-8"))
    assert index["file_sha256"] == hashlib.sha256(two_run["path"].read_bytes()).hexdigest()
    assert index["file"] == str(two_run["path"].resolve())  # not below the working folder: the whole path
    assert file_label(shipped_dir() / "smoke.toml") == "benchmarks/smoke.toml"  # wherever the package lies
    assert len(index["cells"]) == 6 and (two_run["out"] / "sweep.json").is_file()
    assert (two_run["out"] / "benchmark.toml").read_text(encoding="utf-8") == TWO


def test_the_report_and_leaderboard_hold_every_defense_with_seeds_combined_and_matched_utility(two_run):
    out = two_run["out"]
    html = (out / "index.html").read_text(encoding="utf-8")
    board = (out / "leaderboard.md").read_text(encoding="utf-8")
    for defense in ("identity", "t2t"):
        assert f"| {defense}" in board and f">{defense}" in html
    assert "Privacy at matched utility" in html and "Utility = 90 % of the ceiling" in board
    assert "|utility:prompt/vt" in board and "/e1/" in board and "| 0,1 |" in board  # the protocol as run
    rows = [item.result for item in join(out).collection.results]
    assert len(rows) == 6 and all(r.defense["params"].get("method") == "prompt" for r in rows)
    claims = (out / "claims.md").read_text(encoding="utf-8")  # the papers' claims over the joined rows
    assert claims.startswith("# The seed papers' claims on benchmark") and "privacy rises as" in claims.lower()


def test_attacks_join_from_their_familys_dataset_cell(two_run, tmp_path):
    """A family read from another dataset: its attacks come from that cell, utility from the task's."""
    out = tmp_path / "out"
    index = json.loads((two_run["out"] / "benchmark.json").read_text(encoding="utf-8"))
    index["datasets"]["attribute"] = "other"
    extra = []
    for cell in index["cells"]:
        doc = json.loads((two_run["out"] / cell["name"] / "result.json").read_text(encoding="utf-8"))
        (out / cell["name"]).mkdir(parents=True)
        (out / cell["name"] / "result.json").write_text(json.dumps(doc), encoding="utf-8")
        doc["attacks"]["attribute_gender"]["empirical_privacy"].update(value=0.123, ci_low=0.1, ci_high=0.2)
        doc["attacks"]["attribute_gender"]["empirical_privacy"].pop("per_record", None)
        doc["utility"] = {}
        doc["warnings"].append("dataset synthetic has no task labels, so utility was not measured")
        name = cell["name"] + "-other"
        (out / name).mkdir()
        (out / name / "result.json").write_text(json.dumps(doc), encoding="utf-8")
        extra.append({**cell, "name": name, "dataset": "other"})
    index["cells"] += extra
    (out / "benchmark.json").write_text(json.dumps(index), encoding="utf-8")
    rows = [item.result for item in join(out).collection.results]
    assert len(rows) == 6
    for row in rows:
        assert row.attacks["attribute_gender"].empirical_privacy.value == 0.123
        assert row.attacks["whitebox"].empirical_privacy.value != 0.123 and "accuracy" in row.utility
        assert not any("no task labels" in w for w in row.warnings)


@pytest.mark.slow
def test_the_smoke_benchmark_runs_end_to_end_and_reports_every_builtin_defense(tmp_path, data_dir):
    out = tmp_path / "smoke"  # data_dir: SnD's denoiser trains on WikiText-2 (the rest reads the demo corpus)
    assert main(["benchmark", "run", "smoke", "--out", str(out), "--jobs", "2", "--quiet",
                 "--data-dir", str(data_dir)]) == 0
    html = (out / "index.html").read_text(encoding="utf-8")
    board = (out / "leaderboard.md").read_text(encoding="utf-8")
    for defense in BUILTIN:
        assert f"| {defense}" in board and f">{defense}" in html
    assert board.count("**best**") == 2 and "| 0,1,2 |" in board


def test_a_reading_says_how_often_its_target_was_reached_only_below_95_percent():
    from rapt_audit.benchmark.matched import Reading
    from rapt_audit.benchmark.headline import reading_text as _reading_text

    value = Estimate(0.4, 0.3, 0.5, 100)
    assert _reading_text(Reading("t2t", value, "interpolated", reached=0.97)) == _reading_text(
        Reading("t2t", value, "interpolated"))  # 97 %: no note
    assert _reading_text(Reading("t2t", value, "interpolated", reached=0.9)).endswith("(reached in 90 % of resamples)")


def test_provenance_names_the_code_digest_and_counts_git_states():
    """The report's "ran" line: the code that measured the cells first, per component (cells signed with one digest
    of the package are one component, all) and how many are fresh here; a grid run in slices from many commits
    names three of them and counts the rest."""
    from rapt_audit.benchmark.render import _provenance

    cells = []
    for i in range(5):
        result = fake_result(eta=25 + i, signature=SIG_A.replace("|v:", "|code:abcd1234|v:"))
        result.env["git_sha"] = f"{i}" * 40 + ("-dirty" if i == 1 else "")
        cells.append(result)
    text = _provenance(cells)
    assert text.startswith("5 cells: 5 signed with one digest of the whole package, code:abcd1234 (one component, "
                           "all); against the code that rendered this, 0 fresh, 5 stale (all (code:abcd1234, one digest "
                           "for everything) 5); from git 000000000000, 111111111111-dirty, 222222222222 and 2 more; on ")
    assert "0.00 h of cell time" in text
