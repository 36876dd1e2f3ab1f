"""One contract, checked the same way for every registered defense and attack (tiny settings).

The rules are the shipped conformance battery (:mod:`rapt_audit.plugin_kit.conformance`, what
``rapt-audit plugin check NAME`` runs on an installed plugin), so the repository and plugin authors
check with one implementation. A new plugin is covered as soon as it registers; it supplies tiny
settings through its ``profiles["smoke"]`` overrides. The second half checks the battery itself: each
deliberately broken plugin fails the rule it breaks, by name, and a correct one passes.
"""

from __future__ import annotations

import contextlib
import io
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import pytest

from rapt_audit.api.params import CheckedParams, PositiveInt
from rapt_audit.api.plugins import ATTACKS, DEFENSES, load
from rapt_audit.api.types import AttackResult, Estimate, Release
from rapt_audit.cli.main import main
from rapt_audit.defenses._text import TextDefense
from rapt_audit.plugin_kit.conformance import ConformanceReport, check_plugin
from tests.fake_plugins import FakeAttack, OutOfRange, ReturnsFloat, UndeclaredMetric

load()
# PCT2T and RAPT read the POS lexicon: the `ctx` fixture's cache folder is seeded with the session's
# (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("_pos_template")

#: Smaller trainings than the smoke profile for the built-ins whose check trains a network (the battery
#: fits twice, for the determinism rule): the rules check the contract (kinds, determinism, ranges,
#: caching), not how well the network learns, which the attacks' and defenses' own tests check. A plugin
#: checked with ``rapt-audit plugin check`` runs its smoke profile as before.
#: (ner and ner_adaptive train long enough to find some entity in clean text: a tagger that finds none skips.)
SMALLER = {"ner": {"max_train_sentences": 30, "epochs": 4}, "ner_adaptive": {"max_train_sentences": 30, "epochs": 4},
           "bow_inversion": {"epochs": 3}, "ae_inversion": {"epochs": 2}, "rapt": {"plain_tokens": 8}}


@pytest.fixture(scope="module")
def battery_splits():
    """Half the battery's own splits (:data:`~rapt_audit.plugin_kit.conformance.SPLIT_SIZES`, 60/40/60/30): the
    rules check kinds, ranges, determinism and caching, which hold at any size; the battery fits everything twice."""
    from rapt_audit.data import SplitSizes, load_dataset, make_splits

    return make_splits(load_dataset("synthetic"), SplitSizes(30, 20, 30, 20), seed=1)


@pytest.mark.parametrize("name", DEFENSES.names())
def test_defense_contract(name, ctx, battery_splits):
    report = check_plugin("defense", name, params=SMALLER.get(name), ctx=ctx, splits=battery_splits)
    assert report.passed, report.format()
    if report.skipped:  # a defense skips only what needs a public corpus not available here (SnD: WikiText-2)
        pytest.skip(report.skipped[0].got)


@pytest.mark.parametrize("name", ATTACKS.names())
def test_attack_contract(name, ctx, battery_splits):
    report = check_plugin("attack", name, params=SMALLER.get(name), ctx=ctx, splits=battery_splits)
    assert report.passed and not report.skipped, report.format()


# ---------------------------------------------------------------- the battery catches broken plugins


def _estimate(value: float) -> Estimate:
    return Estimate(value, max(0.0, value - 0.1), min(1.0, value + 0.1), 10, "test")


@dataclass
class GoodDefense(CheckedParams):
    """Releases each text reversed word by word; keeps every rule."""

    exposes: ClassVar[frozenset[str]] = frozenset({"texts"})
    k: PositiveInt = 2

    def fit(self, train: Any, *, ctx: Any) -> Any:
        return self

    def utility(self, test: Any, *, ctx: Any) -> Any:
        return {"accuracy": _estimate(0.5)}

    def release(self, records: Any, *, ctx: Any) -> Any:
        return Release(tuple(r.uid for r in records), texts=tuple(" ".join(r.text.split()[::-1]) for r in records))


@dataclass
class ReleasesList(GoodDefense):
    def release(self, records: Any, *, ctx: Any) -> Any:
        return [r.text for r in records]


@dataclass
class GlobalRandom(GoodDefense):
    """Draws its noise from numpy's global state, not ctx.rng: a seed does not reproduce it."""

    def release(self, records: Any, *, ctx: Any) -> Any:
        return Release(tuple(r.uid for r in records), texts=tuple(f"{r.text} {np.random.random()}" for r in records))


@dataclass
class UndeclaredUtility(GoodDefense):
    def utility(self, test: Any, *, ctx: Any) -> Any:
        return {"my_score": _estimate(0.5)}


@dataclass
class FitReturnsNone(GoodDefense):
    def fit(self, train: Any, *, ctx: Any) -> Any:
        return None


@dataclass
class Unchecked:
    """Declares k >= 1 but does not subclass CheckedParams, so nothing enforces it."""

    exposes: ClassVar[frozenset[str]] = frozenset({"texts"})
    k: PositiveInt = 2
    fit, utility, release = GoodDefense.fit, GoodDefense.utility, GoodDefense.release


@dataclass
class Required(CheckedParams):
    """A parameter without a default: a run, which builds from defaults and --set values, cannot build it."""

    exposes: ClassVar[frozenset[str]] = frozenset({"texts"})
    secret: str
    fit, utility, release = GoodDefense.fit, GoodDefense.utility, GoodDefense.release


class ForgotDataclass(GoodDefense):
    """Adds a parameter but lacks @dataclass: ``extra`` is a plain class attribute, which --set refuses."""

    extra: PositiveInt = 3


class NotADataclass:
    exposes = frozenset({"texts"})
    fit, utility, release = GoodDefense.fit, GoodDefense.utility, GoodDefense.release


