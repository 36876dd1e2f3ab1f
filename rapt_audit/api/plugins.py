"""Plugin discovery: the built-in defenses and attacks, then third-party entry points.

Third-party packages declare plugins in their ``pyproject.toml``::

    [project.entry-points."rapt_audit.defenses"]
    my_defense = "my_pkg.my_module:MyDefense"

The entry point's name becomes the registry name, and the class's ``name`` (a plugin does not write
its own). The class may carry ``tags`` (a tuple of strings, selected with ``--attacks tag:x``) and
``default`` (whether ``all`` includes it; true unless set) as class attributes, as the built-ins give
them to ``@ATTACKS.register``; an attack's ``threat_model``
(:class:`~rapt_audit.api.threat.ThreatModel`) adds the ``adaptive`` tag when it adapts. Loading happens
once per process; the distribution and version of each loaded plugin go into every result's ``env.versions``.

Listing needs no loading: :func:`installed` reads the entry points' metadata (name, module, distribution
and version) without importing a third-party plugin's module, so ``rapt-audit ls`` neither pays for a
heavy plugin nor warns about a broken one; ``ls --params`` and every run import them (:func:`load`).
The built-in plugins are always imported (:func:`load_builtins`): their modules import nothing heavy.

Nothing is imported that a command does not select (:func:`load_for`): a run of built-in plugins named
one by one imports no third-party module; ``all``, ``tag:x`` and removals import every plugin of the kind
(their tags and defaults live in the classes). A plugin that does not finish importing within
``RAPT_AUDIT_PLUGIN_TIMEOUT`` seconds (default 30) is left out like a broken one, naming it.

One broken third-party plugin never breaks the others: an entry point that fails to import, or whose
object is not a plugin (not a dataclass, no ``exposes`` / ``requires``, a method missing), is left
out with a :class:`PluginWarning` naming it and its error, and asked for by name it says why it is
missing. An entry point named like a plugin already registered (a built-in such as ``t2t``) is an
error naming both: one of the two would otherwise be silently ignored.
"""

from __future__ import annotations

import dataclasses
import importlib
import os
import threading
import warnings
from importlib.metadata import entry_points
from dataclasses import dataclass
from typing import Any, Iterable

from rapt_audit.api.capabilities import Capabilities, capabilities_problem, declared_capabilities
from rapt_audit.api.errors import UsageError
from rapt_audit.api.parsing import parse_seconds
from rapt_audit.api.params import plugin_fields, undecorated_parameters
from rapt_audit.api.registry import Registry
from rapt_audit.api.threat import declared_threat_model, threat_model_problem
from rapt_audit.api.types import RELEASE_KINDS


def _threat_tags(cls: Any) -> tuple[str, ...]:
    """The tags an attack's declared threat model gives it (``adaptive``)."""
    found = declared_threat_model(cls)
    return found.tags() if found is not None else ()


DEFENSES: Registry[type] = Registry("defense")
#: The name a result's worst case over its inversion attacks takes among its attacks
#: (:mod:`rapt_audit.scoring.worst_case`); reserved, so that no attack plugin can take it.
WORST_CASE = "worst_case"
ATTACKS: Registry[type] = Registry("attack", tags_of=_threat_tags,
                                   reserved={WORST_CASE: "a result's worst case over its inversion attacks"})

_GROUPS = {"rapt_audit.defenses": DEFENSES, "rapt_audit.attacks": ATTACKS}
#: What each kind of plugin must have: the class attribute naming its release kinds, its methods.
_CONTRACT = {"defense": ("exposes", ("fit", "utility", "release")), "attack": ("requires", ("fit", "attack"))}
_loaded = False
#: (group, name) → the entry point's value, for the entry points registered so far.
_registered: dict[tuple[str, str], str] = {}
#: Distribution name → version of every third-party plugin registered.
_distributions: dict[str, str] = {}
#: Seconds a third-party plugin's import may take before it is left out (``RAPT_AUDIT_PLUGIN_TIMEOUT``).
PLUGIN_TIMEOUT_ENV, DEFAULT_PLUGIN_TIMEOUT = "RAPT_AUDIT_PLUGIN_TIMEOUT", 30.0


