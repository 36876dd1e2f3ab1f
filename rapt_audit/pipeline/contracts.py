"""What the runner checks of a plugin's answers, and how it names a plugin that fails.

A plugin runs inside the audit, so its mistakes would otherwise surface deep in the code that uses
its answer (``too many values to unpack``, ``'float' object is not subscriptable``). The runner
checks each answer where it comes back (:func:`check_release`, :func:`check_utility`,
:func:`check_attack_result`) and turns a plugin's exception into a message that names the plugin,
the method and where it raised (:func:`failure_message`). A failing attack becomes an
:class:`~rapt_audit.api.types.AttackFailure` in the result and the run goes on; a failing defense
stops the run with a :class:`~rapt_audit.api.errors.PluginError` (there is nothing left to attack).
"""

from __future__ import annotations

import sys
import traceback
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Sequence

from rapt_audit.api.errors import PluginError, RaptAuditError
from rapt_audit.api.types import AttackFailure, AttackResult, Estimate, Record, Release
from rapt_audit.scoring.metrics import declared, headline_metric, range_problem


def _got(value: Any) -> str:
    """What came back, for a message: its type and a short repr."""
    text = repr(value)
    return f"{type(value).__name__} {text[:80] + '…' if len(text) > 80 else text}"


def where_raised(exc: BaseException, plugin: Any) -> str:
    """``file.py:12 in fit``: the innermost frame of the traceback inside the plugin's own package
    (else the innermost frame), so a message points at the plugin's code rather than numpy's."""
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return ""
    module = sys.modules.get(type(plugin).__module__)
    home = Path(module.__file__).resolve().parent if module is not None and getattr(module, "__file__", None) else None
    inside = [f for f in frames if home is not None and Path(f.filename).resolve().is_relative_to(home)]
    frame = (inside or frames)[-1]
    return f"{frame.filename}:{frame.lineno} in {frame.name}"


def failure_message(kind: str, name: str, method: str, exc: BaseException, plugin: Any) -> str:
    """``attack 'x' raised ValueError in attack(): boom (at x.py:12 in attack)``; a broken contract
    (:class:`~rapt_audit.api.errors.PluginError`) is given as it is."""
    if isinstance(exc, PluginError):
        return str(exc)
    at = where_raised(exc, plugin)
    return f"{kind} {name!r} raised {type(exc).__name__} in {method}(): {exc}" + (f" (at {at})" if at else "")


def attack_failure(name: str, method: str, exc: BaseException, plugin: Any) -> AttackFailure:
    """The outcome recorded for an attack that raised ``exc`` in ``method`` or broke its contract."""
    return AttackFailure(failure_message("attack", name, method, exc, plugin))


@contextmanager
def defense_call(name: str, method: str, plugin: Any) -> Iterator[None]:
    """Run a defense's ``method`` inside: its exception becomes a :class:`PluginError` naming it.

    Errors of rapt-audit's own kinds (a :class:`~rapt_audit.api.errors.DataError` about missing data, a
    broken contract found here) pass unchanged: their messages already say what is wrong.
    """
    try:
        yield
    except RaptAuditError:
        raise
    except Exception as exc:  # noqa: BLE001 - whatever a plugin raises, the user reads which plugin it was
        raise PluginError(failure_message("defense", name, method, exc, plugin)
                          + "; without a release there is nothing to attack, so the run stops") from exc


def _broken(kind: str, name: str, method: str, expected: str, got: str) -> PluginError:
    return PluginError(f"{kind} {name!r} broke its contract: {method}() must return {expected}; it returned {got}")


def check_release(name: str, exposes: frozenset[str], release: Any, records: Sequence[Record]) -> Release:
    """``release`` when it is one a defense may give for ``records``.

    Raises:
        PluginError: naming the defense, what ``release()`` must return and what it returned.
    """
    if not isinstance(release, Release):
        raise _broken("defense", name, "release", "a rapt_audit Release", _got(release))
    kinds = release.kinds
    # Empty only for a defense that exposes nothing (a local-only baseline, issue #38): it releases nothing.
    if (exposes and not kinds) or not kinds <= exposes:
        raise _broken("defense", name, "release", f"a Release of the kinds it exposes ({', '.join(sorted(exposes))})",
                      f"one of kinds {', '.join(sorted(kinds)) or 'none'}")
    uids = tuple(r.uid for r in records)
    if release.uids != uids:
        raise _broken("defense", name, "release", f"one released unit per input record, in order ({len(uids)} uids)",
                      f"{len(release.uids)} uids" + (" in another order" if len(release.uids) == len(uids) else ""))
    if release.texts is not None:
        bad = next((t for t in release.texts if not isinstance(t, str)), None)
        if bad is not None:
            raise _broken("defense", name, "release", "texts that are strings", f"a text of type {_got(bad)}")
    return release


