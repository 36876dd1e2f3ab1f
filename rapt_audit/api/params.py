"""Plugin parameters: typed parsing of ``key=value`` text and checked construction of plugins.

A plugin is a dataclass whose init fields are its hyperparameters. :func:`make_plugin` builds one
from a mapping of (possibly textual) values, converting each value to the field's annotated type
and turning unknown keys and bad values into :class:`~rapt_audit.api.errors.UsageError` messages that
list the valid keys. Nothing here ever calls ``eval``.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from typing import Any, Mapping

from rapt_audit.api.errors import UnknownNameError, UsageError
from rapt_audit.api.registry import Registry, unknown_name_message

_TRUE = {"true", "yes", "on", "1"}
_FALSE = {"false", "no", "off", "0"}
_NONE = {"none", "null"}


def plugin_fields(cls: type) -> dict[str, Any]:
    """Init-field name → resolved type annotation of a plugin dataclass."""
    if not dataclasses.is_dataclass(cls):
        raise TypeError(f"plugin {cls!r} must be a dataclass")
    hints = typing.get_type_hints(cls)
    return {f.name: hints.get(f.name, Any) for f in dataclasses.fields(cls) if f.init and not f.name.startswith("_")}


def _describe_type(tp: Any) -> str:
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


def coerce(value: Any, tp: Any, *, key: str) -> Any:
    """Convert ``value`` (often a string from the command line) to the annotated type ``tp``.

    Supports ``int``, ``float`` (``inf`` allowed), ``bool``, ``str``, ``X | None``, ``Literal[...]``
    and ``tuple[X, ...]`` (from a comma-separated string or a list).

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
            return float(value)
        if isinstance(value, str):
            text = value.strip().lower()
            if text in {"inf", "+inf", "infinity", "∞"}:
                return math.inf
            try:
                return float(text)
            except ValueError:
                pass
        raise UsageError(f"{key}={value!r} is not a number (use digits, or inf)")
    if tp is str:
        if isinstance(value, str):
            return value
        raise UsageError(f"{key}={value!r} is not a string")
    return value


def make_plugin(registry: Registry[type], name: str, args: Mapping[str, Any] | None = None) -> Any:
    """Instantiate plugin ``name`` from ``registry`` with checked, typed ``args``.

    Raises:
        UnknownNameError: for an unknown plugin or parameter name (with the valid ones).
        UsageError: for a value of the wrong type or one the plugin rejects.
    """
    cls = registry.get(name)
    fields = plugin_fields(cls)
    kwargs = {}
    for key, value in (args or {}).items():
        if key not in fields:
            raise UnknownNameError(unknown_name_message(f"parameter of {registry.kind} {name!r}", key, list(fields)))
        kwargs[key] = coerce(value, fields[key], key=f"{name}.{key}")
    try:
        return cls(**kwargs)
    except UsageError:
        raise
    except (TypeError, ValueError) as exc:
        raise UsageError(f"{registry.kind} {name!r}: {exc}") from exc


def get_params(obj: Any) -> dict[str, Any]:
    """The init-field values of a plugin instance, as plain JSON-able values."""
    out: dict[str, Any] = {}
    for field in dataclasses.fields(obj):
        if field.init and not field.name.startswith("_"):
            out[field.name] = to_jsonable(getattr(obj, field.name))
    return out


def to_jsonable(value: Any) -> Any:
    """Tuples to lists, infinities to the string ``"inf"`` (JSON has no infinity)."""
    if isinstance(value, float) and math.isinf(value):
        return "inf" if value > 0 else "-inf"
    if isinstance(value, (tuple, list)):
        return [to_jsonable(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    return value
