"""The local-only baselines (issue #38): each client scores with per-record parts, releases nothing, and every
attack is skipped with the reason; ``table`` is SnD's client-only control, ``bow`` identity's probe."""

from __future__ import annotations

import json

import numpy as np
import pytest

from rapt_audit.api.errors import UsageError
from rapt_audit.api.params import make_plugin
from rapt_audit.api.plugins import ATTACKS, DEFENSES, load
from rapt_audit.cli import main
from rapt_audit.pipeline.contracts import check_release
from rapt_audit.plugin_kit.rules import build

load()
HEAD = ("hidden", "dropout", "lr", "epochs", "batch_size")


@pytest.mark.parametrize("client", ["table", "bow", "encoder"])
def test_each_client_scores_the_test_records_with_per_record_parts(client, ctx, synthetic_splits):
    defense = build(DEFENSES, "local", {"client": client}).fit(synthetic_splits.victim_train, ctx=ctx)
    utility = defense.utility(synthetic_splits.victim_test, ctx=ctx)
    accuracy = utility["accuracy"]
    assert accuracy.per_record is not None and len(accuracy.per_record) == len(synthetic_splits.victim_test)
    assert set(accuracy.per_record.num) <= {0.0, 1.0} and set(accuracy.per_record.den) == {1.0}
    assert accuracy.per_record.value == pytest.approx(accuracy.value, abs=1e-12)
    assert accuracy.ci_low <= accuracy.value <= accuracy.ci_high
    assert ("auc" in utility) is (client != "bow")  # the heads give probabilities, the probe labels


def test_bow_is_identitys_default_probe_on_the_same_records(ctx, synthetic_splits):
    train, test = synthetic_splits.victim_train, synthetic_splits.victim_test
    local = build(DEFENSES, "local", {"client": "bow"}).fit(train, ctx=ctx).utility(test, ctx=ctx)
    identity = build(DEFENSES, "identity", {}).fit(train, ctx=ctx).utility(test, ctx=ctx)
    assert local["accuracy"].per_record == identity["accuracy"].per_record


def test_table_is_snds_client_only_control(ctx, synthetic_splits):
    """The same vectors (SnD's X̃ − Z is the clean rows up to rounding) read by the same head settings."""
    from rapt_audit.defenses.local import mean_token_embeddings

    records = synthetic_splits.victim_test[:20]
    local = build(DEFENSES, "local", {"client": "table"})
    snd = build(DEFENSES, "snd", {"eta": 50})
    ours = local.features(records, ctx=ctx)
    assert ours.shape == (20, 384)
    np.testing.assert_allclose(ours, snd.client_only(records, ctx=ctx), atol=1e-5)
    np.testing.assert_array_equal(ours, mean_token_embeddings(ctx, [r.text for r in records]))
    local_cls, snd_cls = DEFENSES.get("local"), DEFENSES.get("snd")
    for profile in ("smoke", "cpu", "paper"):  # SnD's client-only head, profile by profile
        ours_head = {k: local_cls.profiles.get(profile, {}).get(k, getattr(local_cls(), k)) for k in HEAD}
        snds_head = {k: snd_cls.profiles.get(profile, {}).get(k, getattr(snd_cls(), k)) for k in HEAD}
        assert ours_head == snds_head, profile


def test_the_release_holds_nothing_and_a_run_skips_every_attack(tmp_path, ctx, synthetic_splits, monkeypatch):
    defense = build(DEFENSES, "local", {"client": "table"})
    test = synthetic_splits.victim_test
    release = check_release("local", frozenset(defense.exposes), defense.release(test, ctx=ctx), test)
    assert defense.exposes == frozenset() and release.kinds == frozenset()
    assert release.uids == tuple(r.uid for r in test) and "nothing" in release.meta["released"]
    assert {"baseline", "local"} <= set(DEFENSES.entry("local").tags)

    monkeypatch.delenv("RAPT_AUDIT_DATA", raising=False)
    out = tmp_path / "run"
    assert main(["run", "--defense", "local", "--set", "client=table", "--attacks", "all", "--profile", "smoke",
                 "--dataset", "synthetic", "--set", "data.victim_train=60", "--set", "data.victim_test=40",
                 "--out", str(out), "--quiet"]) == 0
    doc = json.loads((out / "result.json").read_text(encoding="utf-8"))
    assert doc["defense"]["exposes"] == [] and doc["utility"]["accuracy"]["per_record"]
    assert set(doc["attacks"]) == set(ATTACKS.select("all"))  # no worst case: nothing was attacked
    for name, outcome in doc["attacks"].items():
        assert "does not apply" in outcome["skipped"] and "releases nothing" in outcome["skipped"], name


def test_its_benchmark_cells_run_on_the_utility_dataset_alone():
    from rapt_audit.benchmark.plan import datasets_of
    from rapt_audit.benchmark.validate import load_benchmark

    for name in ("sst2-cpu", "sst2-paper"):
        bench = load_benchmark(name, check_data=False)
        (local,) = [d for d in bench.defenses if d.name == "local"]
        assert [(k, list(v)) for k, v in local.grid] == [("client", ["table", "bow", "encoder"])], name
        assert datasets_of(bench, "local") == ["sst2"], name


def test_a_bad_client_names_the_allowed_values():
    for make in (lambda: make_plugin(DEFENSES, "local", {"client": "tabel"}),
                 lambda: DEFENSES.get("local")(client="tabel")):
        with pytest.raises(UsageError, match=r"client='tabel' is not one of: table, bow, encoder"):
            make()


@pytest.mark.parametrize("client", ["table", "encoder"])
def test_on_a_pair_task_the_client_reads_both_texts(client, ctx):
    """Issue 38: a baseline blind to the second question is no baseline for a pair task. Here the label says
    whether the two texts are the same sentence: the first text alone carries nothing about it."""
    from rapt_audit.api.types import Record

    rng = np.random.default_rng(0)
    words = ["the", "film", "plot", "actor", "music", "scene", "story", "ending", "dull", "warm", "long", "bright"]
    sentences = [" ".join(rng.choice(words, size=6)) for _ in range(60)]

    def pairs(n, start):
        out = []
        for i in range(n):
            a = sentences[int(rng.integers(len(sentences)))]
            same = bool(i % 2)
            b = a if same else sentences[int(rng.integers(len(sentences)))]
            out.append(Record(uid=f"pairs/{start + i}", text=a, text_pair=b, label=int(same and a == b)))
        return out

    train, test = pairs(300, 0), pairs(120, 1000)
    defense = build(DEFENSES, "local", {"client": client, "epochs": 30}).fit(train, ctx=ctx)
    assert defense.features(test[:3], ctx=ctx).shape[1] == 4 * defense.features(
        [Record(uid=r.uid, text=r.text) for r in test[:3]], ctx=ctx).shape[1]
    both = defense.utility(test, ctx=ctx)["accuracy"]
    blind = build(DEFENSES, "local", {"client": client, "epochs": 30}).fit(
        [Record(uid=r.uid, text=r.text, label=r.label) for r in train], ctx=ctx).utility(
        [Record(uid=r.uid, text=r.text, label=r.label) for r in test], ctx=ctx)["accuracy"]
    assert both.value > 0.9 and blind.ci_low < 0.6 < both.ci_low, (both, blind)
