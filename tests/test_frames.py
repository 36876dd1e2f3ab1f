"""Results as pandas DataFrames: ``rapt_audit.load``, ``summarize`` and ``RunResult.to_frame``."""

from __future__ import annotations

import math
import warnings

import pandas as pd
import pytest

import rapt_audit
from rapt_audit.api.errors import ResultError
from rapt_audit.pipeline.results import write_result
from rapt_audit.pipeline.tidy import COLUMNS
from rapt_audit.reporting.collect import collect
from rapt_audit.reporting.frames import SUMMARY_COLUMNS, ResultsWarning
from rapt_audit.reporting.summary import group_results
from tests.result_factory import SIG_A, SIG_B, fake_result, t2t_sweep


def test_to_frame_has_one_row_per_measure_and_keeps_skips():
    result = fake_result(eta=75, accuracy=0.7, privacy={"whitebox": 0.4, "ner_spacy": "no entities in release"})
    frame = result.to_frame()
    assert list(frame.columns[:len(COLUMNS)]) == list(COLUMNS)
    # utility accuracy; whitebox headline + its token_accuracy; the skipped attack's headline.
    assert sorted(zip(frame["kind"], frame["measure"])) == sorted([
        ("utility", "accuracy"), ("privacy", "empirical_privacy"), ("attack_metric", "token_accuracy"),
        ("privacy", "empirical_privacy")])
    util = frame[frame["kind"] == "utility"].iloc[0]
    assert (util["value"], util["ci_low"], util["ci_high"], util["n"]) == pytest.approx((0.7, 0.68, 0.72, 100))
    assert bool(util["higher_is_better"]) is True
    white = frame[(frame["attack"] == "whitebox") & (frame["kind"] == "privacy")].iloc[0]
    assert white["value"] == pytest.approx(0.4) and pd.isna(white["skipped"])
    token = frame[frame["measure"] == "token_accuracy"].iloc[0]
    assert bool(token["higher_is_better"]) is False  # the attack's success: lower is better for the defender
    skipped = frame[frame["attack"] == "ner_spacy"].iloc[0]
    assert math.isnan(skipped["value"]) and skipped["skipped"] == "no entities in release"
    assert set(frame["param.eta"]) == {75} and set(frame["seed"]) == {0}
    assert frame["path"].isna().all()


def test_load_reads_a_sweep_and_names_each_file(tmp_path):
    root = t2t_sweep(tmp_path / "sweep")
    frame = rapt_audit.load(root)
    assert frame["cell_id"].nunique() == 4
    assert len(frame) == 4 * (1 + 2 * 2)  # accuracy + (headline + token_accuracy) for two attacks
    assert {p.rsplit("/", 2)[-2] for p in frame["path"]} == {"eta=25", "eta=75", "eta=125", "eta=inf"}
    acc = frame[frame["measure"] == "accuracy"].set_index("path")["value"]
    assert acc[str(root / "eta=25" / "result.json")] == pytest.approx(0.55)
    # Several sources at once; a file reached twice is read once.
    both = rapt_audit.load([root, root / "eta=25" / "result.json"])
    assert len(both) == len(frame)


def test_load_warns_about_a_corrupt_file_and_loads_the_rest(tmp_path):
    root = t2t_sweep(tmp_path / "sweep")
    (root / "eta=75" / "result.json").write_text("{not json", encoding="utf-8")
    with pytest.warns(ResultsWarning, match=r"eta=75.*corrupt"):
        frame = rapt_audit.load(root)
    assert frame["cell_id"].nunique() == 3


def test_load_raises_when_nothing_is_usable_and_names_why(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResultsWarning)
        with pytest.raises(ResultError, match=r"empty holds no result\.json"):
            rapt_audit.load(empty)
        bad = tmp_path / "bad" / "result.json"
        bad.parent.mkdir()
        bad.write_text("[]", encoding="utf-8")
        with pytest.raises(ResultError, match=r"bad/result\.json"):
            rapt_audit.load(bad)
        with pytest.raises(ResultError, match="does not exist"):
            rapt_audit.load(tmp_path / "nowhere")


