"""A cache that says what it holds (issue #65 item 3), and the run's summary lines (item 4's code parts).

Synthetic throughout: cache entries are small files written by the one cache writer inside a recorded cell, a
benchmark folder is its index with empty result files; no cell is run.
"""

from __future__ import annotations

import os
import time
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest

from rapt_audit.api.errors import UsageError
from rapt_audit.api.files import write_cache_atomic, write_json_atomic
from rapt_audit.api.types import Skip
from rapt_audit.benchmark.holdings import (
    NO_RECORD,
    added_since,
    disk_needed,
    drop_finished_services,
    holdings,
    select,
)
from rapt_audit.benchmark.plan import plan_cells
from rapt_audit.benchmark.run import INDEX_FILE, index_document, skipped_attacks
from rapt_audit.benchmark.validate import load_benchmark
from rapt_audit.cli import benchmark as bench_cli
from rapt_audit.cli import main
from rapt_audit.pipeline.attack_loop import bounded, run_attacks
from rapt_audit.pipeline.cache_ledger import in_use, records, recording, remove
from rapt_audit.pipeline.config import RunConfig

BENCH = """\
name = "tiny-cache"
profile = "smoke"
seeds = [0, 1]
attacks = ["whitebox"]

[datasets]
utility = "synthetic"
inversion = "synthetic"

[defenses.identity]

[defenses.t2t]
eta = [25, 200]
"""


@pytest.fixture
def root(tmp_path, monkeypatch) -> Path:
    """An empty cache of this test's own."""
    folder = tmp_path / "cache"
    monkeypatch.setenv("RAPT_AUDIT_CACHE", str(folder))
    return folder


@pytest.fixture
def bench_folder(tmp_path, root):
    """A benchmark folder (its index) whose cells each stored a service (1,000 B) and an attack model (10 B)."""
    path = tmp_path / "tiny.toml"
    path.write_text(BENCH, encoding="utf-8")
    bench = load_benchmark(str(path), check_data=False)
    out = tmp_path / "bench"
    cells = plan_cells(bench, out=out)
    out.mkdir()
    write_json_atomic(out / INDEX_FILE, index_document(bench, cells))
    for cell in cells:
        _store(cell.cell.config, root, {f"services/{cell.name}.pt": 1000, f"attacks/{cell.name}.pt": 10})
    return SimpleNamespace(bench=bench, cells=cells, out=out)


def _store(config, root: Path, files: dict[str, int]) -> None:
    """Store ``files`` (path below the root → bytes) through the cache writer, inside the cell's recording."""
    with recording(config):
        for rel, size in files.items():
            write_cache_atomic(root / rel, lambda handle, n=size: handle.write(b"x" * n))


def _names(found) -> set[str]:
    return {h.entry.rel for h in found}


# ---------------------------------------------------------------- the ledger


def test_a_recorded_cell_names_every_entry_it_stored_and_nothing_else(tmp_path, root):
    config = RunConfig(defense="t2t", dataset="synthetic", seed=3, out=str(tmp_path / "b" / "cell"))
    _store(config, root, {"services/a.pt": 100})
    write_cache_atomic(tmp_path / "elsewhere.bin", lambda h: h.write(b"y"))  # not the cache
    with recording(config):
        write_cache_atomic(tmp_path / "elsewhere.bin", lambda h: h.write(b"y"))
    write_cache_atomic(root / "attacks" / "after.pt", lambda h: h.write(b"z"))  # no cell running
    _store(config, root, {"releases/r.npz": 7})  # the same cell again: one record, both entries
    [record] = records(root)
    assert {k: v["bytes"] for k, v in record.entries.items()} == {"services/a.pt": 100, "releases/r.npz": 7}
    assert (record.facts["defense"], record.facts["seed"], record.cell) == ("t2t", 3, "cell")
    found = holdings(root)
    assert {h.entry.rel: h.benchmark for h in found}["attacks/after.pt"] == NO_RECORD


def test_cache_ls_lists_by_benchmark_setting_and_kind(bench_folder, root, capsys):
    assert main(["cache", "ls"]) == 0
    text = capsys.readouterr().out
    assert f"tiny-cache ({bench_folder.out.resolve()})" in text
    rows = [line for line in text.splitlines() if "tiny-cache (" in line]
    # identity and t2t's two settings, each with its services and attacks: six rows, two seeds pooled in each.
    assert len(rows) == 6 and any("t2t eta=25" in r and "services" in r and "2.0 kB" in r for r in rows)
    assert "12 entries" in text.splitlines()[0]


# ---------------------------------------------------------------- prune


