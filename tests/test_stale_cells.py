"""Issue #62 items 2 and 3: a stale cell is found, re-run for its stale stages only, and never mixed into a table."""

from __future__ import annotations

import json
import warnings

import pytest

from rapt_audit.api.components import CellCode
from rapt_audit.cli import main
from rapt_audit.pipeline import stage_reuse
from rapt_audit.reporting.collect import Loaded
from rapt_audit.reporting.freshness import StaleRunWarning
from rapt_audit.reporting.summary import group_results
from rapt_audit.pipeline.results import read_result

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
    with pytest.warns(StaleRunWarning, match=r"1 result\(s\) measured by other code .* left out"):
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
