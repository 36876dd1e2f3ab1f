"""One contract, checked the same way for every registered defense and attack (tiny settings).

A new plugin is covered as soon as it registers; it supplies tiny settings through its
``profiles["smoke"]`` overrides. Checks: fit returns self, releases match their inputs in length
and order and expose what the defense declares, seeds reproduce, metrics are registered, finite,
in range and inside their intervals.
"""

from __future__ import annotations

import math

import pytest

from rapt_audit.api.params import make_plugin
from rapt_audit.api.plugins import ATTACKS, DEFENSES, load
from rapt_audit.api.types import RELEASE_KINDS, AttackResult, Estimate, Release
from rapt_audit.pipeline.contracts import check_attack_result, check_release, check_utility
from rapt_audit.scoring.metrics import METRICS, headline_metric

load()


def _build(registry, name):
    cls = registry.get(name)
    return make_plugin(registry, name, dict(getattr(cls, "profiles", {}).get("smoke", {})))


def _check_estimate(name: str, est: Estimate) -> None:
    metric = METRICS.get(name.split(".")[0])
    assert math.isfinite(est.value) and est.ci_low <= est.value <= est.ci_high, name
    if metric.bounded:
        assert 0.0 <= est.ci_low and est.ci_high <= 1.0, (name, est)


def _missing_public_corpus(defense) -> str | None:
    """Why a defense that trains on a named public corpus (SnD: WikiText-2) cannot run here, if it cannot."""
    from rapt_audit.api.errors import DataError
    from rapt_audit.data import load_dataset

    corpus = getattr(defense, "public_corpus", None)
    if not isinstance(corpus, str):
        return None
    try:
        load_dataset(corpus, None)
    except DataError as exc:
        return f"{defense.name} trains on the public corpus {corpus!r}, which is not available: {exc}"
    return None


@pytest.mark.parametrize("name", DEFENSES.names())
def test_defense_contract(name, ctx, synthetic_splits):
    defense = _build(DEFENSES, name)
    reason = _missing_public_corpus(defense)
    if reason:
        pytest.skip(reason)
    assert defense.exposes and defense.exposes <= RELEASE_KINDS
    assert defense.fit(synthetic_splits.victim_train, ctx=ctx) is defense
    test = synthetic_splits.victim_test
    release = defense.release(test, ctx=ctx)
    assert isinstance(release, Release)
    check_release(name, defense.exposes, release, test)  # what the runner checks of every release
    assert release.uids == tuple(r.uid for r in test)
    assert release.kinds == defense.exposes
    again = defense.release(test, ctx=ctx)
    assert _same_release(release, again), "the same seed must reproduce the release"
    utility = defense.utility(test, ctx=ctx)
    check_utility(name, utility)
    for metric, est in utility.items():
        assert METRICS.get(metric.split(".")[0]).kind == "utility"
        _check_estimate(metric, est)


def _same_release(a: Release, b: Release) -> bool:
    import numpy as np

    if a.texts != b.texts:
        return False
    if a.token_embeddings is not None:
        return all(np.array_equal(x, y) for x, y in zip(a.token_embeddings, b.token_embeddings))
    if a.sequence_embeddings is not None:
        return bool(np.array_equal(a.sequence_embeddings, b.sequence_embeddings))
    return True


@pytest.mark.parametrize("name", ATTACKS.names())
def test_attack_contract(name, ctx, synthetic_splits):
    attack = _build(ATTACKS, name)
    assert attack.requires and attack.requires <= RELEASE_KINDS
    # Attack through the first defense (identity first) whose release the attack can read.
    candidates = ["identity"] + [n for n in DEFENSES.names() if n != "identity"]
    chosen = next(n for n in candidates if DEFENSES.get(n).exposes & attack.requires)
    defense = _build(DEFENSES, chosen).fit(synthetic_splits.victim_train, ctx=ctx)
    assert attack.fit(synthetic_splits.attacker, defense, ctx=ctx) is attack
    release = defense.release(synthetic_splits.victim_test, ctx=ctx)
    outcome = attack.attack(release, synthetic_splits.victim_test, ctx=ctx)
    assert isinstance(outcome, AttackResult)
    check_attack_result(name, outcome)  # what the runner checks (a breach would record the attack as failed)
    # 1 − attack success in [0, 1], or the attack's own declared measure (ae_inversion's reconstruction MSE).
    _check_estimate(headline_metric(outcome.metrics, outcome.empirical_privacy), outcome.empirical_privacy)
    for metric, est in outcome.metrics.items():
        _check_estimate(metric, est)
    repeat = _build(ATTACKS, name).fit(synthetic_splits.attacker, defense, ctx=ctx)
    assert repeat.attack(release, synthetic_splits.victim_test, ctx=ctx).empirical_privacy == outcome.empirical_privacy
