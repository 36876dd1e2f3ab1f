"""Issue #62 items 2, 3 and 5: a stale cell is found (by component), re-run for its stale stages only, and never
mixed into a table; cells signed with one digest of the package read as one component, all.

The status, dry-run and table tests fabricate result folders (tests/result_factory.py) and sign them: each
cell's ``env.code`` and signature ``code:`` as the code here gives them (fresh), or with one component's digest
changed (stale), or with one package digest and no ``env.code`` (a cell signed before issue #62).
"""

from __future__ import annotations

import json
import math
import re
import shutil
import warnings
from pathlib import Path

import pytest

from rapt_audit.api.components import CellCode, current_code
from rapt_audit.api.plugins import WORST_CASE, load
from rapt_audit.benchmark.join import join
from rapt_audit.benchmark.plan import plan_cells, stale_summary
from rapt_audit.benchmark.spec import shipped_dir
from rapt_audit.benchmark.status import by_component, cell_states
from rapt_audit.benchmark.validate import load_benchmark
from rapt_audit.cli import main
from rapt_audit.pipeline import stage_reuse
from rapt_audit.pipeline.results import read_result
from rapt_audit.reporting.collect import Loaded
from rapt_audit.reporting.freshness import StaleRunWarning
from rapt_audit.reporting.summary import group_results
from tests.result_factory import benchmark_folder, fake_result, write_sweep

OLD = "0123abcd" * 2  #: a digest no code here has
SWEEP = ["run", "--defense", "identity", "--attacks", "random_guess", "--profile", "smoke", "--quiet",
         "--dataset", "synthetic", "--sweep", "seed=1,2"]


def _changed(monkeypatch, *, attack: str | None = None, defense: bool = False) -> None:
    """Make the code here differ from the stored cells' in one attack or in the defense."""
    real = stage_reuse.current_code

    def upgraded(name, attacks):
        here = real(name, attacks)
        return CellCode(core=here.core, defense="feedface" * 2 if defense else here.defense, package=here.package,
                        attacks={**here.attacks, **({attack: "0123abcd" * 2} if attack else {})})

    monkeypatch.setattr(stage_reuse, "current_code", upgraded)


def _results(out):
    return {p.parent.name: json.loads(p.read_text()) for p in sorted(out.glob("*/result.json"))}


def test_a_sweep_reruns_only_the_stale_attack_of_each_cell(tmp_path, monkeypatch):
    out = tmp_path / "sweep"
    assert main(SWEEP + ["--out", str(out)]) == 0
    first = _results(out)
    assert len(first) == 2 and all("code" in r["env"] and "reused_stages" not in r["env"] for r in first.values())
    _changed(monkeypatch, attack="random_guess")
    assert main(SWEEP + ["--out", str(out)]) == 0
    again = _results(out)
    for name, result in again.items():
        assert result["env"]["reused_stages"] == ["utility"], name  # the defense unchanged: utility kept
        assert result["env"]["code"]["attacks"]["random_guess"] == "0123abcd" * 2
        assert result["attacks"] == first[name]["attacks"]  # re-measured, by the same seeded computation
    assert main(SWEEP + ["--out", str(out)]) == 0  # now fresh: reused whole
    assert _results(out) == again


def test_a_changed_defense_reruns_its_utility_and_every_attack(tmp_path, monkeypatch):
    out = tmp_path / "sweep"
    assert main(SWEEP + ["--out", str(out)]) == 0
    _changed(monkeypatch, defense=True)
    assert main(SWEEP + ["--out", str(out)]) == 0
    assert all("reused_stages" not in r["env"] for r in _results(out).values())


def test_a_table_keeps_one_code_and_says_what_it_left_out(tmp_path, monkeypatch):
    out = tmp_path / "sweep"
    assert main(SWEEP + ["--out", str(out)]) == 0
    paths = sorted(out.glob("*/result.json"))
    # The second seed as another code measured it: its attacks' digest differs, so its signature's code: does.
    doc = json.loads(paths[1].read_text())
    doc["env"]["code"]["attacks"]["random_guess"] = "0123abcd" * 2
    code = CellCode.stored("", doc["env"]).shared()
    doc["signature"] = "|".join(f"code:{code}" if p.startswith("code:") else p for p in doc["signature"].split("|"))
    doc["env"]["started_at"] = "2099-01-01T00:00:00+00:00"  # newest: the code here still wins
    paths[1].write_text(json.dumps(doc))
    loaded = [Loaded(p, read_result(p)) for p in paths]
    with pytest.warns(StaleRunWarning, match=r"1 result\(s\) left out of their table.*1 of table code:"):
        groups = group_results(loaded)
    assert len(groups) == 1 and [len(r.runs) for r in groups[0].rows] == [1]
    assert groups[0].rows[0].runs[0].path == paths[0]
    with warnings.catch_warnings():
        warnings.simplefilter("error", StaleRunWarning)  # one code: nothing left out, nothing said
        assert len(group_results(loaded[:1])) == 1


