"""The conformance battery: the rules every defense and attack keeps, checked on an installed plugin.

``rapt-audit plugin check NAME`` runs it on a plugin as ``pip`` installed it (no checkout of this
repository needed), and ``tests/test_conformance.py`` runs it on every registered plugin, so the
rules have one implementation. Each rule gives a :class:`Verdict` — PASS, FAIL with what was
expected and what came back, or SKIP with why it did not run — and :class:`ConformanceReport`
collects them. The plugin runs on small seeded splits of the synthetic demo corpus at the ``smoke``
profile (its ``profiles["smoke"]`` overrides applied), on the CPU, as in a real run: what comes back
is judged by the runner's own checks (:mod:`rapt_audit.pipeline.contracts`), and an exception names
where in the plugin it was raised.

The rules themselves are :data:`DEFENSE_RULES` and :data:`ATTACK_RULES` (:mod:`~rapt_audit.plugin_kit.rules`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from rapt_audit.api.errors import PluginError, UsageError
from rapt_audit.api.plugins import ATTACKS, DEFENSES, load, plugin_problem, reference_defense
from rapt_audit.api.registry import Registry, unknown_name_message
from rapt_audit.api.types import AttackResult, Skip
from rapt_audit.data import Splits, SplitSizes, load_dataset, make_splits
from rapt_audit.pipeline.context import RunContext, default_cache_dir
from rapt_audit.pipeline.contracts import check_attack_result, check_release, check_utility, failure_message
from rapt_audit.plugin_kit.rules import (
    ATTACK_RULES,
    DEFENSE_RULES,
    Broken,
    build,
    different_release,
    missing_public_corpus,
    parameter_problems,
    strip_private_facts,
)

#: The data every check runs on: seeded disjoint parts of the synthetic demo corpus (seconds at ``smoke``).
SPLIT_SIZES = SplitSizes(victim_train=60, victim_test=40, attacker_train=60, attacker_valid=30)
SPLIT_SEED = 1
CONTEXT_SEED = 7


@dataclass(frozen=True)
class Verdict:
    """The outcome of one rule.

    Attributes:
        rule: The rule's name (``release``); ``title`` says it in a few words.
        status: ``PASS``, ``FAIL`` or ``SKIP``.
        expected: What the plugin must do, in full.
        got: What came back (a FAIL), why the rule did not run (a SKIP), or what was seen (a PASS).
    """

    rule: str
    title: str
    status: str
    expected: str
    got: str = ""


@dataclass
class ConformanceReport:
    """Every verdict of one plugin's check, in the order the rules ran."""

    kind: str
    name: str
    origin: str = ""
    verdicts: list[Verdict] = field(default_factory=list)

    @property
    def failed(self) -> list[Verdict]:
        """The rules the plugin broke."""
        return [v for v in self.verdicts if v.status == "FAIL"]

    @property
    def skipped(self) -> list[Verdict]:
        """The rules that did not run, each with why."""
        return [v for v in self.verdicts if v.status == "SKIP"]

    @property
    def passed(self) -> bool:
        """Whether no rule failed (a skipped rule is not a failure: its reason is printed)."""
        return not self.failed

    def header(self) -> str:
        """``defense word_drop (rapt-audit-word-drop 0.1.0)``: what is checked, and where it came from."""
        return f"{self.kind} {self.name} ({self.origin or 'built in'})"

    def summary(self) -> str:
        """The last line: ``verdict: PASS (8 rules)`` or which rules failed."""
        counts = f"{len(self.verdicts) - len(self.failed) - len(self.skipped)} passed"
        counts += f", {len(self.skipped)} skipped" if self.skipped else ""
        if self.passed:
            return f"verdict: PASS ({counts})"
        return f"verdict: FAIL ({len(self.failed)} failed: {', '.join(v.rule for v in self.failed)}; {counts})"

    def format(self) -> str:
        """The whole report as text: one block per rule, then the verdict."""
        return "\n".join([self.header(), *(format_verdict(v) for v in self.verdicts), self.summary()])


def format_verdict(verdict: Verdict) -> str:
    """``  PASS  release        release() is a valid Release: 40 records, texts``; a FAIL adds, on lines of their
    own, what was expected and what came back."""
    head = f"  {verdict.status}  {verdict.rule:<14} {verdict.title}"
    if verdict.status == "FAIL":
        return f"{head}\n        expected: {verdict.expected}\n        got:      {verdict.got}"
    if verdict.status == "SKIP":
        return f"{head}: not run, {verdict.got}"
    return f"{head}: {verdict.got}" if verdict.got else head


