"""bayes_inversion (issue #39, item 3): the contextual Bayesian attack on text releases.

A planted defense with a fixed, known channel and strong context: every animal word is released as the same
token ("animal"), while the verb after it, kept, names the animal. Only a contextual attack can undo that;
a context-blind one guesses the most common animal. On T2T the estimated channel must follow η, and the attack
must keep up with ``mlp_inversion``. Bands are interval separations, not tuned numbers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pytest

from rapt_audit.api.params import make_plugin
from rapt_audit.api.plugins import ATTACKS, DEFENSES, load
from rapt_audit.api.types import AttackerData, Record, Release, Skip

load()

#: Animal → the one verb it goes with: the released "animal" is ambiguous, its neighbour is not.
ANIMALS = {"cat": "sleeps", "dog": "runs", "cow": "eats", "bird": "sings"}
SIZES = ("old", "young", "small", "big")
TIMES = ("at night", "all day", "every morning")


@dataclass
class AnimalBlur:
    """Releases each text with every animal word replaced by ``animal`` (a fixed channel)."""

    name: ClassVar[str] = "animal_blur"
    exposes: ClassVar[frozenset[str]] = frozenset({"texts"})

    def release(self, records, *, ctx):
        texts = [" ".join("animal" if w in ANIMALS else w for w in r.text.split()) for r in records]
        return Release(uids=[r.uid for r in records], texts=texts)


def animal_records(n: int, *, start: int, seed: int) -> tuple[Record, ...]:
    rng = np.random.default_rng(seed)
    names = list(ANIMALS)
    out = []
    for i in range(n):
        animal = names[int(rng.choice(len(names), p=[0.4, 0.3, 0.2, 0.1]))]  # a clear majority for the blind guess
        text = f"the {SIZES[int(rng.integers(len(SIZES)))]} {animal} {ANIMALS[animal]} {TIMES[int(rng.integers(3))]}"
        out.append(Record(uid=f"animals/{start + i}", text=text))
    return tuple(out)


@pytest.fixture(scope="module")
def animals():
    aux = AttackerData(train=animal_records(120, start=0, seed=1), valid=animal_records(40, start=1000, seed=2))
    return aux, animal_records(80, start=2000, seed=3)


@pytest.fixture(scope="module")
def splits():
    from rapt_audit.data import SplitSizes, load_dataset, make_splits

    return make_splits(load_dataset("synthetic"), SplitSizes(20, 60, 150, 40), seed=3)


def bayes(**params):
    return make_plugin(ATTACKS, "bayes_inversion", {**ATTACKS.get("bayes_inversion").profiles["smoke"], **params})


def run(attack, defense, aux, victim, ctx):
    attack.fit(aux, defense, ctx=ctx)
    return attack.attack(defense.release(victim, ctx=ctx), victim, ctx=ctx)


def t2t(eta, splits, ctx):
    defense = make_plugin(DEFENSES, "t2t", {"eta": eta})
    return defense.fit(splits.victim_train, ctx=ctx)


def test_context_beats_the_context_blind_variant(ctx, animals):
    aux, victim = animals
    contextual = run(bayes(public_sentences=0), AnimalBlur(), aux, victim, ctx)
    blind = run(bayes(public_sentences=0, context=False), AnimalBlur(), aux, victim, ctx)
    assert blind.details["chosen"]["mix"] == 0.0 and contextual.details["chosen"]["mix"] > 0, contextual.details
    # Blind: every "animal" becomes the majority animal (40 % right); the verb gives the animal away.
    c_acc, b_acc = contextual.metrics["token_accuracy"], blind.metrics["token_accuracy"]
    assert c_acc.value > 0.97 and c_acc.ci_low > b_acc.ci_high, (c_acc, b_acc)
    assert contextual.empirical_privacy.ci_high < blind.empirical_privacy.ci_low, (contextual.empirical_privacy,
                                                                                   blind.empirical_privacy)
    assert contextual.empirical_privacy is contextual.metrics["content_privacy"]


def test_the_channel_follows_eta(ctx, splits):
    # η = 50: almost every T2T token replaced on MiniLM; η = 200: almost none. A channel estimate that
    # ignored η (one fixed keep probability) would give the same attack at both.
    results = {eta: run(bayes(), t2t(eta, splits, ctx), splits.attacker, splits.victim_test, ctx)
               for eta in (50.0, 200.0)}
    strong, weak = results[50.0], results[200.0]
    assert strong.details["keep_probability"] < 0.5 < weak.details["keep_probability"], (strong.details, weak.details)
    assert strong.empirical_privacy.ci_low > weak.empirical_privacy.ci_high, (strong.empirical_privacy,
                                                                              weak.empirical_privacy)


def test_at_least_as_strong_as_mlp_inversion_on_t2t(ctx, splits):
    defense = t2t(100.0, splits, ctx)
    mine = run(bayes(), defense, splits.attacker, splits.victim_test, ctx)
    mlp = run(make_plugin(ATTACKS, "mlp_inversion", ATTACKS.get("mlp_inversion").profiles["smoke"]), defense,
              splits.attacker, splits.victim_test, ctx)
    assert mine.metrics["content_privacy"].value <= mlp.metrics["content_privacy"].ci_high, (mine.metrics, mlp.metrics)
    assert mine.metrics["token_accuracy"].value >= mlp.metrics["token_accuracy"].ci_low, (mine.metrics, mlp.metrics)


def test_a_release_without_texts_is_skipped(ctx, splits, animals):
    embedding = make_plugin(DEFENSES, "embedding", {})
    with pytest.raises(Skip, match="texts"):
        bayes().fit(splits.attacker, embedding, ctx=ctx)
    aux, victim = animals
    attack = bayes(public_sentences=0).fit(aux, AnimalBlur(), ctx=ctx)
    vectors = Release(uids=[r.uid for r in victim], token_embeddings=[np.zeros((1, 4), np.float32)] * len(victim))
    with pytest.raises(Skip, match="texts"):
        attack.attack(vectors, victim, ctx=ctx)


def test_victim_attacker_overlap_raises(ctx, animals):
    aux, _ = animals
    attack = bayes(public_sentences=0).fit(aux, AnimalBlur(), ctx=ctx)
    with pytest.raises(AssertionError, match="attacker's data"):
        attack.attack(AnimalBlur().release(aux.valid, ctx=ctx), aux.valid, ctx=ctx)


def test_the_setting_is_chosen_on_a_seeded_sample_of_attacker_valid(ctx, animals):
    """``select_records`` caps the decoding of attacker-valid during the choice (the paper profile's cost);
    the sample is seeded, and the context the animals need is still found on it."""
    aux, victim = animals
    capped = [run(bayes(public_sentences=0, select_records=15), AnimalBlur(), aux, victim, ctx) for _ in range(2)]
    whole = run(bayes(public_sentences=0), AnimalBlur(), aux, victim, ctx)
    assert [r.details["chosen_on_records"] for r in capped] == [15, 15] and whole.details["chosen_on_records"] == 40
    attack = bayes(select_records=15)
    picked = [attack._selection_sample(list(range(40)), ctx=ctx) for _ in range(2)]  # indices stand in for views
    assert picked[0] == picked[1] == sorted(set(picked[0])) and len(picked[0]) == 15 and picked[0] != list(range(15))
    assert capped[0].details["chosen"]["mix"] > 0 and capped[0].metrics["token_accuracy"].value > 0.97


def test_a_grid_parameter_checks_each_value_and_refuses_an_empty_grid():
    from rapt_audit.api.errors import UsageError

    assert bayes(orders="2,3").orders == (2, 3) and bayes(mixes=[0.5]).mixes == (0.5,)
    for params, message in (({"orders": "2,6"}, r"orders must lie in \[1, 5\], got 6"),
                            ({"alphas": "0"}, r"alphas must be > 0, got 0"), ({"candidates": ""}, "at least one value"),
                            ({"mixes": "0.5,1.5"}, r"mixes must lie in \[0, 1\], got 1.5")):
        with pytest.raises(UsageError, match=message):
            bayes(**params)