class PluginWarning(UserWarning):
    """An installed plugin was left out (it failed to load, or is not a plugin); the message names it."""


@dataclass(frozen=True)
class Installed:
    """An installed third-party plugin as its entry point describes it, its module not imported.

    Attributes:
        name: The registry name (the entry point's name).
        kind: ``"defense"`` or ``"attack"``.
        value: Where the plugin lives, ``"module:attribute"``.
        origin: ``"<distribution> <version>"``, empty when the entry point names none.
    """

    name: str
    kind: str
    value: str
    origin: str = ""


def load_builtins() -> None:
    """Import (and so register) the built-in defenses and attacks; their modules import nothing heavy."""
    importlib.import_module("rapt_audit.defenses")
    importlib.import_module("rapt_audit.attacks")


def installed(kind: str) -> list[Installed]:
    """Third-party ``kind`` plugins (``"defense"`` / ``"attack"``) not loaded yet, read from their entry points'
    metadata alone: nothing is imported. Those loaded already are in the registry, broken ones in its ``broken``.

    Raises:
        UsageError: when an entry point is named like a plugin already registered (naming both).
    """
    load_builtins()
    group, registry = next((g, r) for g, r in _GROUPS.items() if r.kind == kind)
    found = []
    for ep in entry_points(group=group):
        if ep.name in registry.broken or (_registered.get((group, ep.name)) == ep.value and ep.name in registry):
            continue  # loaded (or left out) by an earlier load()
        if ep.name in registry:
            raise UsageError(_clash(ep, registry))
        dist, version = _distribution(ep)
        found.append(Installed(ep.name, kind, str(ep.value), f"{dist} {version}" if dist else ""))
    return sorted(found, key=lambda item: item.name)


def load() -> None:
    """Import the built-in plugin packages and every installed entry point (idempotent).

    Raises:
        UsageError: when an entry point is named like a plugin already registered (naming both), or
            ``RAPT_AUDIT_PLUGIN_TIMEOUT`` is not a positive number of seconds.
    """
    global _loaded
    if _loaded:
        return
    load_builtins()
    for group in _GROUPS:
        _load_group(group)
    _loaded = True


def load_for(kind: str, spec: str) -> None:
    """Import the third-party ``kind`` plugins (``"defense"`` / ``"attack"``) that the selection ``spec`` may
    select, and no others: none when it names built-ins only, those it names otherwise, and every one of the
    kind when it has ``all``, a ``tag:`` or a removal (tags and defaults are known only once imported).

    Raises:
        UsageError: as :func:`load`.
    """
    load_builtins()
    group, registry = next((g, r) for g, r in _GROUPS.items() if r.kind == kind)
    terms = [t.strip() for t in spec.split(",") if t.strip()]
    if any(t == "all" or t.startswith(("tag:", "-")) for t in terms):
        _load_group(group)
    else:
        _load_group(group, only={t for t in terms if t not in registry})


def load_named(defense: str, attacks: Iterable[str]) -> None:
    """Import the plugins a run or a result names (its defense and its attacks), and no other third-party
    one: what reading one result needs to know of its metrics (:func:`load_for` of each kind)."""
    load_for("defense", defense)
    load_for("attack", ",".join(a for a in attacks if a != WORST_CASE))


def _load_group(group: str, only: set[str] | None = None) -> None:
    """Register the entry points of ``group`` not handled yet (``only``: just those named so)."""
    registry, timeout = _GROUPS[group], _plugin_timeout()  # a bad setting is the user's error, not a plugin's
    for ep in entry_points(group=group):
        if ep.name in registry.broken or (_registered.get((group, ep.name)) == ep.value and ep.name in registry):
            continue  # registered (or left out) by an earlier call
        if ep.name in registry:
            raise UsageError(_clash(ep, registry))  # a clash is told from metadata, nothing imported
        if only is not None and ep.name not in only:
            continue
        try:
            obj = _import(ep, timeout)
        except TimeoutError as exc:
            _leave_out(ep, registry, str(exc))
            continue
        except Exception as exc:  # noqa: BLE001 - a broken third-party plugin must not break the others
            _leave_out(ep, registry, f"failed to load: {type(exc).__name__}: {exc}")
            continue
        problem = plugin_problem(registry.kind, obj)
        if problem:
            _leave_out(ep, registry, f"is not a rapt-audit {registry.kind}: {problem}")
            continue
        dist, version = _distribution(ep)
        tags = getattr(obj, "tags", ())
        registry.add(ep.name, obj, tags=(tags,) if isinstance(tags, str) else tuple(tags),
                     default=bool(getattr(obj, "default", True)), origin=f"{dist} {version}" if dist else "")
        _registered[(group, ep.name)] = ep.value
        if dist:
            _distributions[dist] = version