def checked_release(name: str, defense: Any) -> Callable[[Sequence[Record], Any], Release]:
    """How the release cache makes a release it lacks: the defense's ``release``, an exception of it named
    as the defense's (:func:`defense_call`), the result checked (:func:`check_release`) before the cache
    stores it or anything reads it — for the victim's release and for the releases attacks ask for alike.
    An error of the cache itself (reading or writing the store) is not the defense's and is not renamed.
    """
    def compute(records: Sequence[Record], ctx: Any) -> Release:
        with defense_call(name, "release", defense):
            release = defense.release(records, ctx=ctx)
        return check_release(name, frozenset(defense.exposes), release, records)

    return compute


def check_utility(name: str, utility: Any) -> dict[str, Estimate]:
    """``utility`` as a dict when it maps declared utility metrics to estimates within their range.

    Raises:
        PluginError: naming the defense, the rule and what came back.
    """
    if not isinstance(utility, Mapping):
        raise _broken("defense", name, "utility", "a mapping of metric name → Estimate", _got(utility))
    for metric, est in utility.items():
        _check_measure("defense", name, "utility", str(metric), est, metric_kind="utility")
    return dict(utility)


def unreadable_release(requires: frozenset[str], kinds: frozenset[str], defense: str) -> str | None:
    """Why an attack that reads ``requires`` cannot attack a release of ``kinds`` from ``defense`` (the
    skip reason results record), or ``None`` when it can. A release of no kind is a local-only baseline's."""
    if requires & kinds:
        return None
    if not kinds:
        return (f"does not apply: defense {defense} releases nothing (a local-only baseline: the text never "
                "leaves the client, so there is nothing to attack)")
    return (f"needs a release of kind {' or '.join(sorted(requires))}; defense {defense} releases "
            f"{', '.join(sorted(kinds))}")


def check_attack_result(name: str, outcome: Any) -> AttackResult:
    """``outcome`` when it is an :class:`AttackResult` whose numbers keep their metrics' declarations.

    The headline must lie in [0, 1] (1 − attack success) unless the attack also reports it under a
    privacy metric of its own declared unbounded (:func:`~rapt_audit.scoring.metrics.headline_metric`).

    Raises:
        PluginError: naming the attack, the rule and what came back.
    """
    if not isinstance(outcome, AttackResult):
        raise _broken("attack", name, "attack", "an AttackResult (raise Skip(reason) when the pair cannot run)",
                      _got(outcome))
    if not isinstance(outcome.metrics, Mapping):
        raise _broken("attack", name, "attack", "an AttackResult whose metrics map names to Estimates",
                      f"metrics of {_got(outcome.metrics)}")
    for metric, est in outcome.metrics.items():
        _check_measure("attack", name, "attack", str(metric), est)
    if not isinstance(outcome.empirical_privacy, Estimate):
        raise _broken("attack", name, "attack", "an AttackResult whose empirical_privacy is an Estimate",
                      _got(outcome.empirical_privacy))
    headline = headline_metric(outcome.metrics, outcome.empirical_privacy)
    problem = range_problem(headline, outcome.empirical_privacy)
    if problem:
        hint = ("; an attack whose headline is not 1 − attack success reports it also under a privacy metric "
                "of its own, declared with bounded=False (as ae_inversion's reconstruction_mse)"
                if headline == "empirical_privacy" else "")
        raise PluginError(f"attack {name!r} broke its contract in attack(): {problem}{hint}")
    return outcome


def _check_measure(kind: str, name: str, method: str, metric: str, est: Any, *,
                   metric_kind: str | None = None) -> None:
    """Raise :class:`PluginError` unless ``est`` is an Estimate of a declared ``metric`` (of ``metric_kind``,
    when given) within its range."""
    if not isinstance(est, Estimate):
        raise _broken(kind, name, method, f"an Estimate for {metric!r}", _got(est))
    problem = range_problem(metric, est)
    found = declared(metric)
    if problem is None and metric_kind is not None and found is not None and found.kind != metric_kind:
        problem = f"{metric!r} is declared as a {found.kind} metric, not a {metric_kind} metric"
    if problem:
        raise PluginError(f"{kind} {name!r} broke its contract in {method}(): {problem}")


__all__ = ["attack_failure", "check_attack_result", "check_release", "check_utility", "checked_release",
           "defense_call", "failure_message", "unreadable_release", "where_raised"]
