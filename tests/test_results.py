"""Result files: round trip, atomic writes, the JSON Schema, corruption errors; estimates and intervals."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from rapt_audit.api.errors import ResultError
from rapt_audit.api.files import write_json_atomic
from rapt_audit.api.types import AttackResult, Estimate, PerRecord, Skip
from rapt_audit.cli import main
from rapt_audit.pipeline.result_schema import result_schema, validate_result_document
from rapt_audit.pipeline.results import SCHEMA, RunResult, read_result, write_result
from rapt_audit.scoring.stats import bootstrap_mean, wilson
from tests.result_factory import fake_result, t2t_sweep

ROOT = Path(__file__).resolve().parent.parent


def _result() -> RunResult:
    est = Estimate(0.8, 0.7, 0.9, 100, "bootstrap-percentile")
    # The provenance a run writes (the schema requires it), with hand-made outcomes.
    return replace(fake_result(defense="identity", eta=None), utility={"accuracy": est},
                   attacks={"a": AttackResult(est.complement(), {"token_accuracy": est}), "b": Skip("needs texts")})


def test_round_trip(tmp_path):
    path = write_result(_result(), tmp_path)
    back = read_result(tmp_path)
    assert back.to_dict() == _result().to_dict()
    assert back.attacks["b"] == "needs texts"
    assert not list(tmp_path.glob(".*.tmp"))  # no temporary file left behind
    assert json.loads(path.read_text())["schema"] == SCHEMA


def test_one_skip_shape(tmp_path):
    """A skipped attack is a Skip in memory and {"skipped": reason} on disk; a bare reason reads back too."""
    path = write_result(_result(), tmp_path)
    doc = json.loads(path.read_text())
    assert doc["attacks"]["b"] == {"skipped": "needs texts"}
    assert isinstance(read_result(path).attacks["b"], Skip)
    doc["attacks"]["b"] = "needs texts"  # the older in-memory shape, should a file ever hold it
    path.write_text(json.dumps(doc))
    back = read_result(path)
    assert back.attacks["b"] == Skip("needs texts") and back.attacks["b"].reason == "needs texts"
    assert back.to_dict() == _result().to_dict()


def test_schema_and_corruption_errors(tmp_path):
    path = write_result(_result(), tmp_path)
    doc = json.loads(path.read_text())
    doc["schema"] = "rapt-audit/result/0"
    path.write_text(json.dumps(doc))
    with pytest.raises(ResultError, match="has schema 'rapt-audit/result/0'"):
        read_result(path)
    path.write_text("[1, 2")
    with pytest.raises(ResultError, match=f"{path} is corrupt"):
        read_result(path)
    with pytest.raises(ResultError, match="no result file"):
        read_result(tmp_path / "nowhere")


def test_estimate_validation():
    with pytest.raises(ValueError, match="outside its interval"):
        Estimate(0.5, 0.6, 0.7)
    flipped = Estimate(0.2, 0.1, 0.3).complement()
    assert (flipped.value, flipped.ci_low, flipped.ci_high) == pytest.approx((0.8, 0.7, 0.9))


def test_bootstrap_interval_covers_truth_at_nominal_rate():
    """2,000 replications of a Bernoulli(0.3) sample of 200: the 95 % interval covers 0.3 in 95 % of them.

    Two-sided band: nominal ± 4 binomial standard errors of the coverage count, [1861, 1939] of 2,000.
    A 90 % interval (about 1,795) falls below it and a 99.9 % one (about 1,981) above it; the
    percentile bootstrap of this discrete mean covers about 94 % (2 standard errors under nominal).
    """
    replications, nominal = 2_000, 0.95
    rng = np.random.default_rng(0)
    covered = 0
    for _ in range(replications):
        sample = (rng.random(200) < 0.3).astype(float)
        est = bootstrap_mean(sample, rng=rng, resamples=400)
        covered += est.ci_low <= 0.3 <= est.ci_high
    band = 4 * math.sqrt(replications * nominal * (1 - nominal))
    assert abs(covered - nominal * replications) <= band, (covered, nominal * replications, band)


def test_weighted_bootstrap_is_a_ratio_estimator():
    est = bootstrap_mean([1.0, 0.0], weights=[3, 1], rng=np.random.default_rng(1))
    assert est.value == pytest.approx(0.75)
    with pytest.raises(ValueError, match="non-empty"):
        bootstrap_mean([], rng=np.random.default_rng(1))


def test_the_auc_of_any_resample_is_scikit_learns():
    """The AUC counted from rank levels equals roc_auc_score's on resamples with repeats and tied scores, for two
    classes and macro one-vs-rest beyond; a resample missing a class of its own has none (dropped, not an error)."""
    from sklearn.metrics import roc_auc_score

    from rapt_audit.scoring.classification import RankedScores

    rng = np.random.default_rng(3)
    for k in (2, 3):
        probabilities = rng.dirichlet(np.ones(k), size=12)[rng.integers(0, 12, size=80)]  # 12 rows: many ties
        truth = rng.integers(0, k, size=80)
        ranked = RankedScores(probabilities, truth)
        for _ in range(40):
            idx = rng.integers(0, 80, size=80)
            y = truth[idx]
            expected = (roc_auc_score(y, probabilities[idx, 1]) if k == 2 else
                        roc_auc_score(y, probabilities[idx], multi_class="ovr", average="macro", labels=list(range(k))))
            assert ranked.auc(idx) == pytest.approx(expected, abs=1e-12)
        assert np.isnan(ranked.auc(np.flatnonzero(truth != 1)))  # class 1 absent: no AUC


def test_wilson_interval():
    """The closed forms of the 95 % Wilson interval (z = 1.96): z²/(n + z²) for 0 of n, and for n/2 of n
    the centre 1/2 with half-width z·sqrt(1/(4n) + z²/(4n²)) / (1 + z²/n)."""
    z2 = 1.96**2  # 3.8416
    est = wilson(0, 50)
    assert est.value == 0 and est.ci_low == 0
    assert est.ci_high == pytest.approx(3.8416 / 53.8416, abs=1e-5)  # 0.07135 (z = 1.95996 gives 0.07135 too)
    assert wilson(50, 50).ci_low == pytest.approx(50 / 53.8416, abs=1e-5)
    half = math.sqrt(z2) * math.sqrt(1 / 200 + z2 / 10_000) / (1 + z2 / 50)  # 0.13356
    mid = wilson(25, 50)
    assert (mid.ci_low, mid.ci_high) == pytest.approx((0.5 - half, 0.5 + half), abs=1e-5)
    with pytest.raises(ValueError):
        wilson(5, 3)


# ---------------------------------------------------------------- the JSON Schema of result files

def test_schema_is_the_version_results_carry():
    schema = result_schema()
    assert schema["$id"] == SCHEMA and schema["properties"]["schema"] == {"const": SCHEMA}
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"


def _committed_results() -> list[tuple[str, dict]]:
    """Result documents written by real runs: the reference reports and the CI baseline's results."""
    docs = [(str(p), json.loads(p.read_text(encoding="utf-8"))) for p in sorted(ROOT.glob("reports/**/result.json"))]
    for path in sorted(ROOT.glob("baselines/*.json")):
        docs += [(f"{path} results[{i}]", doc)
                 for i, doc in enumerate(json.loads(path.read_text(encoding="utf-8"))["results"])]
    return docs