def default_context() -> RunContext:
    """The context every check runs in: seed 7, ``smoke`` profile, CPU, the user's cache directory."""
    return RunContext(seed=CONTEXT_SEED, profile="smoke", device="cpu", cache_dir=default_cache_dir())


def default_splits() -> Splits:
    """The data every check runs on (:data:`SPLIT_SIZES` of the synthetic demo corpus, seed 1)."""
    return make_splits(load_dataset("synthetic"), SPLIT_SIZES, seed=SPLIT_SEED)


def kinds_of(name: str) -> list[str]:
    """``["defense"]``, ``["attack"]`` or both: what an installed plugin named ``name`` is.

    Raises:
        UsageError: (an unknown name) with the closest names of either kind.
    """
    load()
    found = [kind for kind, registry in (("defense", DEFENSES), ("attack", ATTACKS))
             if name in registry or name in registry.broken]
    if not found:
        raise UsageError(unknown_name_message("plugin", name, DEFENSES.names() + ATTACKS.names())
                         + " (rapt-audit ls lists them; a plugin you installed names its entry point in its "
                         "pyproject.toml)")
    return found


def installed_plugins() -> list[tuple[str, str]]:
    """``(kind, name)`` of every third-party plugin installed through an entry point, loaded or broken."""
    load()
    found = []
    for kind, registry in (("defense", DEFENSES), ("attack", ATTACKS)):
        names = {e.name for e in registry.entries() if e.origin} | set(registry.broken)
        found += [(kind, name) for name in sorted(names)]
    return found


class _Battery:
    """Runs the rules of one plugin in order, recording a verdict for each (see :func:`check_plugin`)."""

    def __init__(self, report: ConformanceReport, rules: Mapping[str, tuple[str, str]],
                 on_verdict: Callable[[Verdict], None] | None) -> None:
        self.report, self.rules, self.on_verdict = report, rules, on_verdict

    def record(self, rule: str, status: str, got: str = "") -> None:
        title, expected = self.rules[rule]
        verdict = Verdict(rule, title, status, expected, got)
        self.report.verdicts.append(verdict)
        if self.on_verdict is not None:
            self.on_verdict(verdict)

    def skip_rest(self, why: str) -> None:
        """SKIP every rule not yet judged."""
        done = {v.rule for v in self.report.verdicts}
        for rule in self.rules:
            if rule not in done:
                self.record(rule, "SKIP", why)

    def call(self, rule: str, method: str, plugin: Any, thunk: Callable[[], Any], *,
             may_skip: bool = False) -> tuple[bool, Any]:
        """Run ``thunk`` (a call of ``plugin.method``); on an exception record ``rule`` FAILed, naming where it
        raised. A :class:`Skip` passes through to the caller when the plugin ``may_skip`` (an attack), and is a
        failure otherwise; a :class:`Broken` is the rule's own FAIL."""
        try:
            return True, thunk()
        except Skip as skip:
            if may_skip:
                raise
            self.record(rule, "FAIL", f"{method}() raised Skip({skip.reason!r}); only an attack may skip a pair")
        except Broken as broken:
            self.record(rule, "FAIL", str(broken))
        except Exception as exc:  # noqa: BLE001 - whatever the plugin raises is the verdict, named
            self.record(rule, "FAIL", failure_message(self.report.kind, self.report.name, method, exc, plugin))
        return False, None

    def static_rules(self, registry: Registry[type], params: Mapping[str, Any]) -> Any:
        """``loads``, ``contract``, ``builds`` and ``parameters``; the built plugin, or None when it cannot be built."""
        name, kind = self.report.name, self.report.kind
        if name in registry.broken:
            self.record("loads", "FAIL", registry.broken[name])
            self.skip_rest("the plugin did not load")
            return None
        cls = registry.get(name)
        self.record("loads", "PASS", f"{cls.__module__}:{cls.__qualname__}")
        problem = plugin_problem(kind, cls)
        if problem:
            self.record("contract", "FAIL", problem)
            self.skip_rest("the class breaks the plugin contract")
            return None
        self.record("contract", "PASS")
        try:
            plugin = build(registry, name, params)
        except Exception as exc:  # noqa: BLE001 - a plugin that cannot be built is this rule's failure
            self.record("builds", "FAIL", f"{type(exc).__name__}: {exc}")
            self.skip_rest("the plugin could not be built")
            return None
        self.record("builds", "PASS")
        problems, note = parameter_problems(kind, cls, plugin)
        self.record("parameters", "FAIL" if problems else "PASS", "; ".join(problems) or note)
        return plugin


