"""Plugin registries with did-you-mean errors, tags and the selection grammar.

One :class:`Registry` per plugin kind (defenses, attacks, datasets, metrics). Built-in plugins
register themselves with a decorator; third-party plugins are found through entry points
(``rapt_audit.defenses`` / ``rapt_audit.attacks``) by :mod:`rapt_audit.api.plugins`.

Selection grammar (fixed from day one, see :meth:`Registry.select`)::

    all            every plugin registered with default=True
    a,b            exactly these (runs them even when default=False)
    tag:x          every plugin tagged x
    -name, -tag:x  remove from the selection built so far
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Any, Callable, Generic, Iterator, TypeVar

from rapt_audit.api.errors import UnknownNameError, UsageError

T = TypeVar("T")


@dataclass(frozen=True)
class Entry(Generic[T]):
    """One registered plugin: its object plus the facts the CLI lists.

    ``origin`` is ``"<distribution> <version>"`` for a plugin installed by another package (an entry
    point), empty for a built-in one.
    """

    name: str
    obj: T
    tags: tuple[str, ...]
    default: bool
    origin: str = ""


def closest(name: str, candidates: list[str], n: int = 3) -> list[str]:
    """Return up to ``n`` candidates that look like ``name`` (for did-you-mean messages)."""
    return difflib.get_close_matches(name, candidates, n=n, cutoff=0.5)


def unknown_name_message(kind: str, name: str, valid: list[str]) -> str:
    """The standard 'unknown X' message: the bad name, the closest names, and all valid names."""
    near = closest(name, valid)
    hint = f" Did you mean {', '.join(repr(c) for c in near)}?" if near else ""
    return f"unknown {kind} {name!r}.{hint} Valid {kind} names: {', '.join(sorted(valid)) or '(none)'}."


class Registry(Generic[T]):
    """A name → plugin mapping for one plugin kind.

    The registration name is a plugin's one name: a registered class gets it as its ``name`` attribute
    (plugins do not write it themselves), so messages, seeds and results always use the name the
    user selects it by.

    Args:
        kind: Human name of the plugin kind, used in messages ("defense", "attack", ...).
        tags_of: Tags a plugin carries by what it declares, added to those it is registered with (attacks:
            ``adaptive`` from the threat model), so that ``tag:x`` cannot disagree with the declaration.
    """

    def __init__(self, kind: str, *, tags_of: Callable[[T], tuple[str, ...]] | None = None,
                 reserved: dict[str, str] | None = None) -> None:
        self.kind = kind
        self._tags_of = tags_of
        #: Names no plugin may take: name → what a result holds under it.
        self.reserved = dict(reserved or {})
        self._entries: dict[str, Entry[T]] = {}
        #: Installed plugins that could not be loaded: name → why (asked for by name, they say so).
        self.broken: dict[str, str] = {}

    def register(self, name: str, *, tags: tuple[str, ...] = (), default: bool = True) -> Callable[[T], T]:
        """Decorator that registers ``obj`` under ``name``.

        Args:
            name: The plugin's command-line name (snake_case).
            tags: Tags usable in ``tag:x`` selections.
            default: Whether ``all`` includes the plugin.
        """

        def decorator(obj: T) -> T:
            self.add(name, obj, tags=tags, default=default)
            return obj

        return decorator

    def add(self, name: str, obj: T, *, tags: tuple[str, ...] = (), default: bool = True, origin: str = "") -> None:
        """Register ``obj`` under ``name`` (non-decorator form of :meth:`register`; ``origin``: see :class:`Entry`).

        Raises:
            UsageError: when another object is already registered as ``name`` (registering the
                same object again is harmless), or ``name`` is reserved.
        """
        if name in self._entries and self._entries[name].obj is not obj:
            raise UsageError(f"{self.kind} {name!r} is registered twice; pick another name")
        if name in self.reserved:
            raise UsageError(f"{self.kind} name {name!r} is reserved ({self.reserved[name]}); pick another name")
        if isinstance(obj, type):
            obj.name = name  # type: ignore[attr-defined]  # the one name: set here, never written by the plugin
        derived = self._tags_of(obj) if self._tags_of is not None else ()
        self._entries[name] = Entry(name, obj, tuple(dict.fromkeys((*tags, *derived))), default, origin)

    def remove(self, name: str) -> None:
        """Unregister ``name`` (used by tests that register temporary plugins)."""
        self._entries.pop(name, None)
        self.broken.pop(name, None)

    def get(self, name: str) -> T:
        """Return the plugin registered as ``name``.

        Raises:
            UnknownNameError: with the closest valid names when ``name`` is unknown.
            UsageError: when ``name`` is installed but could not be loaded (with why).
        """
        try:
            return self._entries[name].obj
        except KeyError:
            if name in self.broken:
                raise UsageError(f"{self.kind} {name!r} is installed but could not be loaded: "
                                 f"{self.broken[name]}") from None
            raise UnknownNameError(unknown_name_message(self.kind, name, self.names())) from None

    def entry(self, name: str) -> Entry[T]:
        """The full :class:`Entry` of ``name`` (raises like :meth:`get`)."""
        self.get(name)
        return self._entries[name]

    def names(self) -> list[str]:
        """All registered names, sorted."""
        return sorted(self._entries)

    def entries(self) -> list[Entry[T]]:
        """All entries, sorted by name."""
        return [self._entries[n] for n in self.names()]

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self._entries)

    def select(self, spec: str) -> list[str]:
        """Resolve a selection spec into an ordered list of names.

        Terms are separated by commas and applied left to right: ``all`` adds every default
        plugin, ``tag:x`` adds every plugin tagged ``x``, a bare name adds that plugin, and a
        leading ``-`` removes what the term would add. A spec that starts with a removal starts
        from ``all`` (``-ner`` means "all but ner").

        Raises:
            UsageError: for an empty spec, an unknown tag, or an empty selection.
            UnknownNameError: for an unknown plugin name.
        """
        terms = [t.strip() for t in spec.split(",") if t.strip()]
        if not terms:
            raise UsageError(f"empty {self.kind} selection; use 'all', names like 'a,b', 'tag:x' or '-name'")
        chosen: list[str] = []
        if terms[0].startswith("-"):
            chosen = self._resolve_term("all")
        for term in terms:
            remove = term.startswith("-")
            names = self._resolve_term(term[1:] if remove else term)
            if remove:
                chosen = [n for n in chosen if n not in names]
            else:
                chosen += [n for n in names if n not in chosen]
        if not chosen:
            raise UsageError(f"the {self.kind} selection {spec!r} selects nothing")
        return chosen

    def _resolve_term(self, term: str) -> list[str]:
        if term == "all":
            return [e.name for e in self.entries() if e.default]
        if term.startswith("tag:"):
            tag = term[4:]
            names = [e.name for e in self.entries() if tag in e.tags]
            if not names:
                tags = sorted({t for e in self.entries() for t in e.tags})
                raise UsageError(f"no {self.kind} has tag {tag!r}; known tags: {', '.join(tags) or '(none)'}")
            return names
        self.get(term)
        return [term]


def describe(obj: Any) -> str:
    """A plugin's ``summary``, else the first line of its docstring (shown by ``rapt-audit ls``)."""
    doc = (getattr(obj, "summary", None) or getattr(obj, "__doc__", None) or "").strip()
    if isinstance(obj, type) and doc.startswith(f"{obj.__name__}("):
        return ""  # the signature @dataclass writes for a class without a docstring: not a description
    return doc.splitlines()[0] if doc else ""