def test_real_results_follow_the_schema(tmp_path):
    docs = _committed_results()
    assert len(docs) >= 10  # the reference reports hold 15; an empty glob would prove nothing
    for source, doc in docs:
        validate_result_document(doc, source)
    per_record = Estimate(0.5, 0.4, 0.6, 2, "bootstrap-percentile")
    # Every shape the writer produces: skips, η = ∞ as "inf", no parameters, synthetic warnings.
    for result in (fake_result(), fake_result(eta=math.inf, synthetic=True), fake_result(eta=None),
                   fake_result(privacy={"whitebox": 0.2, "ner": "needs texts"}),
                   replace(fake_result(), attacks={"whitebox": AttackResult(per_record, {})})):
        write_result(result, tmp_path)
        assert read_result(tmp_path).to_dict() == result.to_dict()


def test_schema_allows_per_record_parts():
    doc = fake_result().to_dict()
    doc["attacks"]["whitebox"]["empirical_privacy"]["per_record"] = {"num": [1, 0.5], "den": [2, 1]}
    validate_result_document(doc, "r.json")
    doc["attacks"]["whitebox"]["empirical_privacy"]["per_record"] = {"num": [1, "x"], "den": [2, 1]}
    with pytest.raises(ResultError, match=r"empirical_privacy\.per_record\.num\[1\]: 'x' is not of type 'number'"):
        validate_result_document(doc, "r.json")
    # The arrays are checked outside jsonschema (a paper-profile file took a second there): every place an
    # estimate sits, both arrays, a bool is no number, and the other problems are still counted.
    doc["attacks"]["whitebox"]["empirical_privacy"]["per_record"] = {"num": [1, 0], "den": [2, None]}
    doc["attacks"]["whitebox"]["metrics"]["token_accuracy"]["per_record"] = {"num": [True, 0], "den": 1}
    doc["utility"]["accuracy"]["per_record"] = {"num": [1, 0], "den": 1, "extra": 1}
    with pytest.raises(ResultError) as raised:
        validate_result_document(doc, "r.json")
    assert "utility.accuracy.per_record: Additional properties are not allowed" in str(raised.value)
    assert "(and 2 more problem(s))" in str(raised.value)
    del doc["utility"]["accuracy"]["per_record"]["extra"]
    with pytest.raises(ResultError, match=r"empirical_privacy\.per_record\.den\[1\]: None is not of type 'number' "
                                          r"\(and 1 more problem"):
        validate_result_document(doc, "r.json")
    doc["attacks"]["whitebox"]["empirical_privacy"]["per_record"]["den"] = [2, 1]
    with pytest.raises(ResultError, match=r"metrics\.token_accuracy\.per_record\.num\[0\]: True is not of type"):
        validate_result_document(doc, "r.json")
    assert doc["utility"]["accuracy"]["per_record"]["num"] == [1, 0]  # the document itself is left as it was
    for not_an_object in ([1, 2], "x", None):  # a baseline file's results[i] may be anything
        with pytest.raises(ResultError, match=r"\(top level\): .* is not of type 'object'"):
            validate_result_document(not_an_object, "r.json")


