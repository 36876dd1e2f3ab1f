"""The notebooks under examples/ run from top to bottom (their code cells, in order, in one namespace)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

EXAMPLES = sorted((Path(__file__).resolve().parent.parent / "examples").glob("*.ipynb"))


def code_cells(path: Path) -> list[str]:
    """The source of each code cell; the notebook must be stored without outputs (clean diffs)."""
    notebook = json.loads(path.read_text(encoding="utf-8"))
    cells = [c for c in notebook["cells"] if c["cell_type"] == "code"]
    assert all(not c.get("outputs") for c in cells), f"{path.name}: clear the outputs before committing"
    return ["".join(c["source"]) for c in cells]


def test_there_is_an_example_notebook():
    assert [p.name for p in EXAMPLES] == ["results_in_pandas.ipynb"]


def test_results_in_pandas_notebook_runs(tmp_path, monkeypatch):
    monkeypatch.setenv("RAPT_AUDIT_EXAMPLE_DIR", str(tmp_path / "results"))
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