def test_a_legacy_cell_is_one_component_stale_when_the_package_moves(tmp_path):
    out = tmp_path / "run"
    assert main(SWEEP[:-2] + ["--out", str(out)]) == 0
    result = read_result(out / "result.json")
    env = {k: v for k, v in result.env.items() if k != "code"}  # as a cell signed before issue 62
    legacy = CellCode.stored("6b24379f", env)
    here = stage_reuse.current_code("identity", ["random_guess"])
    stale = legacy.stale(here)
    assert stale.core and stale.components() == ["all (code:6b24379f, one digest for everything)"]
    assert not CellCode.stored(here.package[:8], env).stale(here)  # its one digest is the package's here


def test_the_run_dry_run_says_a_stale_result_has_its_stale_stages_run_again(tmp_path, monkeypatch, capsys):
    out = tmp_path / "run"
    assert main(SWEEP[:-2] + ["--out", str(out)]) == 0
    _changed(monkeypatch, attack="random_guess")
    capsys.readouterr()
    assert main(SWEEP[:-2] + ["--out", str(out), "--dry-run"]) == 0
    assert "holds this run, stale against the code here (attack:random_guess): those stages run again and utility " \
           "is reused" in capsys.readouterr().out


def sign(path: Path, *, core: str = "", defense: str = "", attacks: dict[str, str] | None = None,
         legacy: str = "", started_at: str = "") -> None:
    """Sign the result at ``path`` as the code here would, but for the digests given (or with one package digest
    ``legacy`` and no env.code, as before issue #62)."""
    doc = json.loads(path.read_text())
    here = current_code(doc["defense"]["name"], [n for n in doc["attacks"] if n != WORST_CASE])
    if legacy:
        doc["env"].pop("code", None)
        field = legacy
    else:
        code = CellCode(core=core or here.core, defense=defense or here.defense,
                        attacks={**here.attacks, **(attacks or {})})
        doc["env"]["code"], field = code.to_dict(), code.shared()
    parts = [p for p in doc["signature"].split("|") if not p.startswith("code:")]
    doc["signature"] = "|".join([*parts[:-1], f"code:{field}", parts[-1]])  # before v:
    if started_at:
        doc["env"]["started_at"] = started_at
    path.write_text(json.dumps(doc))


@pytest.fixture
def smoke(tmp_path):
    """The smoke benchmark's folder, every cell finished and fresh, with its cells."""
    load()
    out = benchmark_folder(tmp_path / "smoke")
    cells = plan_cells(load_benchmark("smoke", check_data=False), out=out)
    for cell in cells:
        sign(Path(cell.cell.config.out) / "result.json")
    return out, cells


def test_status_lists_exactly_the_stale_cells_by_component(smoke, capsys):
    out, cells = smoke
    assert {s.state for s in cell_states(cells)} == {"fresh"}
    t2t = [c for c in cells if c.defense == "t2t"]
    seed0 = [c for c in cells if c.seed == 0 and c.defense != "t2t"]
    for cell in t2t:  # another code of t2t: its utility, its release and every attack on it are stale
        sign(Path(cell.cell.config.out) / "result.json", defense=OLD)
    for cell in seed0:  # another code of whitebox: only that attack
        sign(Path(cell.cell.config.out) / "result.json", attacks={"whitebox": OLD})
    (Path(cells[-1].cell.config.out) / "result.json").unlink()
    states = cell_states(cells)
    assert [s.state for s in states].count("pending") == 1 and [s.state for s in states].count("fresh") == \
        len(cells) - len(t2t) - len(seed0) - (cells[-1] not in t2t + seed0)
    attacks = sorted({a for c in t2t for a in c.attacks})
    expected = {"defense:t2t": len(t2t), **{f"attack:{a}": len(t2t) for a in attacks}}
    expected["attack:whitebox"] += len(seed0)
    assert dict(by_component(states)) == expected
    assert all(s.stale == ("attack:whitebox",) for s in states if s.cell in seed0)
    assert main(["benchmark", "status", "smoke", "--out", str(out), "--list"]) == 0
    text = capsys.readouterr().out
    fresh = len(cells) - len(t2t) - len(seed0) - 1
    assert f"{len(cells)} cells, {fresh} fresh, {len(t2t) + len(seed0)} stale, 1 pending" in text
    assert re.search(rf"\n  attack:whitebox +{expected['attack:whitebox']} cell\(s\)\n", text)
    assert f"{len(t2t) + len(seed0) + 1} cell(s) to run: rapt-audit benchmark run smoke --out {out}" in text
    assert sum(1 for line in text.splitlines() if line.startswith("  defense=")) == len(t2t) + len(seed0) + 1
    assert not any(p.name == "claims.md" for p in out.iterdir())  # status writes nothing