def test_summarize_gives_the_report_rows_with_seeds_combined(tmp_path):
    seeds = {f"s{s}": fake_result(eta=75, accuracy=acc, seed=s, privacy={"whitebox": wb})
             for s, acc, wb in ((0, 0.70, 0.40), (1, 0.74, 0.50), (2, 0.72, 0.45))}
    seeds["other-signature"] = fake_result(eta=75, accuracy=0.9, signature=SIG_B, privacy={"whitebox": 0.1})
    root = tmp_path / "runs"
    for name, result in seeds.items():
        write_result(result, root / name)
    table = rapt_audit.summarize(root)
    assert list(table.columns[:len(SUMMARY_COLUMNS)]) == list(SUMMARY_COLUMNS)
    combined = table[(table["signature"] == SIG_A) & (table["measure"] == "accuracy")].iloc[0]
    assert combined["n_seeds"] == 3 and combined["seeds"] == "0,1,2"
    assert combined["value"] == pytest.approx(0.72)
    assert combined["ci_method"] == "t-over-3-seeds" and combined["ci_low"] < 0.70 < 0.74 < combined["ci_high"]
    # Never mixed across signatures: the other group keeps its single seed and its own interval.
    alone = table[(table["signature"] == SIG_B) & (table["measure"] == "accuracy")].iloc[0]
    assert (alone["value"], alone["n_seeds"], alone["ci_method"]) == (pytest.approx(0.9), 1, "bootstrap-percentile")
    # The same numbers and labels the report renders (one grouping implementation).
    for group in group_results(collect([root]).results):
        for row in group.rows:
            mine = table[(table["setting_key"] == row.key) & (table["signature"] == row.signature)]
            assert set(mine["setting"]) == {row.setting}
            wb = mine[(mine["attack"] == "whitebox") & (mine["kind"] == "privacy")].iloc[0]
            assert (wb["value"], wb["ci_low"], wb["ci_high"]) == (row.privacy["whitebox"].value,
                                                                  row.privacy["whitebox"].ci_low,
                                                                  row.privacy["whitebox"].ci_high)
    # The tidy frame groups the same way: per signature and setting key, the same seeds.
    frame = rapt_audit.load(root)
    seeds_per_row = frame.groupby(["signature", "setting_key"])["seed"].nunique()
    assert sorted(seeds_per_row.tolist()) == [1, 3]


def test_results_in_memory_are_accepted_without_a_path():
    results = [fake_result(eta=25, seed=0), fake_result(eta=25, seed=1)]
    frame = rapt_audit.load(results)
    assert frame["path"].isna().all() and set(frame["seed"]) == {0, 1}
    table = rapt_audit.summarize(results)
    assert set(table["n_seeds"]) == {2}


def test_seed_intervals_of_bounded_metrics_stay_in_range(tmp_path):
    # Two seeds far apart: the raw t-interval of the accuracy reaches below 0 and above 1.
    results = [fake_result(eta=50, seed=0, accuracy=0.1, privacy={"whitebox": 0.05}),
               fake_result(eta=50, seed=1, accuracy=0.9, privacy={"whitebox": 0.95})]
    table = rapt_audit.summarize(results)
    acc = table[table["measure"] == "accuracy"].iloc[0]
    assert (acc["value"], acc["ci_low"], acc["ci_high"]) == pytest.approx((0.5, 0.0, 1.0))
    token = table[table["measure"] == "token_accuracy"].iloc[0]  # declared bounded too
    assert (token["ci_low"], token["ci_high"]) == pytest.approx((0.0, 1.0))
    # Empirical privacy (1 − attack success) is declared in [0, 1] too; an attack whose headline is an
    # unbounded error (ae_inversion's reconstruction MSE) keeps its interval as computed
    # (tests/test_plugin_isolation.py).
    privacy = table[(table["kind"] == "privacy")].iloc[0]
    assert (privacy["ci_low"], privacy["ci_high"]) == pytest.approx((0.0, 1.0))


def test_a_per_attribute_measure_reads_its_base_declaration():
    """``attribute_privacy.gender`` is higher-is-better and ``attribute_accuracy.gender`` not, as declared."""
    import dataclasses

    import rapt_audit.attacks.attribute  # noqa: F401 - declares the attribute metrics
    from rapt_audit.api.types import AttackResult
    from tests.result_factory import est

    result = fake_result(privacy={"whitebox": 0.4})
    outcome = AttackResult(est(0.9), {"attribute_privacy.gender": est(0.9), "attribute_accuracy.gender": est(0.55)},
                           {})
    frame = dataclasses.replace(result, attacks={"attribute_gender": outcome}).to_frame()
    direction = dict(zip(frame["measure"], frame["higher_is_better"]))
    assert bool(direction["attribute_privacy.gender"]) is True and bool(direction["attribute_accuracy.gender"]) is False
