"""Plugin parameters: typed parsing of ``key=value`` text, declared constraints, checked construction.

A plugin is a dataclass whose init fields are its hyperparameters. Each field declares, in its
annotation, how it is validated::

    eta: Annotated[float, Check(check_eta)] = 100.0      # a validator that names the parameter itself
    hidden: PositiveInt = 256                             # Annotated[int, Range(1)]
    unit: Literal["token", "word"] = "token"              # one of the listed values

Plugins that inherit :class:`CheckedParams` apply those declarations in ``__post_init__``, so a
plugin is checked once, when it is built, whether :func:`make_plugin` builds it from configuration
text or a user builds it in Python; the plugin's methods (and the engines it calls) then trust their
fields. :func:`make_plugin` converts each value to the field's annotated type first, and turns
unknown keys and bad values into :class:`~rapt_audit.api.errors.UsageError` messages that list the
valid keys. Nothing here ever calls ``eval``.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import math
import numbers
import re
import types
import typing
from typing import Annotated, Any, Callable, Mapping

from rapt_audit.api.constraints import (  # noqa: F401 - re-exported: plugins declare their rules from here
    Check, Dropout, Each, NonNegativeFloat, PositiveFloat, PositiveInt, Range)
from rapt_audit.api.errors import UnknownNameError, UsageError
from rapt_audit.api.parsing import parse_float, to_float
from rapt_audit.api.registry import Registry, unknown_name_message

_TRUE = {"true", "yes", "on", "1"}
_FALSE = {"false", "no", "off", "0"}
_NONE = {"none", "null"}


def parameter_fields(cls: type) -> list[dataclasses.Field]:
    """A plugin dataclass's parameters (public init fields), those of parameter groups last.

    Dataclasses list inherited fields first, so a defense that extends a parameter group (a base
    that sets the class attribute ``parameter_group``, such as the task classifier of DPNR and SnD)
    would show and record ``hidden`` before its privacy parameter. A field declared by a parameter
    group (and not redeclared below it) is moved after the others; the order is otherwise kept.
    """
    if not dataclasses.is_dataclass(cls):
        raise TypeError(f"plugin {cls!r} must be a dataclass")
    owner: dict[str, type] = {}
    for klass in cls.__mro__:
        for name in inspect.get_annotations(klass):
            owner.setdefault(name, klass)
    fields = [f for f in dataclasses.fields(cls) if f.init and not f.name.startswith("_")]
    return sorted(fields, key=lambda f: "parameter_group" in vars(owner.get(f.name, cls)))


def plugin_fields(cls: type) -> dict[str, Any]:
    """Parameter name → resolved type annotation of a plugin dataclass, in :func:`parameter_fields` order."""
    hints = typing.get_type_hints(cls)
    return {f.name: hints.get(f.name, Any) for f in parameter_fields(cls)}


def _describe_type(tp: Any) -> str:
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


def coerce(value: Any, tp: Any, *, key: str) -> Any:
    """Convert ``value`` (often a string from the command line) to the annotated type ``tp``.

    Supports ``int``, ``float`` (infinity only when spelled so: :func:`~rapt_audit.api.parsing.parse_float`),
    ``bool``, ``str``, ``X | None``, ``Literal[...]`` and ``tuple[X, ...]`` (from a comma-separated string or a list).

    Raises:
        UsageError: naming ``key``, the value and the expected type.
    """
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if tp is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        if value is None or (isinstance(value, str) and value.strip().lower() in _NONE):
            if type(None) in args:
                return None
        errors = []
        for option in (a for a in args if a is not type(None)):
            try:
                return coerce(value, option, key=key)
            except UsageError as exc:
                errors.append(str(exc))
        if len(errors) == 1:  # X | None: X's own message says what is expected
            raise UsageError(errors[0] + (" (or none, for the default)" if type(None) in args else ""))
        raise UsageError(f"{key}={value!r} is not a valid {_describe_type(tp)}")
    if origin is typing.Literal:
        for option in args:
            if value == option or (isinstance(value, str) and str(option) == value.strip()):
                return option
        raise UsageError(f"{key}={value!r} is not one of: {', '.join(map(str, args))}")
    if origin in (tuple, list):
        items = [v.strip() for v in value.split(",") if v.strip()] if isinstance(value, str) else list(value)
        inner = args[0] if args else Any
        return tuple(coerce(v, inner, key=key) for v in items)
    if tp is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
            return value.strip().lower() in _TRUE
        raise UsageError(f"{key}={value!r} is not a boolean (use true or false)")
    if tp is int:
        if isinstance(value, bool):
            raise UsageError(f"{key}={value!r} is not an integer")
        if isinstance(value, int):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, str):
            try:
                return int(value.strip())
            except ValueError:
                pass
        raise UsageError(f"{key}={value!r} is not an integer")
    if tp is float:
        if isinstance(value, bool):
            raise UsageError(f"{key}={value!r} is not a number")
        if isinstance(value, (int, float)):
            return to_float(value, key=key)
        if isinstance(value, str):
            return parse_float(value, key=key)
        raise UsageError(f"{key}={value!r} is not a number (use digits, or inf)")
    if tp is str:
        if isinstance(value, str):
            return value
        raise UsageError(f"{key}={value!r} is not a string")
    return value


# -- declared constraints: rapt_audit.api.constraints (re-exported here) ------------------------

@dataclasses.dataclass(frozen=True)
class _Declared:
    constraints: tuple[Callable[[str, Any], Any], ...]
    choices: tuple[Any, ...]  # the values of a Literal field, else empty
    optional: bool  # None is a valid value
    real: bool  # a float field: integers and numpy scalars are stored as Python floats


@functools.lru_cache(maxsize=None)
def declared_constraints(cls: type) -> dict[str, _Declared]:
    """Init field → its declared constraints (``Annotated`` metadata), Literal values, optionality, float type."""
    hints = typing.get_type_hints(cls, include_extras=True)
    out = {}
    for name in plugin_fields(cls):
        tp, constraints = hints.get(name, Any), ()
        if typing.get_origin(tp) is Annotated:
            tp, *meta = typing.get_args(tp)
            constraints = tuple(m for m in meta if callable(m))
        args = typing.get_args(tp)
        optional = typing.get_origin(tp) in (typing.Union, types.UnionType) and type(None) in args
        if optional:  # ``PositiveInt | None``: the constraints of the non-None member apply
            for arg in args:
                if typing.get_origin(arg) is Annotated:
                    constraints += tuple(m for m in typing.get_args(arg)[1:] if callable(m))
            args = tuple(typing.get_args(a)[0] if typing.get_origin(a) is Annotated else a for a in args)
        choices = args if typing.get_origin(tp) is typing.Literal else ()
        real = tp is float or (optional and set(args) == {float, type(None)})
        if constraints or choices or real:
            out[name] = _Declared(constraints, choices, optional, real)
    return out


def check_params(obj: Any) -> None:
    """Apply every declared constraint of the plugin ``obj`` to its fields (keeping converted values).

    Raises:
        UsageError: (or ``TypeError`` from a :class:`Check` validator) naming the parameter.
    """
    plugin = getattr(type(obj), "name", type(obj).__name__)
    for name, declared in declared_constraints(type(obj)).items():
        value = getattr(obj, name)
        if value is None and declared.optional:
            continue
        key = f"{plugin}.{name}"
        if declared.choices and value not in declared.choices:
            raise UsageError(f"{key}={value!r} is not one of: {', '.join(map(str, declared.choices))}")
        if declared.real and isinstance(value, numbers.Real) and not isinstance(value, (bool, float)):
            value = to_float(value, key=key)  # as coerce would: lr=1 is stored (and hashed into seeds) as 1.0
        for constraint in declared.constraints:
            value = constraint(key, value)
        object.__setattr__(obj, name, value)


class CheckedParams:
    """Base of plugin dataclasses: checks the declared parameters once, when the plugin is built.

    A subclass that needs a check across fields (``d_model`` a multiple of ``heads``) defines its own
    ``__post_init__`` and calls ``super().__post_init__()`` first.
    """

    def __post_init__(self) -> None:
        check_params(self)


#: Parameters that only some plugins take, with why the others do not (a clearer message than
#: "unknown parameter" for a user who asks, e.g., a representation defense to pretrain its encoder).
SCOPED_PARAMETERS: dict[str, str] = {}


def scoped_parameter(key: str, reason: str) -> None:
    """Declare that parameter ``key`` applies to some plugins only, and why it does not apply to the rest."""
    SCOPED_PARAMETERS[key] = reason


def make_plugin(registry: Registry[type], name: str, args: Mapping[str, Any] | None = None) -> Any:
    """Instantiate plugin ``name`` from ``registry`` with checked, typed ``args``.

    Each value is converted to its field's type (:func:`coerce`); building the plugin then applies
    its declared constraints (:class:`CheckedParams`), so every parameter is checked exactly once.

    Raises:
        UnknownNameError: for an unknown plugin or parameter name (with the valid ones).
        UsageError: for a value of the wrong type or one the plugin rejects.
    """
    cls = registry.get(name)
    fields = plugin_fields(cls)
    kwargs = {}
    for key, value in (args or {}).items():
        if key not in fields and key in SCOPED_PARAMETERS:
            raise UsageError(f"{registry.kind} {name!r} takes no {key!r}: {SCOPED_PARAMETERS[key]}")
        if key not in fields:
            raise UnknownNameError(unknown_name_message(f"parameter of {registry.kind} {name!r}", key, list(fields)))
        kwargs[key] = coerce(value, fields[key], key=f"{name}.{key}")
    try:
        return cls(**kwargs)
    except UsageError:
        raise
    except (TypeError, ValueError) as exc:
        raise UsageError(f"{registry.kind} {name!r}: {exc}") from exc


def canonical_params(registry: Registry[type], name: str, args: Mapping[str, Any], *,
                     profile: str) -> dict[str, Any] | None:
    """The parameters plugin ``name`` really runs with for ``args`` at ``profile``, or ``None`` where it does not build.

    Each value by value and declared type (``100``, ``1e2`` and ``"100.0"`` are one ``eta``), every default filled in,
    the profile's overrides under the explicit ``args`` as a run applies them: what makes two spellings one setting
    (a run's ``cell_id``, a benchmark grid's repeated values). ``None`` for an unknown plugin or a value it refuses:
    the run reports those itself, with its own message.
    """
    try:
        return get_params(make_plugin(registry, name, plugin_args(registry.get(name), profile, dict(args))))
    except (UsageError, TypeError, ValueError):
        return None


def plugin_args(cls: type, profile: str, explicit: Mapping[str, Any]) -> dict[str, Any]:
    """The arguments a plugin class is built with at ``profile``: its declared profile overrides
    (``profiles = {"smoke": {...}}``), then the user's explicit arguments."""
    return {**dict(getattr(cls, "profiles", {}).get(profile, {})), **explicit}