def _plugin_timeout() -> float:
    """``RAPT_AUDIT_PLUGIN_TIMEOUT`` in seconds (default 30).

    Raises:
        UsageError: when it is not a positive number.
    """
    text = os.environ.get(PLUGIN_TIMEOUT_ENV, "").strip()
    if not text:
        return DEFAULT_PLUGIN_TIMEOUT
    return parse_seconds(text, key=PLUGIN_TIMEOUT_ENV, fix=f"unset it for the default, {DEFAULT_PLUGIN_TIMEOUT:g} s")


def _import(ep: Any, timeout: float) -> Any:
    """``ep.load()``, waiting at most ``timeout`` seconds for it.

    Python cannot cancel an import, so the import runs in a daemon thread and, past the limit, is abandoned
    rather than stopped: it may finish in the background (its object is then never registered: only this
    function registers) and ends with the process. The one honest promise is that no command waits on it.

    Raises:
        TimeoutError: past the limit, with the message the warning gives; else what the import raised.
    """
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["obj"] = ep.load()
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting thread, which judges it
            box["error"] = exc

    thread = threading.Thread(target=target, name=f"rapt-audit import {ep.name}", daemon=True)
    thread.start()
    thread.join(None if timeout == float("inf") else timeout)
    if thread.is_alive():
        dist, _ = _distribution(ep)
        raise TimeoutError(
            f"did not finish importing in {timeout:g} s (its import goes on in the background and cannot be "
            f"stopped); set {PLUGIN_TIMEOUT_ENV}=SECONDS to wait longer, or uninstall "
            f"{dist or 'the package that declares it'} if it hangs")
    if "error" in box:
        raise box["error"]
    return box["obj"]


def plugin_problem(kind: str, obj: Any) -> str | None:
    """Why ``obj`` cannot be registered as a ``kind`` (``"defense"`` / ``"attack"``), or ``None`` when it can."""
    attribute, methods = _CONTRACT[kind]
    name = getattr(obj, "__qualname__", repr(obj))
    if not isinstance(obj, type):
        return f"the entry point names a {type(obj).__name__}, not a class"
    if not dataclasses.is_dataclass(obj):
        return (f"{name} is not a dataclass: a plugin's parameters are its dataclass fields (decorate it with "
                "@dataclass and subclass rapt_audit.plugin.CheckedParams to have them checked)")
    undecorated = undecorated_parameters(obj)
    if undecorated:
        return undecorated[0]
    kinds = getattr(obj, attribute, None)
    # A defense may expose nothing (a local-only baseline, issue #38); an attack must read something.
    if not isinstance(kinds, (set, frozenset)) or (not kinds and kind == "attack") or not kinds <= RELEASE_KINDS:
        return (f"{name}.{attribute} must be a {'non-empty ' if kind == 'attack' else ''}frozenset of release kinds "
                f"({', '.join(sorted(RELEASE_KINDS))}), got {kinds!r}")
    missing = [m for m in methods if not callable(getattr(obj, m, None))]
    if missing:
        return f"{name} has no {', '.join(m + '()' for m in missing)} (a {kind} needs {', '.join(methods)})"
    tags = getattr(obj, "tags", ())
    if not isinstance(tags, str) and not (isinstance(tags, (tuple, list, set, frozenset))
                                          and all(isinstance(t, str) for t in tags)):
        return f"{name}.tags must be a tuple of strings, got {tags!r}"
    if kind == "attack" and (problem := threat_model_problem(obj)):
        return f"{name}.{problem}"
    if kind == "defense" and (problem := capabilities_problem(obj)):
        return f"{name}.{problem}"
    try:
        plugin_fields(obj)
    except Exception as exc:  # noqa: BLE001 - any annotation error makes the parameters unusable
        return f"the parameter annotations of {name} cannot be resolved: {type(exc).__name__}: {exc}"
    return None


