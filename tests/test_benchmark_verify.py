"""``benchmark verify``: a contributor's cells refused when measured otherwise than the published ones, re-run on a
sample and compared within noise; an edited number is caught, an honest re-run verifies.

The published folder is invented (result_factory, milliseconds); the contributor's cell is a real run of the
smallest cell there is (the identity probe and the attacker's prior on 20 synthetic records, about a second), as
are its re-runs: the honest check's, in a scratch folder and cache of its own, and one the other checks share
from the module's scratch folder.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from rapt_audit.api.components import current_code

from rapt_audit.api.errors import UsageError
from rapt_audit.api.plugins import DEFENSES, load
from rapt_audit.benchmark.plan import plan_cells
from rapt_audit.benchmark.run import run_benchmark
from rapt_audit.benchmark.validate import load_benchmark
from rapt_audit.benchmark.verify import choose_sample, verify
from rapt_audit.cli.main import main
from rapt_audit.pipeline.results import read_result, write_result
from tests.result_factory import benchmark_folder

PUBLISHED = """\
name = "tiny"
profile = "smoke"
seeds = [0]
attacks = ["random_guess"]

[datasets]
utility = "synthetic"
inversion = "synthetic"

[splits]
victim_train = 20
victim_test = 20
attacker_train = 20
attacker_valid = 10

[defenses.identity]
"""
#: The contributor's file: the published one with their defense added.
CONTRIBUTED = PUBLISHED + "\n[defenses.echo]\n"
ORIGIN = "rapt-audit-echo 0.1.0"


@pytest.fixture(scope="module", autouse=True)
def echo_plugin():
    """The contributor's defense, installed as a plugin would be (the identity defense under another name)."""
    load()
    identity = DEFENSES.get("identity")

    @dataclass
    class Echo(identity):
        """A contributor's defense: the raw text (test double)."""

    DEFENSES.add("echo", Echo, tags=("text",), origin=ORIGIN)
    yield
    DEFENSES.remove("echo")