def test_the_dry_run_counts_a_stale_cell_as_to_run_and_names_its_components(smoke, capsys):
    out, cells = smoke
    for cell in cells:
        if cell.defense == "identity":
            sign(Path(cell.cell.config.out) / "result.json", attacks={"whitebox": OLD})
    code = main(["benchmark", "run", "smoke", "--out", str(out), "--dry-run"])
    text = capsys.readouterr().out
    n = sum(1 for c in cells if c.defense == "identity")
    assert code in (0, 2)  # 2: SnD's public corpus is missing here; the listing is complete either way
    assert f"total: {len(cells)} cells, {len(cells) - n} finished, {n} to run ({n} of them stale" in text
    assert f"stale by component: attack:whitebox {n}" in text
    assert sum(1 for line in text.splitlines() if "  stale  " in line and "(attack:whitebox)" in line) == n


def test_a_legacy_folder_is_one_component_all_in_status_and_in_the_report(smoke, capsys):
    out, cells = smoke
    for cell in cells:
        sign(Path(cell.cell.config.out) / "result.json", legacy="6b24379f")
    shutil.copy(shipped_dir() / "smoke.toml", out / "benchmark.toml")  # as a benchmark run leaves its folder
    assert main(["benchmark", "status", str(out)]) == 0  # the folder alone: read by its own file
    text = capsys.readouterr().out
    assert f"{len(cells)} cells, 0 fresh, {len(cells)} stale, 0 pending" in text
    assert f"  all (code:6b24379f, one digest for everything)  {len(cells)} cell(s)" in text
    assert stale_summary([("all (code:6b24379f, one digest for everything)",)] * 2) == \
        "all (code:6b24379f, one digest for everything) 2"  # a component's name may hold a comma
    with warnings.catch_warnings():
        warnings.simplefilter("error", StaleRunWarning)  # one code: the whole table, nothing left out
        groups = group_results(join(out).collection.results)
    assert len(groups) == 1 and sum(len(r.runs) for r in groups[0].rows) == len(cells)
    assert main(["benchmark", "report", str(out)]) == 0
    board = (out / "leaderboard.md").read_text()
    assert f"code:6b24379f (one component, all); against the code that rendered this, 0 fresh, {len(cells)} stale" \
        in board.replace("\\", "")


def _sweep(root: Path, cells: dict[str, dict]) -> list[Loaded]:
    """A sweep folder of fake results (name → fake_result arguments), signed fresh, read back."""
    load()
    write_sweep(root, {name: fake_result(**kw) for name, kw in cells.items()})
    for path in root.glob("*/result.json"):
        sign(path)
    return [Loaded(p, read_result(p)) for p in sorted(root.glob("*/result.json"))]


def _reread(loaded: list[Loaded]) -> list[Loaded]:
    return [Loaded(i.path, read_result(i.path)) for i in loaded]


CELLS = {f"{d}_eta={e}_seed={s}": {"defense": d, "eta": e, "seed": s}
         for d, e in (("t2t", 25), ("t2t", math.inf), ("embedding", 50)) for s in (0, 1, 2)}


def test_a_table_keeps_the_code_here_and_warns_once_with_the_count(tmp_path):
    loaded = _sweep(tmp_path / "sweep", CELLS)
    for item in loaded:
        if item.path.parent.name.endswith("seed=2"):  # seed 2 of every setting measured by another whitebox
            sign(item.path, attacks={"whitebox": OLD}, started_at="2099-01-01T00:00:00+00:00")
    with pytest.warns(StaleRunWarning) as caught:
        groups = group_results(_reread(loaded))
    assert len(caught) == 1
    message = str(caught[0].message)
    assert message.startswith("3 result(s) left out of their table") and "3 of table code:" in message
    assert f"the `rapt-audit run ... --out {tmp_path / 'sweep'}` that made them" in message
    assert len(groups) == 1 and all(len(r.runs) == 2 for r in groups[0].rows)  # the newest lost to the code here
    assert all(r.path.parent.name[-1] in "01" for row in groups[0].rows for r in row.runs)


