"""One answer (issue #64): ``rapt-audit claims FOLDER`` prints the benchmark's own ``claims.md``.

A benchmark's attack families run on their own datasets (Trustpilot, CoNLL-2003), whose cells measure no utility.
Read cell by cell, those cells form groups of their own and the claims change (the Pareto claim on the CPU grid:
"0 of 10" against "11 of 30"); the command reads a benchmark folder joined, as its report does.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from rapt_audit.benchmark.run import INDEX_FILE
from rapt_audit.cli.main import main
from rapt_audit.pipeline.results import RESULT_FILE, read_result, write_result
from tests.committed_grid import render, rendered_grid
from tests.result_factory import SIG_B, benchmark_folder, fake_result, write_sweep


#: A benchmark whose attribute attack runs on another dataset than the task, as the shipped CPU and paper ones do.
TWO_DATASETS = """name = "two-datasets"
description = "The task on sst2, attribute inference on trustpilot."
profile = "smoke"
seeds = [0, 1]
attacks = ["whitebox", "attribute_gender"]

[service]
method = "full"

[datasets]
utility = "sst2"
inversion = "sst2"
attribute = "trustpilot"

[defenses.identity]

[defenses.rapt]
eta = [25, 100]

[defenses.cape]
epsilon = [1, 5]
"""


def _render(folder: Path) -> str:
    """The benchmark's own claims.md, written by its report (figures stubbed: no part of the claims)."""
    return (render(folder) / "claims.md").read_text(encoding="utf-8")


def _claims(capsys, *args: str) -> tuple[str, str]:  # noqa: ANN001
    capsys.readouterr()
    assert main(["claims", *args]) == 0
    found = capsys.readouterr()
    return found.out, found.err


@pytest.fixture
def two_datasets(tmp_path: Path) -> Path:
    """A finished benchmark folder (invented numbers) whose attribute cells, like the runner's, measure no utility."""
    spec = tmp_path / "two-datasets.toml"
    spec.write_text(TWO_DATASETS, encoding="utf-8")
    folder = benchmark_folder(tmp_path / "runs" / "bench", str(spec))
    index = json.loads((folder / INDEX_FILE).read_text(encoding="utf-8"))
    for cell in index["cells"]:
        if cell["dataset"] not in index["tasks"]:  # only the task's cell measures utility
            path = folder / cell["name"] / RESULT_FILE
            write_result(replace(read_result(path), utility={}), path.parent)
    return folder


def test_claims_on_a_benchmark_folder_print_its_claims_md(two_datasets: Path, capsys):
    written = _render(two_datasets)
    printed, err = _claims(capsys, str(two_datasets))
    assert printed == written and not err
    # JSON says the same verdicts.
    as_json, _ = _claims(capsys, str(two_datasets), "--format", "json")
    for verdict in json.loads(as_json):
        assert f"| {verdict['claim']} | **{verdict['status']}** | {verdict['summary']} |" in written


def test_its_cells_read_one_by_one_answer_otherwise_and_the_command_says_how_to_read_them_joined(
        two_datasets: Path, capsys):
    written = _render(two_datasets)
    pareto = next(line for line in written.splitlines() if "Pareto-dominates" in line)
    cell_by_cell, err = _claims(capsys, str(two_datasets.parent))  # the folder above: every cell, as stored
    assert pareto not in cell_by_cell  # the attribute points have no utility of their own: fewer points
    assert f"{two_datasets} is a benchmark folder" in err and f"rapt-audit claims {two_datasets}" in err
    # Given beside other results (t2t, which the Pareto claim does not read), a benchmark folder is still read joined.
    others = write_sweep(two_datasets.parent.parent / "others", {
        f"eta={eta}": fake_result(defense="t2t", eta=eta, signature=SIG_B) for eta in (25, 100)})
    beside, err = _claims(capsys, str(two_datasets), str(others))
    assert pareto in beside and not err
    cell = next(p for p in two_datasets.iterdir() if (p / RESULT_FILE).is_file())
    for twice in (two_datasets, cell):  # the folder again, or one of its cells: read once, in the joined rows
        again, err = _claims(capsys, str(two_datasets), str(twice))
        assert again == written and not err, twice


@pytest.mark.slow
def test_claims_on_the_committed_cpu_grid_are_its_benchmark_claims(tmp_path_factory: pytest.TempPathFactory, capsys):
    """The committed grid, rendered again in a copy (the one the placeholder test reads: tests/committed_grid.py):
    what the command prints is the claims.md its report wrote."""
    folder = rendered_grid(tmp_path_factory)
    written = (folder / "claims.md").read_text(encoding="utf-8")
    printed, err = _claims(capsys, str(folder))
    assert printed == written and not err
