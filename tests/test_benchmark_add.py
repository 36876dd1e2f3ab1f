"""``benchmark run PUBLISHED --add FILE``: a defense added to a published benchmark, only its cells run.

The published folder is the tiny benchmark of ``test_benchmark_verify`` run for real (one cell of 20 synthetic
records, a second); the added defense is the guide's word drop (``examples/word-drop-defense``), installed
as a plugin would be. Its cells are real runs of the smallest cells there are (about a second each). The guide's
section "Put your defense on the leaderboard" is run as printed by ``tests/test_docs_commands.py``, on real data.
"""

from __future__ import annotations

import importlib.util
import math
import re
import shutil
import sys
from pathlib import Path

import pytest

from rapt_audit.api.plugins import DEFENSES, load
from rapt_audit.benchmark.run import read_index
from rapt_audit.cli.main import main
from rapt_audit.pipeline.results import read_result
from tests.test_benchmark_verify import PUBLISHED

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "word-drop-defense" / "word_drop.py"


@pytest.fixture(scope="module", autouse=True)
def word_drop_plugin():
    """The guide's example defense, registered as its installed entry point would register it."""
    load()
    spec = importlib.util.spec_from_file_location("word_drop", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    sys.modules["word_drop"] = module  # as an installed plugin's module is (dataclasses look it up)
    try:
        spec.loader.exec_module(module)
        DEFENSES.add("word_drop", module.WordDrop, tags=module.WordDrop.tags, origin="rapt-audit-word-drop 0.1.0")
        yield
        DEFENSES.remove("word_drop")
    finally:
        sys.modules.pop("word_drop", None)


@pytest.fixture(scope="module")
def published_run(tmp_path_factory) -> Path:
    """The tiny benchmark's folder as ``benchmark run`` writes it: its one identity cell a real run (a second), so
    the added cells carry the signature the published ones do, as on a real checkout."""
    root = tmp_path_factory.mktemp("published")
    (root / "tiny.toml").write_text(PUBLISHED, encoding="utf-8")
    with pytest.MonkeyPatch.context() as patch:  # the session's cache, as conftest gives each test
        patch.setenv("RAPT_AUDIT_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))
        assert main(["benchmark", "run", str(root / "tiny.toml"), "--out", str(root / "sst2-cpu"), "--quiet"]) == 0
    return root / "sst2-cpu"


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, published_run: Path) -> Path:
    """A working folder holding the tiny published benchmark at ``reports/sst2-cpu`` (as a checkout holds its own)."""
    shutil.copytree(published_run, tmp_path / "reports" / "sst2-cpu")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_a_header_key_or_a_published_defense_in_the_file_is_refused(workdir, capsys):
    (workdir / "add.toml").write_text('seeds = [0, 1]\n\n[defenses.word_drop]\np = 0.3\n', encoding="utf-8")
    assert main(["benchmark", "run", "reports/sst2-cpu", "--add", "add.toml", "--out", "runs/x", "--dry-run"]) == 2
    assert "add.toml:1: 'seeds' is the published benchmark's" in capsys.readouterr().err
    (workdir / "add.toml").write_text('[defenses.identity]\n', encoding="utf-8")
    assert main(["benchmark", "run", "reports/sst2-cpu", "--add", "add.toml", "--out", "runs/x", "--dry-run"]) == 2
    assert "already on the published benchmark" in capsys.readouterr().err


def test_a_bad_setting_is_named_at_the_line_of_the_additions_file(workdir, capsys):
    (workdir / "add.toml").write_text('# mine\n[defenses.word_drop]\np = 7\n', encoding="utf-8")
    assert main(["benchmark", "run", "reports/sst2-cpu", "--add", "add.toml", "--out", "runs/x", "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert re.search(r"add\.toml:[23]:", err), err


def test_the_published_folder_is_never_the_out_and_a_filter_that_matches_nothing_says_what_there_is(workdir, capsys):
    (workdir / "add.toml").write_text('[defenses.word_drop]\np = [0.1, 0.3]\n', encoding="utf-8")
    for args, message in ((["--out", "reports/sst2-cpu"], "is the published folder"), ([], "needs --out"),
                          (["--out", "runs/x", "--cell", "p=0.5"], "matches none")):
        assert main(["benchmark", "run", "reports/sst2-cpu", "--add", "add.toml", *args]) == 2
        err = capsys.readouterr().err
        assert message in err, err
    assert "p=0.1" in err and "p=0.3" in err
    assert not (workdir / "runs").exists()


def test_cells_that_would_be_measured_by_other_code_than_the_published_are_refused_before_any_work(workdir, capsys):
    from tests.test_benchmark_verify import _edit

    for path in (workdir / "reports" / "sst2-cpu").glob("*/result.json"):  # published by other code
        sig = read_result(path).signature
        _edit(path, signature=sig.replace(f"|code:{sig.split('|code:')[1][:8]}|", "|code:deadbeef|"))
    (workdir / "add.toml").write_text('[defenses.word_drop]\np = [0.1, 0.3]\n', encoding="utf-8")
    for dry in (["--dry-run"], []):
        assert main(["benchmark", "run", "reports/sst2-cpu", "--add", "add.toml", "--out", "runs/x", *dry]) == 2
        err = capsys.readouterr().err
        assert "measured by code deadbeef" in err and "Install the rapt-audit the benchmark was published with" in err
    assert not (workdir / "runs").exists()


def test_a_cell_filter_narrows_any_benchmark_run_and_its_dry_run(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    main(["benchmark", "run", "smoke", "--cell", "defense=t2t", "--cell", "seed=0", "--out", "runs/s", "--dry-run"])
    out = capsys.readouterr().out  # exit 2 where a public corpus is missing: the listing is made all the same
    assert "total: 2 cells, 0 finished, 2 to run" in out and "defense=identity" not in out
    assert "the report is rendered once every cell of the file has finished" in out
    assert not (tmp_path / "runs").exists()


def _identity_lines(leaderboard: Path) -> list[str]:
    """The leaderboard's lines of the built-in rows: identity's in the group table and in each matched-utility
    table (its reading is drawn before any other defense's), and the ceiling read from it."""
    lines = leaderboard.read_text(encoding="utf-8").splitlines()
    return [line for line in lines if line.startswith(("| identity", "Ceiling ("))]


def test_an_added_plugin_joins_the_builtins_group_and_leaves_their_rows_unchanged(workdir):
    """Issue #42 item 2: a plugin's cells added to a finished benchmark folder join the built-ins' comparable group
    (its version is its rows' provenance, not part of the signature), are read against identity's ceiling (the
    matched-utility table and the no-privacy check), and change no built-in row; no finished cell reads as not
    finished. ``keeper`` (a second plugin: the raw text, with an η axis, at η = ∞ only) has the no-privacy setting
    that the check reads: were its rows in a group of their own (its version in the signature), identity's group
    would say its cells have not finished."""
    from dataclasses import dataclass

    from rapt_audit.benchmark.ceiling import no_privacy_checks
    from rapt_audit.benchmark.join import join
    from rapt_audit.benchmark.matched import matched
    from rapt_audit.reporting.summary import group_results

    @dataclass
    class Keeper(DEFENSES.get("identity")):
        """A contributor's defense with an η axis: the raw text at any η (test double)."""

        eta: float = math.inf

    DEFENSES.add("keeper", Keeper, tags=("text",), origin="rapt-audit-keeper 0.3.1")
    try:
        (workdir / "add.toml").write_text('[defenses.word_drop]\np = [0.1, 0.3]\n\n[defenses.keeper]\neta = ["inf"]\n',
                                          encoding="utf-8")
        assert main(["benchmark", "run", "reports/sst2-cpu", "--add", "add.toml", "--out", "runs/wd", "--quiet"]) == 0
    finally:
        DEFENSES.remove("keeper")
    published, added = workdir / "reports" / "sst2-cpu", workdir / "runs" / "wd"

    # 1. One comparable group, as the report groups them (the joined results, group_results).
    joined = join(added)
    assert not joined.pending and len(joined.cells) == len(read_index(added)["cells"]) == 4
    # Each plugin's version stays in its rows' provenance.
    assert {r.defense.get("origin") for r in joined.cells.values()} == {None, "rapt-audit-word-drop 0.1.0",
                                                                        "rapt-audit-keeper 0.3.1"}
    groups = group_results(joined.collection.results)
    assert len(groups) == 1, [g.signature for g in groups]
    group = groups[0]
    assert {r.defense for r in group.rows} == {"identity", "word_drop", "keeper"}
    assert "word-drop" not in group.signature and "keeper" not in group.signature

    # 2. The plugins are read against identity's ceiling: word drop's frontier in every matched-utility table,
    # keeper's η = ∞ in the no-privacy check (measured, not "not finished").
    table = matched(group)
    assert table.ceiling is not None and not table.note
    for attack, by_fraction in table.readings.items():
        for fraction, readings in by_fraction.items():
            kinds = {r.defense: r.kind for r in readings}
            assert set(kinds) == {"identity", "word_drop", "keeper"}, (attack, fraction, kinds)
            assert kinds["word_drop"] != "not measured", (attack, fraction, kinds)
    checks = {c.defense: c for c in no_privacy_checks(table, joined.index)}
    assert set(checks) == {"keeper"} and checks["keeper"].utility is not None, checks
    assert checks["keeper"].verdict in ("within", "outside")
    board = (added / "leaderboard.md").read_text(encoding="utf-8")
    assert "in 1 comparable group(s)" in board and "Not read:" not in board and "no identity row" not in board
    # The tiny benchmark's one attack is a sanity baseline: a check line over every setting, word drop's included.
    settings = sum(1 for r in group.rows if "random_guess" in r.privacy)
    assert re.search(rf"random_guess \(a sanity baseline .*\) reads [\d.]+ – [\d.]+ over {settings} settings", board)
    assert settings == len(group.rows) and re.search(r"^\| word_drop \| ", board, re.M)
    assert re.search(r"^\| keeper \| η=∞ \| [\d.]+ \[", board, re.M), "keeper in the no-privacy check"

    # 3. Every built-in row as the published folder's own report has it: the rows it is rendered from, and the lines.
    before = {r.key: r for r in group_results(join(published).collection.results)[0].rows}
    after = {r.key: r for r in group.rows if r.defense == "identity"}
    assert set(after) == set(before) and before
    for key, row in before.items():
        assert (after[key].signature, after[key].setting, after[key].seeds) == (row.signature, row.setting, row.seeds)
        assert (after[key].utility, after[key].privacy, after[key].metrics) == (row.utility, row.privacy, row.metrics)
    assert _identity_lines(added / "leaderboard.md") == _identity_lines(published / "leaderboard.md") != []

    # 4. No finished cell reads as not finished, in the leaderboard, the report or the claims.
    for name in ("leaderboard.md", "index.html", "claims.md"):
        text = (added / name).read_text(encoding="utf-8")
        assert "not finished" not in text and "no result yet" not in text, name