def check_plugin(kind: str, name: str, *, params: Mapping[str, Any] | None = None, defense: str | None = None,
                 ctx: RunContext | None = None, splits: Splits | None = None,
                 on_verdict: Callable[[Verdict], None] | None = None) -> ConformanceReport:
    """Check the installed ``kind`` (``"defense"`` / ``"attack"``) plugin ``name`` against every rule.

    Args:
        params: Parameter values to build it with, as ``--set`` gives them (on top of its smoke profile).
        defense: For an attack, the defense whose release it attacks (default: ``identity``, else the
            first defense that releases what the attack requires).
        ctx, splits: The run context and data (default: :func:`default_context`, :func:`default_splits`).
        on_verdict: Called with each verdict as soon as it is known (the command prints them as they come).

    Raises:
        UsageError: for a kind other than defense or attack, or an unknown (or unusable) ``defense``.
    """
    if kind not in ("defense", "attack"):
        raise UsageError(f"a plugin is a defense or an attack, not {kind!r}")
    load()
    registry = DEFENSES if kind == "defense" else ATTACKS
    origin = registry.entry(name).origin if name in registry else "could not be loaded"
    report = ConformanceReport(kind, name, origin)
    battery = _Battery(report, DEFENSE_RULES if kind == "defense" else ATTACK_RULES, on_verdict)
    plugin = battery.static_rules(registry, dict(params or {}))
    if plugin is None:
        return report
    ctx = ctx if ctx is not None else default_context()
    splits = splits if splits is not None else default_splits()
    if kind == "defense":
        _defense_rules(battery, plugin, dict(params or {}), ctx, splits)
    else:
        _attack_rules(battery, plugin, dict(params or {}), defense, ctx, splits)
    return report


def _defense_rules(battery: _Battery, defense: Any, params: dict[str, Any], ctx: RunContext,
                   splits: Splits) -> None:
    name, train, test = battery.report.name, splits.victim_train, splits.victim_test
    reason = missing_public_corpus(defense)
    if reason:
        battery.skip_rest(reason)
        return

    def fit(plugin: Any) -> Any:
        fitted = plugin.fit(train, ctx=ctx)
        if fitted is not plugin:
            raise Broken(f"fit() returned {type(fitted).__name__} {fitted!r:.60}, not the defense itself")
        return fitted

    if not battery.call("fit", "fit", defense, lambda: fit(defense))[0]:
        battery.skip_rest("fit() failed")
        return
    battery.record("fit", "PASS")

    def release(plugin: Any) -> Any:
        released = check_release(name, frozenset(plugin.exposes), plugin.release(test, ctx=ctx), test)
        if released.kinds != plugin.exposes:
            raise Broken(f"a Release of kinds {', '.join(sorted(released.kinds))}; it exposes "
                         f"{', '.join(sorted(plugin.exposes))}: a release holds every kind the defense declares")
        return released

    ok, first = battery.call("release", "release", defense, lambda: release(defense))
    if ok:
        battery.record("release", "PASS", f"{len(first.uids)} records, {', '.join(sorted(first.kinds))}")
        again = build(DEFENSES, name, params)
        ok, second = battery.call("deterministic", "release", again, lambda: release(fit(again)))
        if ok:
            difference = different_release(first, second)
            battery.record("deterministic", "FAIL" if difference else "PASS", difference or "")
    else:
        battery.record("deterministic", "SKIP", "release() failed")
    ok, utility = battery.call("utility", "utility", defense,
                               lambda: check_utility(name, defense.utility(test, ctx=ctx)))
    if ok:
        battery.record("utility", "PASS", ", ".join(f"{m} {e.value:.3f}" for m, e in utility.items())
                       or "no utility measured")