def test_prune_selects_by_benchmark_and_setting_and_its_dry_run_removes_nothing(bench_folder, root, capsys):
    before = _names(holdings(root))
    argv = ["cache", "prune", "--benchmark", str(bench_folder.out), "--setting", "eta=25", "--kind", "services"]
    assert main([*argv, "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "dry run: 2 entries, 2.0 kB (services 2.0 kB) would be removed" in out and "nothing was removed" in out
    assert _names(holdings(root)) == before
    assert main(argv) == 0
    assert "removed 2 of 2 selected entries" in capsys.readouterr().out
    gone = before - _names(holdings(root))
    assert len(gone) == 2 and all(g.startswith("services/") and "eta=25" in g for g in gone)
    assert not any(set(r.entries) & gone for r in records(root))  # the records forget them too
    # The benchmark by its name selects the rest of its entries.
    assert len(select(holdings(root), benchmark="tiny-cache")) == 10


def test_prune_by_age_reaches_unrecorded_entries_but_never_the_models(tmp_path, root, capsys):
    for rel in ("pos/old.npy", "pos/new.npy", "models/mpnet/weights.bin"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(b"m" * 5)
    month = time.time() - 30 * 86400
    for rel in ("pos/old.npy", "models/mpnet/weights.bin"):
        os.utime(root / rel, (month, month))
    assert main(["cache", "prune", "--older-than", "7d"]) == 0
    assert not (root / "pos" / "old.npy").exists()
    assert (root / "pos" / "new.npy").exists() and (root / "models" / "mpnet" / "weights.bin").exists()


def test_prune_never_touches_anything_outside_the_cache(tmp_path, root):
    outside = tmp_path / "precious.txt"
    outside.write_text("keep", encoding="utf-8")
    (root / "services").mkdir(parents=True)
    os.symlink(outside, root / "services" / "link.pt")
    assert remove(["../precious.txt", "services/link.pt", "services/../../precious.txt"], root) == (0, [])
    assert outside.read_text(encoding="utf-8") == "keep" and (root / "services" / "link.pt").is_symlink()
    assert "services/link.pt" not in _names(holdings(root))  # a link is not an entry


def test_prune_refuses_while_a_cell_runs_on_the_cache(bench_folder, root, capsys):
    before = _names(holdings(root))
    with in_use(root):  # a running cell holds the cache's lock shared
        assert main(["cache", "prune", "--benchmark", "tiny-cache"]) == 2
    assert "is using the cache" in capsys.readouterr().err and _names(holdings(root)) == before
    assert main(["cache", "prune", "--benchmark", "tiny-cache"]) == 0 and not holdings(root)


@pytest.mark.parametrize(("argv", "message"), [
    ([], "say what to remove with --benchmark, --setting, --older-than or --kind"),
    (["--kind", "servise"], "Did you mean 'services'"),
    (["--kind", "models"], "never the assembled models"),
    (["--kind", "services", "--older-than", "3 months"], "is not an age; write a number and a unit"),
    (["--benchmark", "nonesuch"], "no cache entry was recorded for it; benchmarks with entries: tiny-cache"),
    (["--setting", "eta=30"], "matches no recorded cell's entries; settings with entries: identity; t2t eta=200"),
    (["--setting", "eta"], "is neither KEY=VALUE"),
])
def test_bad_selectors_are_refused_naming_the_problem_and_the_choices(bench_folder, argv, message, capsys):
    assert main(["cache", "prune", *argv]) == 2
    assert message in capsys.readouterr().err


# ---------------------------------------------------------------- what a run added, will need, and can drop


def test_a_run_says_what_it_added_by_kind(bench_folder, root):
    since = time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(time.time() - 5))
    assert added_since(bench_folder.out, since, root) == {"services": 6000, "attacks": 60}  # six cells
    assert added_since(bench_folder.out, "2999-01-01T00:00:00+00:00", root) == {}


def test_the_dry_runs_disk_need_comes_from_comparable_cached_cells(bench_folder, root, tmp_path):
    # Stored once per cache (keyed by the model alone): not what another cell will add.
    _store(bench_folder.cells[0].cell.config, root, {"embeddings/table.npz": 5000})
    text = disk_needed(bench_folder.cells[:4], root=root)
    assert text.startswith("disk: about 4.0 kB more in the cache") and "4 from cells of the same defense and dataset" \
        in text and "services 4.0 kB, attacks 40 B" in text and "an estimate" in text and "embeddings" not in text
    other = replace(bench_folder.cells[0], dataset="trustpilot")
    assert "not counted: 1 cell(s) on trustpilot" in disk_needed([other, *bench_folder.cells[:1]], root=root)
    assert disk_needed(bench_folder.cells[:1], root=tmp_path / "empty").startswith("disk: unknown")


def test_drop_finished_services_frees_finished_settings_and_keeps_what_pending_cells_may_read(bench_folder, root):
    cells = bench_folder.cells
    pending = next(c for c in cells if c.defense == "t2t" and dict(c.varying)["eta"] == "200" and c.seed == 1)
    for cell in cells:
        if cell is not pending:
            (bench_folder.out / cell.name).mkdir(exist_ok=True)
            (bench_folder.out / cell.name / "result.json").write_text("{}", encoding="utf-8")
    text = drop_finished_services(cells, out=bench_folder.out, root=root)
    # identity and t2t η 25 finished: their seed-0 services go; their seed-1 ones stay for the pending seed-1 cell.
    assert "2 of 3 setting(s) finished; dropped 2 service entries of theirs, freeing 2.0 kB" in text
    assert "2 kept that pending cells of the same seed and dataset may read" in text
    left = {h.entry.rel for h in holdings(root) if h.entry.kind == "services"}
    assert len(left) == 4 and not any("seed=0" in rel and "eta=200" not in rel for rel in left)


def test_benchmark_run_summarises_the_cache_and_its_last_line_names_the_claims(bench_folder, root, monkeypatch,
                                                                              capsys, tmp_path):
    cells = bench_folder.cells

    def fake_run(bench, todo, *, out, **_kw):  # each cell "runs": stores a service, and finishes
        for cell in todo:
            _store(cell.cell.config, root, {f"services/new-{cell.name}.pt": 500})
            (out / cell.name).mkdir(exist_ok=True)
            (out / cell.name / "result.json").write_text("{}", encoding="utf-8")
        return []

    monkeypatch.setattr(bench_cli, "run_benchmark", fake_run)
    monkeypatch.setattr(bench_cli, "write_benchmark_report",
                        lambda out: (Path(out) / "index.html", Path(out) / "leaderboard.md", None))
    code = main(["benchmark", "run", str(tmp_path / "tiny.toml"), "--out", str(bench_folder.out), "--quiet",
                 "--drop-finished-services"])
    lines = capsys.readouterr().out.strip().splitlines()
    assert code == 0
    assert lines[0].startswith(f"cache: this run stored {len(cells) * 0.5:.1f} kB (services")
    # Every cell finished: each of the six cells' two services (the fixture's and this run's) goes.
    assert "3 of 3 setting(s) finished; dropped 12 service entries of theirs, freeing 9.0 kB" in lines[1]
    assert lines[-1].endswith(f"index.html, {bench_folder.out / 'leaderboard.md'} and {bench_folder.out / 'claims.md'}")


# ---------------------------------------------------------------- skipped attacks, named once with why


def test_an_attack_that_cannot_read_the_release_is_named_in_the_log_with_why():
    lines: list[str] = []
    attacks = {"seq": SimpleNamespace(requires=frozenset({"sequence_embeddings"})),
               "txt": SimpleNamespace(requires=frozenset({"texts"}))}
    outcomes, stop = run_attacks(attacks, run_one=lambda name, attack: Skip("declined"),
                                 release_kinds=frozenset({"texts"}), defense="word_drop", reused={},
                                 say=lines.append, step=lambda: None)
    assert stop is None and isinstance(outcomes["seq"], Skip)
    assert lines == ["attack seq: skipped, it needs a release of kind sequence_embeddings; defense word_drop "
                     "releases texts", "attack txt"]


def test_an_attack_that_declines_is_named_once_with_its_reason():
    lines: list[str] = []

    def fit():
        raise Skip("the attacker's records carry no 'gender' attribute")

    outcome = bounded("attribute_gender", object(), fit=fit, score=lambda: None, limit=None, say=lines.append)
    assert isinstance(outcome, Skip)
    assert lines == ["attack attribute_gender: skipped: the attacker's records carry no 'gender' attribute"]


def test_a_benchmark_run_names_the_attacks_each_defense_skips_once(bench_folder):
    cells = [SimpleNamespace(defense="t2t", attacks=("whitebox", "bow_inversion")),
             SimpleNamespace(defense="t2t", attacks=("whitebox", "bow_inversion")),
             SimpleNamespace(defense="identity", attacks=("whitebox",))]
    [line] = skipped_attacks(cells)
    assert line.startswith("t2t's cells skip 1 attack(s) that cannot read its release") and \
        line.count("bow_inversion: needs a release of kind sequence_embeddings; defense t2t releases texts") == 1


def test_select_refuses_to_remove_nothing_in_particular():
    with pytest.raises(UsageError):
        select([])