@dataclass
class GoodAttack(FakeAttack):
    """Guesses nothing; keeps every rule."""

    def attack(self, release: Any, truth: Any, *, ctx: Any) -> Any:
        success = _estimate(0.2)
        return AttackResult(success.complement(), {"token_accuracy": success})


@dataclass
class NeedsGender(GoodAttack):
    """Reads every victim record's gender without asking: a KeyError where a record has none."""

    def attack(self, release: Any, truth: Any, *, ctx: Any) -> Any:
        share = sum(r.attributes["gender"] == "female" for r in truth) / len(truth)
        return AttackResult(_estimate(share), {})


@dataclass
class Unseeded(GoodAttack):
    def attack(self, release: Any, truth: Any, *, ctx: Any) -> Any:
        return AttackResult(_estimate(float(np.random.default_rng().uniform(0.2, 0.8))), {})


#: name → (kind, class, the rule it breaks)
BROKEN = {
    "c_releases_list": ("defense", ReleasesList, "release"),
    "c_global_random": ("defense", GlobalRandom, "deterministic"),
    "c_undeclared_utility": ("defense", UndeclaredUtility, "utility"),
    "c_fit_none": ("defense", FitReturnsNone, "fit"),
    "c_unchecked": ("defense", Unchecked, "parameters"),
    "c_required": ("defense", Required, "builds"),
    "c_plain_class": ("defense", NotADataclass, "contract"),
    "c_forgot_dataclass": ("defense", ForgotDataclass, "contract"),
    "c_float": ("attack", ReturnsFloat, "attack"),
    "c_range": ("attack", OutOfRange, "metrics"),
    "c_undeclared": ("attack", UndeclaredMetric, "metrics"),
    "c_needs_gender": ("attack", NeedsGender, "skip"),
    "c_unseeded": ("attack", Unseeded, "deterministic"),
}


@pytest.fixture
def register():
    """``register(kind, name, cls)``: a plugin registered for this test only."""
    added = []

    def add(kind: str, name: str, cls: type) -> None:
        registry = DEFENSES if kind == "defense" else ATTACKS
        registry.add(name, cls)
        added.append((registry, name))

    yield add
    for registry, name in added:
        registry.remove(name)


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_a_broken_plugin_fails_the_rule_it_breaks(name, register, ctx, synthetic_splits):
    kind, cls, rule = BROKEN[name]
    register(kind, name, cls)
    report = check_plugin(kind, name, ctx=ctx, splits=synthetic_splits)
    assert [v.rule for v in report.failed] == [rule], report.format()
    (verdict,) = report.failed
    assert verdict.expected and verdict.got, "a failure says what was expected and what came back"


def test_a_broken_entry_point_fails_loads(register, ctx, synthetic_splits):
    DEFENSES.broken["c_ghost"] = "defense plugin entry point 'c_ghost' failed to load: ModuleNotFoundError: ghost"
    try:
        report = check_plugin("defense", "c_ghost", ctx=ctx, splits=synthetic_splits)
    finally:
        DEFENSES.remove("c_ghost")
    assert [v.rule for v in report.failed] == ["loads"] and "ModuleNotFoundError" in report.failed[0].got
    assert {v.status for v in report.verdicts[1:]} == {"SKIP"}


def test_correct_fakes_pass_every_rule(register, ctx, synthetic_splits):
    register("defense", "c_good_defense", GoodDefense)
    register("attack", "c_good_attack", GoodAttack)
    for kind, name in (("defense", "c_good_defense"), ("attack", "c_good_attack")):
        report = check_plugin(kind, name, ctx=ctx, splits=synthetic_splits, defense="c_good_defense")
        assert report.passed and not report.skipped, report.format()
        assert len(report.verdicts) >= 8


def _main(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


def test_the_command_prints_each_verdict_and_exits_1_on_a_broken_rule(register):
    register("defense", "c_releases_list", ReleasesList)
    code, out, err = _main(["plugin", "check", "c_releases_list"])
    assert code == 1, out + err
    assert "PASS  fit" in out and "FAIL  release" in out
    assert "expected: release(victim_test, ctx=ctx) returns a Release" in out
    assert "got:      defense 'c_releases_list' broke its contract: release() must return a rapt_audit Release; it " \
           "returned list" in out
    assert "c_releases_list (release)" in err


def test_the_command_exits_2_for_an_unknown_name_and_0_without_third_party_plugins():
    code, _, err = _main(["plugin", "check", "identiti"])
    assert code == 2 and "unknown plugin 'identiti'" in err and "identity" in err
    code, out, _ = _main(["plugin", "check", "--all-installed"])
    assert code == 0 and ("no third-party plugin is installed" in out or "verdict: PASS" in out)


def test_a_report_reads_pass_only_without_failures():
    report = ConformanceReport("defense", "x")
    assert report.passed and report.summary().startswith("verdict: PASS")


@dataclass
class PrivatizeReturnsTexts(TextDefense):
    """A text defense whose privatize() forgets the ReplacementCount (a newcomer's mistake)."""

    def privatize(self, texts: Any, *, rng: Any, ctx: Any) -> Any:
        return [t.upper() for t in texts]


def test_a_text_defense_breaking_privatize_is_named_with_its_contract(register, ctx, synthetic_splits):
    register("defense", "c_privatize_texts", PrivatizeReturnsTexts)
    report = check_plugin("defense", "c_privatize_texts", ctx=ctx, splits=synthetic_splits)
    assert report.failed, report.format()
    for verdict in report.failed:  # not "too many values to unpack" from deep inside the base class
        assert "privatize() must return (released_texts, ReplacementCount)" in verdict.got, report.format()