def test_with_no_table_of_the_code_here_the_newest_is_kept(tmp_path):
    loaded = _sweep(tmp_path / "sweep", CELLS)
    for item in loaded:  # every cell stale; seed 0 the newest code
        newest = item.path.parent.name.endswith("seed=0")
        sign(item.path, core=OLD if newest else "feed" * 4, started_at="2099-01-01T00:00:00+00:00" if newest else "")
    with pytest.warns(StaleRunWarning, match=r"^6 result\(s\) left out"):
        groups = group_results(_reread(loaded))
    assert [len(r.runs) for r in groups[0].rows] == [1, 1, 1]
    assert all(r.path.parent.name.endswith("seed=0") for row in groups[0].rows for r in row.runs)


def test_mixed_digests_of_one_defense_drop_only_that_defenses_stale_cells(tmp_path):
    loaded = _sweep(tmp_path / "sweep", CELLS)
    stale = [i for i in loaded if i.path.parent.name == "t2t_eta=25_seed=1"]
    sign(stale[0].path, defense=OLD, started_at="2099-01-01T00:00:00+00:00")  # newer, but not the code here
    with pytest.warns(StaleRunWarning, match=r"^1 result\(s\) left out .*1 of defense t2t's code 0123abcd0123abcd"):
        groups = group_results(_reread(loaded))
    assert len(groups) == 1  # the defense's digest is per row: one table
    runs = {r.setting if r.defense == "t2t" else r.defense: len(r.runs) for r in groups[0].rows}
    assert sorted(runs.values()) == [2, 3, 3] and runs["embedding"] == 3
    kept = {r.path.parent.name for row in groups[0].rows for r in row.runs}
    assert "t2t_eta=25_seed=1" not in kept and len(kept) == len(CELLS) - 1


def test_legacy_cells_are_one_component_and_the_newest_digest_wins(tmp_path):
    loaded = _sweep(tmp_path / "sweep", CELLS)
    for item in loaded:
        old = item.path.parent.name.endswith("seed=2")
        sign(item.path, legacy="aaaa0000" if old else "bbbb1111", started_at="" if old else "2099-01-01T00:00:00+00:00")
    read = _reread(loaded)
    assert {stage_reuse.stored_code(i.result).legacy for i in read} == {"aaaa0000", "bbbb1111"}
    with pytest.warns(StaleRunWarning, match=r"^3 result\(s\) left out .*3 of table code:aaaa0000"):
        groups = group_results(read)
    assert len(groups) == 1 and all(len(r.runs) == 2 for r in groups[0].rows)


TINY_CPU = """name = "tiny-cpu"
profile = "cpu"
seeds = [0, 1]
attacks = "all"
[service]
method = "full"
[datasets]
utility = "sst2"
inversion = "sst2"
attribute = "trustpilot"
ner = "conll2003"
[defenses.identity]
[defenses.local]
client = ["table"]
[defenses.cape]
epsilon = [0.5, "inf"]
lam = 0
[defenses.t2t]
eta = [75, "inf"]
"""


def test_a_joined_row_carries_each_attacks_digest_from_its_familys_cell(tmp_path):
    load()
    file = tmp_path / "tiny-cpu.toml"
    file.write_text(TINY_CPU)
    out = benchmark_folder(tmp_path / "cpu", str(file))
    cells = plan_cells(load_benchmark(str(file), check_data=False), out=out)
    assert {c.dataset for c in cells if c.defense == "local"} == {"sst2"}  # a row without a Trustpilot cell
    for cell in cells:
        stale = cell.dataset == "trustpilot" and cell.defense == "cape"  # another attribute_age, on cape's cells
        sign(Path(cell.cell.config.out) / "result.json", attacks={"attribute_age": OLD} if stale else None)
    joined = join(out).collection.results
    row = next(i.result for i in joined if i.result.defense["name"] == "cape")
    assert row.env["code"]["attacks"]["attribute_age"] == OLD and "whitebox" in row.env["code"]["attacks"]
    with pytest.warns(StaleRunWarning, match=r"^4 result\(s\) left out of their table.*4 of table code:"):
        groups = group_results(joined)
    # One table: cape's rows (another attribute_age) left out, local's (no Trustpilot cell) kept in it.
    assert len(groups) == 1 and {r.defense for r in groups[0].rows} == {"identity", "local", "t2t"}