def capabilities_of(defense: str) -> Capabilities:
    """What the defense registered as ``defense`` declares it can do (:mod:`~rapt_audit.api.capabilities`); the
    defaults for a name no registered defense has (a result of a plugin not installed here)."""
    load_builtins()
    return declared_capabilities(DEFENSES.get(defense) if defense in DEFENSES else None)


def reference_defense() -> str:
    """The name of the no-privacy reference: the one registered defense whose capabilities say ``reference``.

    Raises:
        UsageError: when none or several do (the message names them and the fix).
    """
    load_builtins()
    found = [name for name in DEFENSES.names() if declared_capabilities(DEFENSES.get(name)).reference]
    if len(found) != 1:
        raise UsageError(f"{len(found)} registered defenses declare themselves the no-privacy reference "
                         f"(Capabilities(reference=True)){': ' + ', '.join(found) if found else ''}; exactly one "
                         "may: remove the declaration from the plugins that are not the reference")
    return found[0]


def plugin_distributions() -> dict[str, str]:
    """Distribution name → version of every third-party plugin loaded so far (for a result's provenance)."""
    return dict(_distributions)


def origins(registry: Registry[type], names: Iterable[str]) -> dict[str, str]:
    """Distribution → version of the third-party plugins among ``names`` (built-ins have none).

    A result's comparability signature names those of its *attacks* (an attack's version changes every row's
    numbers), never the defense's: a plugin defense's rows join the built-ins' table (issue #42), its
    version recorded with the row (``defense.origin``) and in ``env.versions``.
    """
    found = {}
    for name in names:
        origin = registry.entry(name).origin
        if origin:
            dist, _, version = origin.rpartition(" ")
            found[dist or origin] = version
    return found


def _distribution(ep: Any) -> tuple[str, str]:
    """The ``(name, version)`` of the distribution that declares ``ep`` (empty when it cannot be told)."""
    dist = getattr(ep, "dist", None)
    if dist is None:
        return "", ""
    return str(getattr(dist, "name", "") or dist.metadata["Name"]), str(dist.version)


def _describe_entry_point(ep: Any) -> str:
    dist, version = _distribution(ep)
    return f"entry point {ep.name!r} = {ep.value!r}" + (f" of {dist} {version}" if dist else "")


def _leave_out(ep: Any, registry: Registry[type], why: str) -> None:
    """Leave a broken entry point out with a warning; asked for by name, the registry says why."""
    message = f"{registry.kind} plugin {_describe_entry_point(ep)} {why}"
    registry.broken[ep.name] = message
    warnings.warn(f"{message}; it is left out, the other plugins work", PluginWarning, stacklevel=3)


def _clash(ep: Any, registry: Registry[type]) -> str:
    """The error for an entry point named like a plugin already registered: both named, and the fix."""
    entry = registry.entry(ep.name)
    obj = entry.obj
    where = f"{obj.__module__}:{obj.__qualname__}" if isinstance(obj, type) else repr(obj)
    existing = f"from {entry.origin}" if entry.origin else "built in"
    dist, _ = _distribution(ep)
    return (f"{_describe_entry_point(ep)} (group rapt_audit.{registry.kind}s) clashes with the {registry.kind} "
            f"{ep.name!r} already registered ({where}, {existing}); rename the entry point"
            + (f" in {dist}'s pyproject.toml" if dist else "") + " so that both can be used")


__all__ = ["ATTACKS", "DEFENSES", "WORST_CASE", "Installed", "PluginWarning", "capabilities_of", "installed", "load",
           "load_builtins", "load_for", "origins", "plugin_distributions", "plugin_problem", "reference_defense"]