def _target_defense(attack: Any, chosen: str | None) -> str:
    """The defense the attack is checked against: ``chosen``, else the no-privacy reference (``identity``), else the
    first that fits."""
    if chosen is not None:
        if not DEFENSES.get(chosen).exposes & attack.requires:
            raise UsageError(f"defense {chosen!r} releases {', '.join(sorted(DEFENSES.get(chosen).exposes))}; the "
                             f"attack needs {' or '.join(sorted(attack.requires))}: choose another with --defense")
        return chosen
    reference = reference_defense()
    for candidate in [reference] + [n for n in DEFENSES.names() if n != reference]:
        if DEFENSES.get(candidate).exposes & attack.requires:
            return candidate
    raise UsageError(f"no installed defense releases {' or '.join(sorted(attack.requires))}, which the attack needs")


def _attack_rules(battery: _Battery, attack: Any, params: dict[str, Any], chosen: str | None, ctx: RunContext,
                  splits: Splits) -> None:
    name, test = battery.report.name, splits.victim_test
    target = _target_defense(attack, chosen)
    defense = build(DEFENSES, target, {})

    def victim_release() -> Any:
        defense.fit(splits.victim_train, ctx=ctx)
        return check_release(target, frozenset(defense.exposes), defense.release(test, ctx=ctx), test)

    ok, release = battery.call("defense", "release", defense, victim_release)
    if not ok:
        battery.skip_rest(f"defense {target!r} gave no release to attack")
        return
    battery.record("defense", "PASS", f"attacks {target}'s release of {len(test)} records")

    def fit(plugin: Any) -> Any:
        fitted = plugin.fit(splits.attacker, defense, ctx=ctx)
        if fitted is not plugin:
            raise Broken(f"fit() returned {type(fitted).__name__} {fitted!r:.60}, not the attack itself")
        return fitted

    def outcome(plugin: Any, truth: Any = test) -> Any:
        result = plugin.attack(release, truth, ctx=ctx)
        if not isinstance(result, AttackResult):
            check_attack_result(name, result)  # raises the runner's message: what came back instead
        return result

    try:
        if not battery.call("fit", "fit", attack, lambda: fit(attack), may_skip=True)[0]:
            battery.skip_rest("fit() failed")
            return
        battery.record("fit", "PASS")
        ok, result = battery.call("attack", "attack", attack, lambda: outcome(attack), may_skip=True)
    except Skip as skip:
        battery.skip_rest(f"the attack skipped this pair: {skip.reason}")
        return
    if not ok:
        battery.skip_rest("attack() failed")
        return
    battery.record("attack", "PASS")
    try:
        check_attack_result(name, result)
        battery.record("metrics", "PASS", f"empirical privacy {result.empirical_privacy.value:.3f}"
                       + (f"; {', '.join(result.metrics)}" if result.metrics else ""))
        metrics_kept = True
    except PluginError as exc:
        battery.record("metrics", "FAIL", str(exc))
        metrics_kept = False
    _repeat(battery, params, result, fit, outcome)
    try:
        ok, stripped = battery.call("skip", "attack", attack, lambda: outcome(attack, strip_private_facts(test)),
                                    may_skip=True)
        if ok:
            if metrics_kept:  # else the metrics rule has said what is wrong with them already
                check_attack_result(name, stripped)
            battery.record("skip", "PASS", "returned an AttackResult")
    except Skip as skip:
        battery.record("skip", "PASS", f"skipped: {skip.reason}")
    except PluginError as exc:
        battery.record("skip", "FAIL", str(exc))


def _repeat(battery: _Battery, params: dict[str, Any], first: AttackResult, fit: Callable[[Any], Any],
            outcome: Callable[[Any], Any]) -> None:
    """The ``deterministic`` rule: a second instance, fitted and run with the same seed, measures the same."""
    again = build(ATTACKS, battery.report.name, params)
    try:
        ok, second = battery.call("deterministic", "attack", again, lambda: outcome(fit(again)), may_skip=True)
    except Skip as skip:
        battery.record("deterministic", "FAIL", f"the second instance skipped ({skip.reason}); the first did not")
        return
    if ok:
        same = second.empirical_privacy == first.empirical_privacy
        battery.record("deterministic", "PASS" if same else "FAIL", "" if same else (
            f"empirical privacy {first.empirical_privacy} the first time, {second.empirical_privacy} the second"))


__all__ = ["ATTACK_RULES", "DEFENSE_RULES", "ConformanceReport", "SPLIT_SIZES", "Verdict", "check_plugin",
           "default_context", "default_splits", "format_verdict", "installed_plugins", "kinds_of"]
