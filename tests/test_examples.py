"""The notebooks under examples/ run from top to bottom (their code cells, in order, in one namespace)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

#: The split sizes the notebook's runs are given here (its own calls give none: the smoke profile's).
TINY_SPLITS = {"victim_train": 60, "victim_test": 40, "attacker_train": 60, "attacker_valid": 30}
EXAMPLES = sorted((Path(__file__).resolve().parent.parent / "examples").glob("*.ipynb"))


def code_cells(path: Path) -> list[str]:
    """The source of each code cell; the notebook must be stored without outputs (clean diffs)."""
    notebook = json.loads(path.read_text(encoding="utf-8"))
    cells = [c for c in notebook["cells"] if c["cell_type"] == "code"]
    assert all(not c.get("outputs") for c in cells), f"{path.name}: clear the outputs before committing"
    return ["".join(c["source"]) for c in cells]


def test_there_is_an_example_notebook():
    assert [p.name for p in EXAMPLES] == ["results_in_pandas.ipynb"]


def test_results_in_pandas_notebook_runs(tmp_path, monkeypatch, warm_cache):
    import functools

    import rapt_audit

    monkeypatch.setenv("RAPT_AUDIT_EXAMPLE_DIR", str(tmp_path / "results"))
    monkeypatch.setenv("RAPT_AUDIT_CACHE", str(warm_cache))  # the embedding table built once a test run, not here
    # The notebook's seven smoke runs on 60/40/60/30 records instead of the profile's 200/100/200/100: what is
    # checked is that every cell runs on real results and what the frames hold, not the numbers (12 s → 5 s).
    monkeypatch.setattr(rapt_audit, "RunConfig", functools.partial(rapt_audit.RunConfig, data_args=TINY_SPLITS))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    namespace: dict = {"__name__": "__main__"}
    for index, source in enumerate(code_cells(EXAMPLES[0])):
        try:
            exec(compile(source, f"{EXAMPLES[0].name}[cell {index}]", "exec"), namespace)
        except Exception as exc:  # name the cell that broke, then fail with the original error
            pytest.fail(f"{EXAMPLES[0].name} code cell {index} raised {exc!r}")
    frame, table = namespace["frame"], namespace["table"]
    assert frame["cell_id"].nunique() == 7  # identity + t2t at 3 η × 2 seeds
    assert set(table.loc[table["defense"] == "t2t", "n_seeds"]) == {2}
    assert (tmp_path / "results" / "privacy-utility.png").stat().st_size > 1000