def test_accuracy_keeps_its_outcomes_with_unit_denominators_written_once(tmp_path):
    outcomes = np.array([1, 0, 1, 1, 0, 1, 1, 1], float)
    accuracy = bootstrap_mean(outcomes, rng=np.random.default_rng(0), resamples=50)
    macro = Estimate(0.7, 0.5, 0.9, 8, "bootstrap-percentile")
    tokens = bootstrap_mean([0.5, 0.25], weights=[2, 4], rng=np.random.default_rng(0), resamples=50)
    result = replace(fake_result(), utility={"accuracy": accuracy, "macro_f1": macro},
                     attacks={"whitebox": AttackResult(tokens, {})})
    write_result(result, tmp_path)
    doc = json.loads((tmp_path / "result.json").read_text())
    assert doc["utility"]["accuracy"]["per_record"] == {"num": [1, 0, 1, 1, 0, 1, 1, 1], "den": 1}
    assert "per_record" not in doc["utility"]["macro_f1"]
    assert doc["attacks"]["whitebox"]["empirical_privacy"]["per_record"]["den"] == [2, 4]  # unequal: a list
    assert read_result(tmp_path).utility["accuracy"].per_record == accuracy.per_record
    # A file written before the one-number form (a list of ones) reads back to the same parts.
    doc["utility"]["accuracy"]["per_record"]["den"] = [1] * 8
    validate_result_document(doc, "old.json")
    assert RunResult.from_dict(doc).utility["accuracy"].per_record == PerRecord(tuple(outcomes), (1.0,) * 8)
    doc["utility"]["accuracy"]["per_record"]["den"] = -1
    with pytest.raises(ResultError, match=r"accuracy\.per_record\.den"):
        validate_result_document(doc, "r.json")


def _set(doc: dict, path: str, value: object) -> None:
    *parents, last = path.split("/")
    for key in parents:
        doc = doc[int(key)] if isinstance(doc, list) else doc[key]
    doc[last] = value