def _folders(root: Path, contributed: str = CONTRIBUTED, published: str = PUBLISHED) -> tuple[Path, Path]:
    """An invented published folder of ``published`` and a submission of ``contributed``: a copy of it with the
    contributor's cells added."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "published.toml").write_text(published, encoding="utf-8")
    (root / "contributed.toml").write_text(contributed, encoding="utf-8")
    folder = benchmark_folder(root / "published", str(root / "published.toml"))
    shutil.copyfile(root / "published.toml", folder / "benchmark.toml")  # as benchmark run leaves it
    submission = benchmark_folder(root / "submission", str(root / "contributed.toml"))
    for cell in folder.glob("defense=*"):  # the contributor started from a copy of the published folder
        shutil.copytree(cell, submission / cell.name, dirs_exist_ok=True)
    return folder, submission


def _echo_cell(folder: Path) -> Path:
    (path,) = [p for p in folder.glob("defense=echo*/result.json")]
    return path


def _edit(path: Path, **changes: object) -> None:
    write_result(replace(read_result(path), **changes), path.parent)


def _sign_here(path: Path) -> None:
    """Give an invented cell the code digests of the code here (issue #62), so that a run reuses it as it is."""
    from rapt_audit.api.plugins import ATTACKS

    result = read_result(path)
    code = current_code("identity", ATTACKS.select(result.config["attacks"]))
    signature = "|".join(f"code:{code.shared()}" if p.startswith("code:") else p for p in result.signature.split("|"))
    _edit(path, signature=signature, env={**result.env, "code": code.to_dict()})


def _tree(*folders: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for f in folders for p in sorted(f.rglob("*")) if p.is_file()}


# ---------------------------------------------------------------- refused without any re-run


@pytest.mark.parametrize("field, old, new", [("attacks", "attacks:11111111", "attacks:99999999"),
                                             ("code", "|v:", "|code:deadbeef|v:")])
def test_a_cell_measured_otherwise_is_refused_naming_the_field_and_the_fix(tmp_path, capsys, field, old, new):
    published, submission = _folders(tmp_path)
    path = _echo_cell(submission)
    _edit(path, signature=read_result(path).signature.replace(old, new))
    code = main(["benchmark", "verify", str(submission), "--against", str(published), "--sample", "0"])
    out = capsys.readouterr().out
    assert code == 1
    assert f"refused    signature {field}:" in out and "1 refused" in out and "run it" in out
    assert "1 cell(s) of the published benchmark" in out  # the copy of the published identity cell, unchanged


def test_an_honest_signature_is_admitted_and_a_changed_protocol_or_published_cell_refused(tmp_path, capsys):
    published, submission = _folders(tmp_path)
    (copy,) = submission.glob("defense=identity*/result.json")  # provenance of the copy differs: the same cell
    _edit(copy, env={**read_result(copy).env, "wall_time_s": 12345.0, "git_sha": "0" * 40})
    assert main(["benchmark", "verify", str(submission), "--against", str(published), "--sample", "0"]) == 0
    assert "1 unchecked" in capsys.readouterr().out
    # The contributor's own table changes what [service] sets for every defense; and a published copy is edited.
    served = PUBLISHED.replace("[datasets]", '[service]\nmethod = "bow"\n\n[datasets]')
    published, submission = _folders(tmp_path / "protocol", served + '\n[defenses.echo]\nmethod = "prompt"\n', served)
    (identity,) = submission.glob("defense=identity*/result.json")
    _edit(identity, warnings=["edited"])
    result = verify(submission, against=published, sample=0)
    reasons = {v.cell["defense"]: " ".join(v.reasons) for v in result.verdicts if v.status == "refused"}
    assert "protocol: ran with method=prompt" in reasons["echo"] and "remove method" in reasons["echo"]
    assert "not the published one" in reasons["identity"] and not result.passed


def test_a_plugin_defense_not_installed_is_named_with_the_fix(tmp_path, capsys):
    published, submission = _folders(tmp_path)
    path = _echo_cell(submission)
    result = read_result(path)
    _edit(path, defense={**result.defense, "origin": ORIGIN})
    entry = DEFENSES.entry("echo")
    DEFENSES.remove("echo")
    try:
        assert main(["benchmark", "verify", str(submission), "--against", str(published)]) == 2
    finally:
        DEFENSES.add("echo", entry.obj, tags=entry.tags, origin=entry.origin)
    err = capsys.readouterr().err
    assert "defense 'echo'" in err and "pip install 'rapt-audit-echo==0.1.0'" in err


def test_the_sample_is_seeded_and_spread_over_the_defenses():
    cells = [{"name": f"{d}-{i}", "defense": d} for d in ("a", "b") for i in range(5)]
    first = choose_sample(cells, 2, seed=7)
    assert first == choose_sample(list(reversed(cells)), 2, seed=7)  # the draw depends on the seed alone
    assert {c["defense"] for c in first} == {"a", "b"}
    draws = {tuple(c["name"] for c in choose_sample(cells, 2, seed=s)) for s in range(20)}
    assert len(draws) > 5  # another seed, another draw: the sample is not the first cells of each defense
    assert len(choose_sample(cells, None, seed=1)) == 10


def test_verify_refuses_to_write_into_the_submission_or_the_published_folder(tmp_path):
    published, submission = _folders(tmp_path)
    with pytest.raises(UsageError, match="overlap"):
        verify(submission, against=published, scratch=submission / "reruns")


# ---------------------------------------------------------------- re-runs


@pytest.fixture(scope="module")
def submitted(tmp_path_factory):
    """A published folder and a submission whose echo cell is a real run; the published cells carry its signature."""
    root = tmp_path_factory.mktemp("verify")
    published, submission = _folders(root)
    with pytest.MonkeyPatch.context() as patch:  # the session's cache, as conftest gives each test
        patch.setenv("RAPT_AUDIT_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))
        shutil.rmtree(_echo_cell(submission).parent)  # the contributor runs their cell for real
        for folder in (published, submission):  # the invented published cells as the code here signs them
            for path in folder.glob("defense=identity*/result.json"):
                _sign_here(path)
        bench = load_benchmark(root / "contributed.toml", check_data=False)
        run_benchmark(bench, plan_cells(bench, out=submission), out=submission)
    echo = read_result(_echo_cell(submission))
    for folder in (published, submission):
        for path in folder.glob("defense=identity*/result.json"):
            # What the published cells of this dataset carry: the signature, and the code here (issue #62), so
            # the copies in the submission are fresh and reused as they are.
            code = current_code("identity", list(echo.env["code"]["attacks"])).to_dict()
            _edit(path, signature=echo.signature, env={**read_result(path).env, "code": code})
    return {"published": published, "submission": submission, "scratch": root / "scratch", "root": root}


def test_an_honest_rerun_verifies_and_nothing_is_written_into_either_folder(submitted, capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("RAPT_AUDIT_CACHE", str(tmp_path / "cache"))  # re-measured here, nothing read from a cache
    # Its own scratch folder too: the shared one holds whatever re-run a test before it left (reused, not re-run,
    # and measured with the session's cache), so what this test checked depended on the order tests ran in.
    before = _tree(submitted["published"], submitted["submission"])
    code = main(["benchmark", "verify", str(submitted["submission"]), "--against", str(submitted["published"]),
                 "--sample", "all", "--sample-seed", "3", "--scratch", str(tmp_path / "scratch"), "--quiet"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "verified   " in out and "1 verified" in out and "--sample-seed 3" in out
    assert _tree(submitted["published"], submitted["submission"]) == before


def test_an_edited_number_differs_from_its_rerun(submitted, tmp_path):
    edited = tmp_path / "edited"
    shutil.copytree(submitted["submission"], edited)
    path = _echo_cell(edited)
    doc = json.loads(path.read_text(encoding="utf-8"))
    accuracy = doc["utility"]["accuracy"]
    num = accuracy["per_record"]["num"]
    flipped = [1] * (len(num) // 2) + num[len(num) // 2:]  # the first half of the records now "correct"
    value = sum(flipped) / len(flipped)
    accuracy.update(value=value, ci_low=max(0.0, value - 0.2), ci_high=min(1.0, value + 0.2))
    accuracy["per_record"]["num"] = flipped
    privacy = doc["attacks"]["random_guess"]["empirical_privacy"]  # its outcomes kept, its interval narrowed
    privacy["ci_low"] = privacy["value"] - 0.001
    path.write_text(json.dumps(doc), encoding="utf-8")
    assert value > sum(num) / len(num) + 0.1  # the edit moved the headline
    result = verify(edited, against=submitted["published"], sample=None, scratch=submitted["scratch"])
    (verdict,) = result.verdicts
    assert verdict.status == "differs" and not result.passed
    assert "accuracy: submitted" in verdict.reasons[0] and "excludes 0" in verdict.reasons[0]
    assert any(r.startswith("random_guess:") and "interval was edited" in r for r in verdict.reasons)


# ---------------------------------------------------------------- review findings (protocol, outcomes, bad cells)


@pytest.mark.parametrize("service, table, said", [
    ("", "epochs = 3", "ran with epochs=3, but the published [service] does not set epochs"),
    ('method = "bow"', 'method = "bow"\nlr_grid = "0.1,0.01"', "ran with lr_grid=0.1,0.01, but the published [service]"
                                                               " does not set lr_grid")])
def test_a_contributor_table_that_changes_the_training_protocol_is_refused(tmp_path, service, table, said):
    # The cell's own cell_id and the re-run both follow the contributor's setting, so only this check sees it.
    served = PUBLISHED.replace("[datasets]", f"[service]\n{service}\n\n[datasets]") if service else PUBLISHED
    published, submission = _folders(tmp_path, served + f"\n[defenses.echo]\n{table}\n", served)
    (verdict,) = verify(submission, against=published, sample=0).verdicts
    assert verdict.status == "refused" and any(r.startswith("protocol: " + said) for r in verdict.reasons), verdict
    assert all(r.startswith("protocol: ") for r in verdict.reasons)


def test_a_bad_cell_is_refused_alone_and_the_table_is_still_printed(tmp_path, capsys):
    published, submission = _folders(tmp_path)
    index = json.loads((submission / "benchmark.json").read_text(encoding="utf-8"))
    (echo,) = [c for c in index["cells"] if c["defense"] == "echo"]
    echo["seed"] = -1  # a seed the published file cannot make a cell of
    (submission / "benchmark.json").write_text(json.dumps(index), encoding="utf-8")
    assert main(["benchmark", "verify", str(submission), "--against", str(published), "--sample", "0"]) == 1
    out = capsys.readouterr().out
    assert "refused    configuration: seed=-1 is not a seed" in out and "1 refused" in out, out
    # A published index whose service is not a table: each cell refused, not a crash.
    published, submission = _folders(tmp_path / "service")
    doc = json.loads((published / "benchmark.json").read_text(encoding="utf-8"))
    (published / "benchmark.json").write_text(json.dumps({**doc, "service": ["method=prompt"]}), encoding="utf-8")
    (verdict,) = verify(submission, against=published, sample=0).verdicts
    assert verdict.status == "refused" and verdict.reasons[0].startswith("configuration: the published index's")


def _without(submitted: dict[str, Path], root: Path, edit) -> tuple[str, ...]:
    """The reasons of the echo cell's verdict once ``edit`` changed its submitted result document."""
    shutil.copytree(submitted["submission"], root)
    path = _echo_cell(root)
    doc = json.loads(path.read_text(encoding="utf-8"))
    edit(doc)
    path.write_text(json.dumps(doc), encoding="utf-8")
    (verdict,) = verify(root, against=submitted["published"], sample=None, scratch=submitted["scratch"]).verdicts
    assert verdict.status == "differs", verdict
    return verdict.reasons


def test_per_record_outcomes_removed_from_a_submission_differ(submitted, tmp_path):
    def strip(doc):
        del doc["utility"]["accuracy"]["per_record"]
        del doc["attacks"]["random_guess"]["empirical_privacy"]["per_record"]

    reasons = _without(submitted, tmp_path / "stripped", strip)
    assert any(r.startswith("accuracy: per-record outcomes removed") for r in reasons), reasons
    assert any(r.startswith("random_guess: per-record outcomes removed") for r in reasons), reasons


def test_a_utility_metric_dropped_from_a_submission_is_reported(submitted, tmp_path):
    reasons = _without(submitted, tmp_path / "dropped", lambda doc: doc["utility"].pop("accuracy"))
    assert "accuracy: measured by the re-run, not submitted" in reasons, reasons


# ---------------------------------------------------------------- review findings (copies, refusals, --cell, versions, code)


def _seeds(text: str) -> str:
    """A benchmark file run on seeds 0 and 1 (two cells of each defense)."""
    return text.replace("seeds = [0]", "seeds = [0, 1]")


def _cell(folder: Path, defense: str, seed: int) -> Path:
    (path,) = folder.glob(f"defense={defense}_seed={seed}_*/result.json")
    return path


def _verdicts(result) -> dict[str, tuple[str, str]]:
    """``defense/seed`` → (status, its reasons joined)."""
    return {f"{v.cell['defense']}/{v.cell['seed']}": (v.status, " ".join(v.reasons)) for v in result.verdicts}


def test_a_copy_of_a_published_cell_is_admitted_unchanged_and_refused_when_its_numbers_differ(tmp_path):
    published, submission = _folders(tmp_path, _seeds(CONTRIBUTED), _seeds(PUBLISHED))
    result = verify(submission, against=published, sample=0)
    assert {k: s for k, (s, _) in _verdicts(result).items()} == {"echo/0": "unchecked", "echo/1": "unchecked"}
    assert result.published_copies == 2 and result.passed  # the unchanged copies are admitted, no verdict of theirs
    copy = _cell(submission, "identity", 0)
    accuracy = read_result(copy).utility["accuracy"]
    _edit(copy, utility={"accuracy": replace(accuracy, value=accuracy.value + 0.01)})
    result = verify(submission, against=published, sample=0)
    status, reasons = _verdicts(result)["identity/0"]
    assert status == "refused" and "its result is not the published one" in reasons and not result.passed
    assert _verdicts(result)["echo/0"][0] == "unchecked" and result.published_copies == 2
    # A published cell the published folder has not finished is checked as the contributor's (and admitted).
    _cell(published, "identity", 1).unlink()
    result = verify(submission, against=published, sample=0)
    assert _verdicts(result)["identity/1"] == ("unchecked", "admitted; not in the sample")
    assert _verdicts(result)["identity/0"][0] == "refused" and result.published_copies == 1


def test_a_seed_or_dataset_the_published_file_does_not_run_is_refused(tmp_path):
    published, submission = _folders(tmp_path, _seeds(CONTRIBUTED))  # the published file runs seed 0 only
    found = _verdicts(verify(submission, against=published, sample=0))
    assert found["echo/0"][0] == "unchecked"
    for cell in ("echo/1", "identity/1"):  # identity's seed 1 is no published cell: the contributor's, refused
        assert found[cell][0] == "refused" and "seed: 1 is not a published seed (0)" in found[cell][1], found
    elsewhere = CONTRIBUTED.replace('utility = "synthetic"', 'utility = "sst2"')  # the task on another dataset
    published, submission = _folders(tmp_path / "dataset", elsewhere)
    refused = [v for v in verify(submission, against=published, sample=0).verdicts if v.cell["dataset"] == "sst2"]
    assert {v.cell["defense"] for v in refused} == {"echo", "identity"}
    for v in refused:
        assert v.status == "refused" and f"dataset: the published benchmark runs no {v.cell['defense']} cell on " \
            "sst2; drop it" in v.reasons, v


def test_a_failed_cell_is_refused_with_its_error(tmp_path):
    from rapt_audit.pipeline.sweep import SWEEP_INDEX, SWEEP_SCHEMA

    published, submission = _folders(tmp_path)
    path = _echo_cell(submission)
    doc = json.loads(path.read_text(encoding="utf-8"))
    doc["attacks"]["random_guess"] = {"failed": "RuntimeError: boom"}  # an attack of the cell failed
    path.write_text(json.dumps(doc), encoding="utf-8")
    (verdict,) = verify(submission, against=published, sample=0).verdicts
    assert verdict.status == "refused" and verdict.reasons[0].startswith("result: attack(s) random_guess failed")
    # The cell itself failed: its sweep marks it so and wrote no result; the refusal names the error.
    path.unlink()
    rows = [{"name": path.parent.name, "dir": path.parent.name, "status": "failed", "error": "MemoryError: out of it"}]
    (submission / SWEEP_INDEX).write_text(json.dumps({"schema": SWEEP_SCHEMA, "cells": rows}), encoding="utf-8")
    (verdict,) = verify(submission, against=published, sample=0).verdicts
    assert verdict.status == "refused"
    assert verdict.reasons == ("result: its run failed (MemoryError: out of it); run the cell to the end and send "
                               "its folder",), verdict


def test_cell_selectors_narrow_the_check(tmp_path, capsys):
    published, submission = _folders(tmp_path, _seeds(CONTRIBUTED), _seeds(PUBLISHED))
    bad = _cell(submission, "echo", 0)
    _edit(bad, signature=read_result(bad).signature.replace("attacks:11111111", "attacks:99999999"))
    args = ["benchmark", "verify", str(submission), "--against", str(published), "--sample", "0"]
    assert main(args) == 1 and "1 refused" in capsys.readouterr().out
    assert main([*args, "--cell", "seed=1", "--cell", "defense=echo"]) == 0  # the refused cell is not selected
    out = capsys.readouterr().out
    assert "2 cell(s)" not in out and "1 cell(s): 0 refused" in out and "echo_seed=0" not in out, out
    assert main([*args, "--cell", bad.parent.name]) == 1 and "1 cell(s): 1 refused" in capsys.readouterr().out
    assert main([*args, "--cell", "defense=identity"]) == 2  # published cells only: nothing to verify
    assert "among the cells --cell selects" in capsys.readouterr().err


def test_every_cell_of_a_plugin_defense_is_checked_for_its_version(tmp_path):
    published, submission = _folders(tmp_path, _seeds(CONTRIBUTED), _seeds(PUBLISHED))
    for seed, origin in ((0, ORIGIN), (1, "rapt-audit-echo 0.0.9")):  # the first cell found is the installed one
        path = _cell(submission, "echo", seed)
        _edit(path, defense={**read_result(path).defense, "origin": origin})
    found = _verdicts(verify(submission, against=published, sample=0))
    assert found["echo/0"][0] == "unchecked"
    assert found["echo/1"][0] == "refused", found
    assert "defense.origin: ran with rapt-audit-echo 0.0.9, but rapt-audit-echo 0.1.0" in found["echo/1"][1]
    # Installed at a version none of its cells ran: the installation is wrong, the command stops naming both.
    path = _cell(submission, "echo", 0)
    _edit(path, defense={**read_result(path).defense, "origin": "rapt-audit-echo 0.0.8"})
    with pytest.raises(UsageError, match=r"rapt-audit-echo 0\.0\.\d \(1 cell\), rapt-audit-echo 0\.0\.\d \(1 cell\)"):
        verify(submission, against=published, sample=0)


@pytest.mark.parametrize("mixed", [True, False])
def test_a_cell_of_other_code_than_this_installation_is_refused_alone(tmp_path, capsys, mixed):
    """The published cells of a dataset ran two code digests (or agree on one), neither this installation's: each
    sampled cell is refused with the fix, and the table is printed (no exception, no re-run)."""
    published, submission = _folders(tmp_path, _seeds(CONTRIBUTED), _seeds(PUBLISHED))
    codes = {0: "aaaaaaaa", 1: "bbbbbbbb" if mixed else "aaaaaaaa"}
    for seed, code in codes.items():
        for folder, defense in ((published, "identity"), (submission, "identity"), (submission, "echo")):
            path = _cell(folder, defense, seed)
            _edit(path, signature=read_result(path).signature.replace("|v:", f"|code:{code}|v:"))
    code = main(["benchmark", "verify", str(submission), "--against", str(published), "--sample", "all",
                 "--sample-seed", "1", "--quiet"])
    out = capsys.readouterr().out
    assert code == 1 and "2 cell(s): 2 refused" in out and "sample: 0 re-run(s)" in out, out
    assert out.count("refused    re-run: this rapt-audit's code digest is") == 2
    assert "ran aaaaaaaa" in out and "--sample 0" in out and "git_sha ffffffffffff" in out
    assert ("ran 2 code digests: aaaaaaaa (1 cell), bbbbbbbb (1 cell)" in out) is mixed


def test_a_cell_that_records_no_code_digest_is_refused_rather_than_rerun(tmp_path):
    published, submission = _folders(tmp_path)  # invented signatures: no code: field
    (verdict,) = verify(submission, against=published, sample=None).verdicts
    assert verdict.status == "refused" and "records no code digest" in verdict.reasons[0], verdict