def parameter_table(cls: type) -> list[tuple[str, str, str, str]]:
    """Each parameter of a plugin class as text: ``(name, type, default, rules)``, for ``rapt-audit ls --params``.

    The rules are those :func:`check_params` applies: each :class:`Range` or :class:`Check` declared in
    the annotation, and the values of a ``Literal``; a parameter without a default says ``required``.
    """
    declared = declared_constraints(cls)
    rows = []
    for f in parameter_fields(cls):
        type_text = _type_text(plugin_fields(cls)[f.name])
        if f.default is not dataclasses.MISSING:
            default = repr(to_jsonable(f.default))
        elif f.default_factory is not dataclasses.MISSING:
            default = repr(to_jsonable(f.default_factory()))
        else:
            default = "required"
        constraints = declared[f.name].constraints if f.name in declared else ()
        rules = [("must " if isinstance(c, Range) else "") + c.describe() if hasattr(c, "describe")
                 else getattr(c, "__name__", repr(c)) for c in constraints]
        rows.append((f.name, type_text, default, _MARKUP.sub(r"\1", "; ".join(rules)).replace("``", "")))
    return rows


#: Sphinx roles in a validator's docstring (``:func:`~a.b.c```), shown as their last name in plain text.
_MARKUP = re.compile(r":\w+:`~?(?:[\w.]*\.)?(\w+)`")


