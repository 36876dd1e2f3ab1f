"""Hyper-parameter selection of the service's customization on validation data (issue #12).

The learning rate and the epoch are chosen on a validation split carved from the privatized training
texts; the test split must not be able to change anything about that choice. Training tests use the
real bundled MiniLM on a few texts (seconds on CPU).
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from rapt_audit.api.errors import DataError, UsageError
from rapt_audit.api.params import make_plugin
from rapt_audit.api.plugins import DEFENSES, load
from rapt_audit.api.types import Record
from rapt_audit.encoder.models import load_model
from rapt_audit.utility.customize import METHODS, PROFILE_DEFAULTS, resolve_settings
from rapt_audit.utility.decision import biased_probabilities
from rapt_audit.utility.selection import (
    LR_GRIDS,
    Candidate,
    carve_validation,
    check_lr_grid,
    choose,
    resolve_grid,
    select_and_train,
)

load()

TEXTS = ["a wonderful , moving film", "dull and tedious from start to end", "the cast is superb",
         "a boring mess", "sharp , funny and warm", "i hated every minute", "a joy to watch", "clumsy and flat",
         "a triumph", "a waste of time", "lovely and tender", "painfully slow"]
LABELS = np.array([1, 0] * 6)


@pytest.fixture(scope="module")
def minilm():
    return load_model("minilm")


def _settings(**changes):
    return resolve_settings("prompt", "smoke", {"epochs": 2, "batch_size": 4, "virtual_tokens": 4, **changes})


# --- the validation split -------------------------------------------------------------------------------

def test_validation_split_is_seeded_stratified_and_disjoint():
    labels = np.array([0] * 900 + [1] * 300 + [2] * 40)
    train, valid = carve_validation(labels, rng=np.random.default_rng(5))
    assert len(valid) == 124 and len(train) + len(valid) == len(labels)  # 10 % of 1,240, rounded up
    assert not set(train) & set(valid)
    assert np.bincount(labels[valid]).tolist() == [90, 30, 4]  # each label its share
    again_train, again_valid = carve_validation(labels, rng=np.random.default_rng(5))
    assert np.array_equal(valid, again_valid) and np.array_equal(train, again_train)
    assert not np.array_equal(valid, carve_validation(labels, rng=np.random.default_rng(6))[1])


def test_validation_split_floor_and_ceiling():
    assert len(carve_validation(np.array([0, 1] * 100), rng=np.random.default_rng(0))[1]) == 50  # floor of 50
    train, valid = carve_validation(np.array([0, 1] * 5), rng=np.random.default_rng(0))
    assert len(valid) == len(train) == 5  # never more than half
    with pytest.raises(DataError, match="1 training example.* at least 2"):
        carve_validation(np.array([1]), rng=np.random.default_rng(0))


# --- the grid ---------------------------------------------------------------------------------------------

def test_paper_grids_hold_the_papers_values_and_other_profiles_train_one_lr():
    paper_lr = {"prompt": 6e-5, "prefix": 6e-5, "lora": 6e-5, "full": 2e-5}  # RAPT; Qu et al. for full
    for method in METHODS:
        grid, pinned = resolve_grid(method, "paper")
        assert paper_lr[method] in grid and grid == LR_GRIDS[method] and not pinned
        assert len(grid) == len(set(grid)) and list(grid) == sorted(grid)
        for profile in ("cpu", "smoke"):
            assert resolve_grid(method, profile) == ((PROFILE_DEFAULTS[profile]["lr"][method],), False)


def test_lr_pins_one_value_and_lr_grid_replaces_the_grid():
    assert resolve_grid("prompt", "paper", lr=3e-3) == ((3e-3,), True)
    assert resolve_grid("lora", "cpu", lr_grid=(1e-4, 1e-3)) == ((1e-4, 1e-3), False)
    with pytest.raises(UsageError, match="either lr .* or lr_grid"):
        resolve_grid("prompt", "cpu", lr=1e-3, lr_grid=(1e-3,))
    for bad, message in (((), "empty"), ((1e-3, -1.0), "finite numbers > 0"), ((1e-3, math.inf), "finite"),
                         ((1e-3, math.nan), "finite"), ((1e-3, 1e-3), "repeats")):
        with pytest.raises(UsageError, match=message):
            check_lr_grid(bad)


def test_defense_parameters_parse_the_grid_from_the_command_line():
    defense = make_plugin(DEFENSES, "t2t", {"method": "prompt", "lr_grid": "3e-4, 3e-3", "patience": "2"})
    assert defense.lr_grid == (3e-4, 3e-3) and defense.patience == 2
    with pytest.raises(UsageError, match="lr_grid"):
        make_plugin(DEFENSES, "rapt", {"lr_grid": "3e-4,0"})
    with pytest.raises(UsageError, match="not both"):  # when built, before any work
        make_plugin(DEFENSES, "t2t", {"method": "prompt", "lr": "1e-3", "lr_grid": "3e-4,3e-3"})


# --- the choice -------------------------------------------------------------------------------------------

def _candidate(lr, accuracy, loss=0.5, diverged=False):
    curve = [{"epoch": 1, "task_loss": 0.7, "valid_accuracy": accuracy, "valid_loss": loss}]
    return Candidate(lr, curve, diverged=diverged, diverged_epoch=2 if diverged else None, best_epoch=1)


def test_choice_prefers_accuracy_then_loss_then_grid_order_and_never_a_diverged_entry():
    assert choose([_candidate(1e-4, 0.7), _candidate(1e-3, 0.8), _candidate(1e-2, 0.75)]).lr == 1e-3
    assert choose([_candidate(1e-4, 0.8, 0.6), _candidate(1e-3, 0.8, 0.4)]).lr == 1e-3
    assert choose([_candidate(1e-4, 0.8), _candidate(1e-3, 0.8)]).lr == 1e-4
    # A diverged entry is never chosen, however good its curve looked before it diverged.
    assert choose([_candidate(1e-4, 0.6), _candidate(1e-2, 0.95, diverged=True)]).lr == 1e-4
    with pytest.raises(UsageError, match=r"every learning rate of the grid \(0\.01, 1\)"):
        choose([_candidate(1e-2, 0.9, diverged=True), _candidate(1.0, 0.9, diverged=True)])


def test_a_diverging_lr_is_recorded_in_its_curve_and_not_chosen(minilm):
    trained, record = select_and_train(minilm, TEXTS, LABELS, _settings(), grid=(3e-3, 1e30), pinned=False,
                                       n_labels=2, seed=0, split_rng=np.random.default_rng(0))
    ok, bad = record["candidates"]
    assert bad["lr"] == 1e30 and bad["diverged"] and bad["best_epoch"] is None and bad["valid_accuracy"] is None
    assert bad["curve"][-1] == {"epoch": bad["diverged_epoch"], "diverged": True} and "nan" in bad["diverged_reason"]
    assert not ok["diverged"] and record["chosen"]["lr"] == 3e-3 == trained.settings.lr
    assert record["chosen"]["epoch"] == ok["best_epoch"] == trained.best_epoch
    assert record["validation_examples"] == 6 and record["trained_on_examples"] == 6
    with pytest.raises(UsageError, match="diverged .* at every learning rate of the grid \\(1e\\+30\\)"):
        select_and_train(minilm, TEXTS, LABELS, _settings(), grid=(1e30,), pinned=True, n_labels=2, seed=0,
                         split_rng=np.random.default_rng(0))


def test_early_stopping_records_the_curve_keeps_the_best_epoch_and_reproduces(minilm):
    settings = _settings(epochs=3, patience=3)
    runs = [select_and_train(minilm, TEXTS, LABELS, settings, grid=(1e-2,), pinned=True, n_labels=2, seed=4,
                             split_rng=np.random.default_rng(1)) for _ in range(2)]
    (first, record), (second, again) = runs
    assert record == again, "a pinned lr with early stopping must be deterministic for a seed"
    curve = record["candidates"][0]["curve"]
    assert [c["epoch"] for c in curve] == [1, 2, 3] and all(0 <= c["valid_accuracy"] <= 1 for c in curve)
    best = max(curve, key=lambda c: c["valid_accuracy"])  # the first epoch reaching the best accuracy
    assert record["chosen"]["epoch"] == best["epoch"] == first.best_epoch
    assert record["pinned"] and record["lr_grid"] == [1e-2]
    assert np.array_equal(first.predict_proba(TEXTS[:4]), second.predict_proba(TEXTS[:4]))


def test_the_service_predicts_under_the_rule_it_records(minilm):
    trained, record = select_and_train(minilm, TEXTS, LABELS, _settings(), grid=(1e-2,), pinned=True, n_labels=2,
                                       seed=0, split_rng=np.random.default_rng(0))
    assert np.array_equal(trained.class_bias, np.asarray(record["decision"]["bias"]))
    plain = trained.predict_proba(TEXTS[:4])
    trained.class_bias = None
    raw = trained.predict_proba(TEXTS[:4])
    assert np.allclose(plain, biased_probabilities(raw, np.asarray(record["decision"]["bias"])), atol=1e-6)


# --- the test split never reaches the choice ---------------------------------------------------------------

def _poisoned(records: list[Record]) -> list[Record]:
    top = max(r.label for r in records)
    return [replace(r, text="zzz qqq " * (i % 5 + 1), label=top - r.label, entities=())
            for i, r in enumerate(records)]


def test_a_poisoned_test_split_cannot_change_the_choice(ctx, synthetic_splits):
    """Flipped labels and replaced texts in the test split: same validation curves, same choice."""
    params = {"method": "prompt", "eta": 100.0, "lr_grid": "3e-3,1e-2", "epochs": 2}  # two: an epoch to choose too
    # 30 training texts (the validation split's 15 and 15 trained on): what is checked is where the choice's
    # numbers come from, not how well the service learns; the two fits train everything twice.
    train = synthetic_splits.victim_train[:30]
    outcomes = []
    for test in (list(synthetic_splits.victim_test), _poisoned(list(synthetic_splits.victim_test))):
        defense = make_plugin(DEFENSES, "t2t", params).fit(train, ctx=ctx)
        utility = defense.utility(test, ctx=ctx)
        outcomes.append((utility["accuracy"].value, defense._training))  # what release.meta records
    (clean_accuracy, clean), (poisoned_accuracy, poisoned) = outcomes
    assert clean["selection"] == poisoned["selection"]
    assert clean["history"] == poisoned["history"] and clean["settings"] == poisoned["settings"]
    assert clean_accuracy != poisoned_accuracy  # the poison did reach the (final) scoring step
    selection = clean["selection"]
    assert selection["lr_grid"] == [3e-3, 1e-2] and not selection["pinned"]
    assert selection["chosen"]["lr"] in (3e-3, 1e-2) and clean["settings"]["lr"] == selection["chosen"]["lr"]
    assert clean["train_examples"] == len(train)
    assert selection["validation_examples"] + selection["trained_on_examples"] == clean["train_examples"]


def test_pinned_lr_is_recorded(ctx, synthetic_splits):
    defense = make_plugin(DEFENSES, "t2t", {"method": "lora", "eta": math.inf, "lr": "5e-4", "epochs": 1})
    defense.fit(synthetic_splits.victim_train, ctx=ctx).utility(synthetic_splits.victim_test, ctx=ctx)
    selection = defense.release(synthetic_splits.victim_test, ctx=ctx).meta["customization"]["selection"]
    assert selection["pinned"] and selection["lr_grid"] == [5e-4] and selection["chosen"]["epoch"] == 1


# --- the report -------------------------------------------------------------------------------------------

def test_report_note_shows_grid_curves_choice_and_divergence(tmp_path):
    from rapt_audit.pipeline.results import write_result
    from rapt_audit.reporting.collect import collect
    from rapt_audit.reporting.sections import selection_note
    from rapt_audit.reporting.summary import group_results
    from tests.result_factory import fake_result

    selection = {"validation_examples": 50, "max_epochs": 3, "lr_grid": [3e-4, 3e-3, 1e-2], "pinned": False,
                 "candidates": [
                     {"lr": 3e-4, "diverged": False, "best_epoch": 2, "curve": [
                         {"epoch": 1, "valid_accuracy": 0.61}, {"epoch": 2, "valid_accuracy": 0.64}]},
                     {"lr": 3e-3, "diverged": False, "best_epoch": 1, "curve": [
                         {"epoch": 1, "valid_accuracy": 0.8}, {"epoch": 2, "valid_accuracy": 0.78}]},
                     {"lr": 1e-2, "diverged": True, "diverged_epoch": 2, "curve": [
                         {"epoch": 1, "valid_accuracy": 0.55}, {"epoch": 2, "diverged": True}]},
                     "hostile", {"lr": "<script>", "curve": [{"epoch": "x", "valid_accuracy": "nan"}]}],
                 "chosen": {"lr": 3e-3, "epoch": 1, "valid_accuracy": 0.8}}
    with_selection = fake_result(eta=50.0)
    with_selection.defense["release_meta"]["customization"] = {"selection": selection}
    write_result(with_selection, tmp_path / "a")
    write_result(fake_result(eta=75.0), tmp_path / "b")  # an old result without selection
    (group,) = group_results(collect([tmp_path]).results)
    note = selection_note(group)
    assert note.count("<li>") == 1 and "50 validation texts" in note
    assert "lr 0.0003: 0.61 → <b>0.64</b>" in note and "<u>lr 0.003</u>: <b>0.80</b> → 0.78" in note
    assert "lr 0.01: 0.55 → <span class='tag warn'>diverged in epoch 2</span>" in note
    assert "lr 0.003, epoch 1 of at most 3, validation accuracy 0.800" in note and "<script>" not in note
    assert selection_note(group_results(collect([tmp_path / "b"]).results)[0]) == ""
