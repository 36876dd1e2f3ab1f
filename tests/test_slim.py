"""``rapt-audit slim``: per-record parts removed, every value kept, the file still a valid result."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from rapt_audit.api.errors import ResultError
from rapt_audit.api.types import AttackResult
from rapt_audit.cli import main
from rapt_audit.pipeline.results import read_result, write_result
from rapt_audit.reporting.slim import slim_files
from rapt_audit.scoring.stats import bootstrap_mean
from tests.result_factory import fake_result


def result_with_per_record(folder: Path) -> Path:
    rng = np.random.default_rng(0)
    accuracy = bootstrap_mean(rng.integers(0, 2, 400).astype(float), rng=rng)
    privacy = bootstrap_mean(rng.random(400), rng=rng)
    base = fake_result()
    result = replace(base, utility={"accuracy": accuracy},
                     attacks={**base.attacks, "whitebox": AttackResult(privacy, {}, {"records": 400})})
    return write_result(result, folder)


def test_slim_removes_per_record_parts_and_keeps_every_value(tmp_path: Path, capsys):
    path = result_with_per_record(tmp_path / "run")
    before_text = path.read_text(encoding="utf-8")
    before = read_result(path)
    assert before.utility["accuracy"].per_record is not None

    assert main(["slim", str(tmp_path / "run"), "--dry-run"]) == 0
    assert path.read_text(encoding="utf-8") == before_text  # a dry run writes nothing
    assert "would shrink 1 result file(s)" in capsys.readouterr().out

    assert main(["slim", str(tmp_path / "run")]) == 0
    assert "shrank 1 result file(s)" in capsys.readouterr().out
    after = read_result(path)
    assert path.stat().st_size < len(before_text.encode()) / 2
    assert after.utility["accuracy"].per_record is None and after.attacks["whitebox"].empirical_privacy.per_record is None
    assert after.utility["accuracy"].value == before.utility["accuracy"].value
    assert after.attacks["whitebox"].empirical_privacy.ci_low == before.attacks["whitebox"].empirical_privacy.ci_low
    assert after.env["per_record_removed"] == 2 and after.signature == before.signature

    slimmed = path.read_text(encoding="utf-8")
    assert main(["slim", str(path)]) == 0  # twice: nothing more to remove, the file unchanged
    assert path.read_text(encoding="utf-8") == slimmed
    assert json.loads(slimmed)["env"]["per_record_removed"] == 2
    [(_, before_size, after_size)] = slim_files([path], dry_run=True)  # nothing to remove: no saving claimed
    assert before_size == after_size == len(slimmed.encode())


def test_slim_of_nothing_readable_names_the_problem(tmp_path: Path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(ResultError, match="holds no result.json"):
        slim_files([tmp_path / "empty"])