@pytest.mark.parametrize(("field", "value", "message"), [
    ("attacks/whitebox/empirical_privacy/value", "abc",
     "attacks.whitebox.empirical_privacy.value: 'abc' is not of type 'number'"),
    ("attacks/whitebox/metrics/token_accuracy/n", 1.5,
     "attacks.whitebox.metrics.token_accuracy.n: 1.5 is not of type 'integer'"),
    ("attacks/random_guess", {"skipped": ["a list"]},
     r"attacks.random_guess.skipped: \['a list'\] is not of type 'string'"),
    ("attacks/random_guess", {"metrics": {}}, "attacks.random_guess: 'empirical_privacy' is a required property"),
    ("utility/accuracy/method", None, "utility.accuracy.method: None is not of type 'string'"),
    ("warnings", ["fine", 3], r"warnings\[1\]: 3 is not of type 'string'"),
    ("defense/name", {"<b>": 1}, "defense.name: .* is not of type 'string'"),
    ("defense/params/replacement", "half", "defense.params.replacement: 'half' is not of type"),
    ("config/seed", "0", "config.seed: '0' is not of type 'integer'"),
    ("dataset/splits/victim_test", -1, "dataset.splits.victim_test: -1 is less than the minimum of 0"),
    ("env/git_sha", 7, "env.git_sha: 7 is not of type"),
    ("extra", 1, r"\(top level\): Additional properties are not allowed \('extra' was unexpected\)"),
])
def test_wrong_field_is_named_with_the_file(tmp_path, field, value, message):
    path = write_result(fake_result(), tmp_path)
    doc = json.loads(path.read_text(encoding="utf-8"))
    _set(doc, field, value)
    path.write_text(json.dumps(doc), encoding="utf-8")
    with pytest.raises(ResultError, match=re.escape(f"result file {path}: ") + message) as err:
        read_result(path)
    assert "re-run" in str(err.value)  # and the fix


def test_keys_are_quoted_in_field_paths(tmp_path):
    doc = fake_result().to_dict()
    doc["utility"]["a.b"] = {"value": 1}
    with pytest.raises(ResultError, match=r'utility\["a\.b"\]: \'ci_low\' is a required property'):
        validate_result_document(doc, "r.json")


def test_unpaired_surrogates_are_refused(tmp_path):
    path = write_result(fake_result(), tmp_path)
    # A lone half of a UTF-16 pair, as JSON can escape it: no UTF-8 report could hold it.
    path.write_text(path.read_text(encoding="utf-8").replace('"test"', '"te\\ud800st"'), encoding="utf-8")
    with pytest.raises(ResultError, match=r"dataset\.source: holds an unpaired UTF-16 surrogate"):
        read_result(path)


def test_an_invalid_result_is_named_and_the_others_reported(tmp_path, capsys):
    runs = t2t_sweep(tmp_path / "runs")
    bad = runs / "eta=75" / "result.json"
    doc = json.loads(bad.read_text(encoding="utf-8"))
    doc["attacks"]["whitebox"]["empirical_privacy"]["ci_high"] = "0.9"
    bad.write_text(json.dumps(doc), encoding="utf-8")
    out = tmp_path / "r.html"
    assert main(["report", str(runs), "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert f"left out {bad}: result file {bad}: attacks.whitebox.empirical_privacy.ci_high" in err
    html = out.read_text(encoding="utf-8")
    assert "Some inputs were not used" in html and "attacks.whitebox.empirical_privacy.ci_high" in html
    assert "η=25" in html and "η=125" in html and "η=75" not in html
    board = tmp_path / "board.md"
    assert main(["leaderboard", str(runs), "--out", str(board)]) == 0
    text = board.read_text(encoding="utf-8")
    assert str(bad) in text and "attacks.whitebox.empirical_privacy.ci_high" in text and "η=125" in text
    assert "η=75" not in text and "3 result(s)" in capsys.readouterr().out


def test_schema_check_is_loaded_lazily():
    code = ("import sys, rapt_audit.pipeline.results, rapt_audit.reporting.collect; "
            "assert 'jsonschema' not in sys.modules, 'jsonschema imported at import time'")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr


def test_json_files_keep_lists_of_numbers_on_one_line(tmp_path: Path):
    document = {"per_record": {"num": [0, 1, 1.5], "den": 1}, "labels": ["a", "b"], "nested": [[1, 2], []],
                "flags": [True, False], "tricky": "\u0000 0 \u0000 looks like nothing special"}
    path = tmp_path / "doc.json"
    write_json_atomic(path, document)
    text = path.read_text(encoding="utf-8")
    assert json.loads(text) == document
    assert '"num": [0, 1, 1.5]' in text and "[1, 2]" in text  # one line each
    assert '"labels": [\n' in text and '"flags": [\n' in text  # other lists as before, one item a line
    with pytest.raises(ValueError):
        write_json_atomic(path, {"num": [1.0, float("nan")]})
    assert json.loads(path.read_text(encoding="utf-8")) == document  # the refused write left the file whole