def _type_text(tp: Any) -> str:
    """An annotation as a reader writes it: ``int | None``, ``tuple[float, ...]``."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        return " | ".join("None" if a is type(None) else _type_text(a) for a in typing.get_args(tp))
    if origin is typing.Literal:
        return "one of " + ", ".join(map(str, typing.get_args(tp)))
    return str(tp).replace("typing.", "") if origin is not None else _describe_type(tp)


def get_params(obj: Any) -> dict[str, Any]:
    """The parameter values of a plugin instance, as plain JSON-able values (:func:`parameter_fields` order)."""
    return {f.name: to_jsonable(getattr(obj, f.name)) for f in parameter_fields(type(obj))}


def to_jsonable(value: Any) -> Any:
    """Tuples to lists, infinities to the string ``"inf"`` (JSON has no infinity)."""
    if isinstance(value, float) and math.isinf(value):
        return "inf" if value > 0 else "-inf"
    if isinstance(value, (tuple, list)):
        return [to_jsonable(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    return value


#: A string annotation (``from __future__ import annotations``) naming ClassVar or InitVar.
_CLASS_LEVEL = re.compile(r"^\s*(?:[\w.]+\.)?(?:ClassVar|InitVar)\b")


def _class_level(annotation: Any) -> bool:
    """Whether ``annotation`` (an object, or a string under ``from __future__ import annotations``) is a
    ``ClassVar`` or ``InitVar``, which a dataclass does not make a field."""
    if isinstance(annotation, str):
        return bool(_CLASS_LEVEL.match(annotation))
    return (annotation is typing.ClassVar or typing.get_origin(annotation) is typing.ClassVar
            or annotation is dataclasses.InitVar or isinstance(annotation, dataclasses.InitVar))


def undecorated_parameters(cls: type) -> list[str]:
    """Parameters a class of the plugin annotates but that are not dataclass fields, each with why.

    A subclass of a dataclass (``TextDefense``, a plugin's own base) is a dataclass itself, so nothing
    fails when ``@dataclass`` is forgotten on it, but the fields it annotates are then plain class
    attributes: ``--set`` refuses them and results do not record them.
    """
    fields = {f.name for f in dataclasses.fields(cls)} if dataclasses.is_dataclass(cls) else set()
    found = []
    for klass in cls.__mro__:
        if "__dataclass_fields__" in vars(klass) or not dataclasses.is_dataclass(klass):
            continue  # decorated, or not part of the dataclass hierarchy (object, a mixin)
        names = [n for n, a in inspect.get_annotations(klass).items() if n not in fields and not _class_level(a)]
        if names:
            one, where = len(names) == 1, klass.__qualname__
            found.append(f"{', '.join(names)} {'is' if one else 'are'} annotated on {where} but "
                         f"{'is not a parameter' if one else 'are not parameters'}: {where} lacks the @dataclass "
                         f"decorator (a dataclass base is not enough), so --set {names[0]}=VALUE is refused and "
                         f"results do not record {'it' if one else 'them'}; put @dataclass on {where}")
    return found
