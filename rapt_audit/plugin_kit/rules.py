"""The rules of the conformance battery, in words, and the checks that need more than the runner's own.

:data:`DEFENSE_RULES` and :data:`ATTACK_RULES` map each rule's name to a short title and what a plugin
must do; the battery (:mod:`~rapt_audit.plugin_kit.conformance`) runs them in this order, prints the
title with each verdict and the full sentence as the expectation of a rule that failed. What a run
checks of a plugin's answers (a release, utility estimates, an attack result) is
:mod:`rapt_audit.pipeline.contracts`, applied as it is; this module holds what only a conformance check
asks: that parameters are declared and enforced, that a seed reproduces a release, that an attack
copes with victim records lacking private facts.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from typing import Any, Mapping, Sequence

from rapt_audit.api.errors import DataError
from rapt_audit.api.params import Range, declared_constraints, make_plugin, parameter_fields, plugin_fields
from rapt_audit.api.registry import Registry
from rapt_audit.api.types import Record, Release
from rapt_audit.data import load_dataset

_COMMON = {
    "loads": ("imports", "the entry point imports and names the plugin's class"),
    "contract": ("is a plugin class", "a dataclass (each subclass decorated too) with {attribute} (a non-empty set of "
                 "release kinds), {methods}, "
                 "tags a tuple of strings"),
    "builds": ("builds with its defaults", "builds with its defaults (plus its profiles['smoke'] overrides and any "
               "--set values)"),
    "parameters": ("parameters declared and enforced", "every parameter has a default and a type --set can parse "
                   "(int, float, bool, str, a Literal, a tuple of these, or one of them | None); a value outside a "
                   "declared Range or Literal is refused when the plugin is built (subclass CheckedParams)"),
}


def _common(attribute: str, methods: str) -> dict[str, tuple[str, str]]:
    return {k: (title, text.format(attribute=attribute, methods=methods)) for k, (title, text) in _COMMON.items()}


#: Defense rules, in the order they run: name → (short title, what the defense must do).
DEFENSE_RULES: dict[str, tuple[str, str]] = {
    **_common("exposes", "fit(), utility() and release()"),
    "fit": ("fit() returns the defense", "fit(victim_train, ctx=ctx) returns the defense itself"),
    "release": ("release() is a valid Release", "release(victim_test, ctx=ctx) returns a Release of every kind it "
                "exposes, one unit per record, in the records' order (texts as strings)"),
    "deterministic": ("same seed, same release", "a second instance, built and fitted the same way, releases exactly "
                      "the same for the same seed (randomness only from ctx.rng)"),
    "utility": ("utility() gives valid Estimates", "utility(victim_test, ctx=ctx) maps declared utility metrics to "
                "Estimates, finite and within their range"),
}

#: Attack rules, in the order they run: name → (short title, what the attack must do).
ATTACK_RULES: dict[str, tuple[str, str]] = {
    **_common("requires", "fit() and attack()"),
    "defense": ("a defense to attack", "the defense it is checked against (identity unless --defense) fits and "
                "releases"),
    "fit": ("fit() returns the attack", "fit(attacker_data, defense, ctx=ctx) returns the attack itself (or raises "
            "Skip(reason))"),
    "attack": ("attack() returns an AttackResult", "attack(release, victim_test, ctx=ctx) returns an AttackResult "
               "(or raises Skip(reason))"),
    "metrics": ("metrics declared and in range", "its empirical privacy and every metric are Estimates of declared "
                "metrics, finite and within their declared range (1 - attack success in [0, 1] unless declared "
                "otherwise)"),
    "deterministic": ("same seed, same result", "a second instance, fitted and run with the same seed, gives the "
                      "same empirical privacy"),
    "skip": ("copes without private facts", "on victim records without private attributes or entity spans, "
             "attack() returns a valid AttackResult or raises Skip(reason), nothing else"),
}


class Broken(Exception):
    """A rule the plugin broke, with what came back (raised inside a rule's check, recorded as its FAIL)."""


def build(registry: Registry[type], name: str, params: Mapping[str, Any]) -> Any:
    """The plugin ``name`` as a smoke run builds it: its ``profiles["smoke"]`` overrides, then ``params``."""
    cls = registry.get(name)
    smoke = dict(getattr(cls, "profiles", {}).get("smoke", {}))
    return make_plugin(registry, name, {**smoke, **params})


def _settable(tp: Any) -> bool:
    """Whether ``--set KEY=VALUE`` text can be turned into a value of type ``tp`` (see ``api.params.coerce``)."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp in (int, float, bool, str) or tp is Any or origin is typing.Literal:
        return True
    if origin in (typing.Union, types.UnionType):
        return all(a is type(None) or _settable(a) for a in args)
    if origin in (tuple, list):
        return all(a is Ellipsis or _settable(a) for a in args)
    return False


def _outside(rule: Range) -> float:
    """A value that breaks ``rule``: just past its lower bound, else past its upper one, else infinity."""
    if rule.low is not None:
        return rule.low if rule.low_open else rule.low - 1
    if rule.high is not None:
        return rule.high if rule.high_open else rule.high + 1
    return math.inf


def parameter_problems(kind: str, cls: type, built: Any) -> tuple[list[str], str]:
    """What is wrong with the parameters of ``cls`` (``built`` is an instance), and a note of what was checked.

    Each declared :class:`~rapt_audit.api.params.Range` and ``Literal`` is tried with a value it forbids,
    which building must refuse; a :class:`~rapt_audit.api.params.Check` validator is trusted, as its bad
    values are known only to it.
    """
    problems: list[str] = []  # an undecorated subclass fails the contract rule first (api.plugins.plugin_problem)
    hints = plugin_fields(cls)
    fields = parameter_fields(cls)
    for f in fields:
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            problems.append(f"{f.name} has no default (a run builds the {kind} from its defaults and --set values)")
        if not _settable(hints[f.name]):
            problems.append(f"{f.name}: {hints[f.name]!r} cannot be given as --set {f.name}=VALUE")
    tried = 0
    for name, declared in declared_constraints(cls).items():
        bad = [(_outside(c), c.describe()) for c in declared.constraints if isinstance(c, Range)]
        if declared.choices:
            bad.append(("not-one-of-the-choices", "be one of " + ", ".join(map(str, declared.choices))))
        for value, rule in bad:
            tried += 1
            try:
                dataclasses.replace(built, **{name: value})
            except (ValueError, TypeError):
                continue  # refused, as declared (UsageError is a ValueError)
            problems.append(f"{name}={value!r} breaks its declared rule (must {rule}) but the {kind} was built with "
                            f"it: subclass CheckedParams (rapt_audit.plugin) so that declarations are enforced")
    if not fields:
        return problems, "no parameters"
    return problems, f"{', '.join(f.name for f in fields)}; {tried} forbidden value(s) refused"


def missing_public_corpus(defense: Any) -> str | None:
    """Why a defense that trains on a named public corpus (SnD: WikiText-2) cannot run here, if it cannot."""
    corpus = getattr(defense, "public_corpus", None)
    if not isinstance(corpus, str):
        return None
    try:
        load_dataset(corpus, None)
    except DataError as exc:
        return f"it trains on the public corpus {corpus!r}, which is not available here: {exc}"
    return None


def _first_difference(a: Sequence[Any], b: Sequence[Any], uids: Sequence[str], same: Any) -> str | None:
    if len(a) != len(b):
        return f"{len(a)} items the first time, {len(b)} the second"
    for uid, x, y in zip(uids, a, b):
        if not same(x, y):
            return f"record {uid!r} differs: {x!r:.80} the first time, {y!r:.80} the second"
    return None


def different_release(first: Release, second: Release) -> str | None:
    """Where two releases of the same records differ (``None`` when they are identical)."""
    import numpy as np  # lazy (numpy)

    if first.uids != second.uids:
        return "the two releases hold other records"
    checks = (("texts", lambda x, y: x == y), ("token_embeddings", np.array_equal),
              ("sequence_embeddings", np.array_equal))
    for kind, same in checks:
        a, b = getattr(first, kind), getattr(second, kind)
        if (a is None) != (b is None):
            return f"one release holds {kind} and the other does not"
        if a is not None:
            found = _first_difference(list(a), list(b), first.uids, same)
            if found:
                return f"{kind}: {found}"
    return None


def strip_private_facts(records: Sequence[Record]) -> list[Record]:
    """``records`` without their private attributes and entity spans (same uids, texts and labels)."""
    return [dataclasses.replace(r, attributes={}, entities=()) for r in records]


__all__ = ["ATTACK_RULES", "DEFENSE_RULES", "Broken", "build", "different_release",
           "missing_public_corpus", "parameter_problems", "strip_private_facts"]
