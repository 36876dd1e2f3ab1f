"""The code each stage of a cell can execute, as one digest per component, derived from the imports (issue #62).

A cell's numbers come from stages: the core (the runner, the data and its splits, the encoder, the release
cache, the worst case: everything :data:`CORE_MODULE` imports), the defense (its fit, utility — the service's
customization and scoring — and release: the defense's module, its base classes and the mechanism code they
import) and each attack (its fit and score). Each component's digest hashes the source files it can execute,
found by following ``import`` statements from its module through rapt-audit's own code (and a third-party
plugin's own package), never declared by hand: a helper shared by two attacks moves both, and nothing else.

Rules of the walk, and why:

* every ``import`` in a module counts, at any depth (a lazy import inside a function runs too);
* importing ``a.b.c`` runs ``a/__init__.py`` and ``a/b/__init__.py``; a package ``__init__`` that only
  re-exports (a docstring, imports, ``__all__``: a *facade*) cannot change a number by itself, so it is not
  hashed and only the names taken from it are followed (``from rapt_audit.data import make_splits`` follows
  ``make_splits`` to ``data/base.py``, not every loader the package re-exports); an ``__init__`` that runs
  other code is hashed and all its imports are followed;
* files enter the hash by their path inside their root (``rapt_audit/…``, ``attacks/…``, ``defenses/…``), so
  a checkout and an installation (where ``attacks/`` lives inside ``rapt_audit/``) hash alike.

Dynamic imports (``importlib.import_module``) are not seen: the project uses them only to load the plugin
registries, whose members are components of their own.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import importlib.util
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

from rapt_audit.api.files import package_code_digest
from rapt_audit.api.plugins import ATTACKS, DEFENSES

#: The module whose imports are the core: what every stage of every cell runs through.
CORE_MODULE = "rapt_audit.pipeline.runner"
#: Packages installed inside ``rapt_audit`` but kept beside it in a checkout, hashed under their own names.
_BESIDE = ("rapt_audit.attacks", "rapt_audit.defenses")
#: How many hex digits of a component's digest a result records.
DIGEST_LENGTH = 16


@functools.lru_cache(maxsize=None)
def _package_dir(package: str) -> Path | None:
    """The folder of package ``package`` (None: not a package here). Only top-level packages and the two
    plugin packages are looked up through the import system; the rest is walked as folders."""
    if "." not in package or package in _BESIDE:
        try:
            spec = importlib.util.find_spec(package)
        except (ImportError, ValueError):
            return None
        if spec is None or not spec.submodule_search_locations:
            return None
        return Path(list(spec.submodule_search_locations)[0]).resolve()
    parent, _, leaf = package.rpartition(".")
    base = _package_dir(parent)
    if base is None or not (base / leaf / "__init__.py").is_file():
        return None
    return base / leaf


@functools.lru_cache(maxsize=None)
def _locate(module: str) -> Path | None:
    """The source file of ``module`` (a package's ``__init__.py``), or None when it is not a source file here."""
    package = _package_dir(module)
    if package is not None:
        init = package / "__init__.py"
        return init if init.is_file() else None
    if "." not in module:
        try:
            spec = importlib.util.find_spec(module)
        except (ImportError, ValueError):
            return None
        origin = getattr(spec, "origin", None) if spec is not None else None
        return Path(origin).resolve() if origin and origin.endswith(".py") else None
    parent, _, leaf = module.rpartition(".")
    base = _package_dir(parent)
    if base is None:
        return None
    path = base / f"{leaf}.py"
    return path if path.is_file() else None


@functools.lru_cache(maxsize=None)
def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_bytes(), filename=str(path))


def _is_facade(tree: ast.Module) -> bool:
    """Whether a package ``__init__`` only documents and re-exports (see the module's rules)."""
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            continue
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) \
            else None
        if targets and all(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
            continue
        return False
    return True


def _absolute(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    """The absolute module a ``from … import`` names (relative imports resolved against ``module``)."""
    if not node.level:
        return node.module or ""
    parts = module.split(".") if is_package else module.split(".")[:-1]
    base = parts[:len(parts) - node.level + 1] if node.level > 1 else parts
    return ".".join([*base, *([node.module] if node.module else [])])


class _Walk:
    """One component's closure: module name → source file, with the roots its files are labelled by."""

    def __init__(self, roots: Mapping[Path, str]) -> None:
        # Longest first, so that rapt_audit/attacks (installed layout) is labelled "attacks/…", not "rapt_audit/…".
        self.roots = dict(sorted(roots.items(), key=lambda item: -len(item[0].parts)))
        self.files: dict[str, Path] = {}
        self.done: set[tuple[str, str | None]] = set()

    def label(self, path: Path) -> str | None:
        for root, name in self.roots.items():
            if path.is_relative_to(root):
                return f"{name}/{path.relative_to(root).as_posix()}"
        return None

    def module(self, name: str) -> None:
        """Everything importing module ``name`` runs: its parents' ``__init__`` files, then the module."""
        parts = name.split(".")
        for depth in range(1, len(parts)):
            self._package_init(".".join(parts[:depth]), names=())
        self._whole(name)

    def _whole(self, name: str) -> None:
        path = _locate(name)
        if path is None or self.label(path) is None or (name, None) in self.done:
            return
        self.done.add((name, None))
        if path.name == "__init__.py" and _is_facade(_tree(path)):
            self._follow(name, path, only=None)  # ``import pkg`` or ``from pkg import *``: all it binds
            return
        self.files[self.label(path)] = path
        self._follow(name, path, only=None)

    def _package_init(self, package: str, names: Iterable[str]) -> None:
        """A package's ``__init__`` as ``from package import names`` runs it (``names`` empty: as a parent)."""
        path = _locate(package)
        if path is None or self.label(path) is None or path.name != "__init__.py":
            return
        if not _is_facade(_tree(path)):
            self._whole(package)
            return
        for name in names:
            if (package, name) not in self.done:
                self.done.add((package, name))
                self._follow(package, path, only=name)

    def _follow(self, name: str, path: Path, *, only: str | None) -> None:
        """The imports of module ``name`` (file ``path``); ``only``: just those binding that name (a facade)."""
        is_package = path.name == "__init__.py"
        tree = _tree(path)
        nodes = ast.walk(tree) if only is None else tree.body
        for node in nodes:
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if only is None or (alias.asname or alias.name.split(".")[0]) == only:
                        self.module(alias.name)
            elif isinstance(node, ast.ImportFrom) and node.module != "__future__":
                source = _absolute(node, name, is_package)
                wanted = [a.name for a in node.names if only is None or (a.asname or a.name) in (only, "*")]
                if wanted:
                    self.names(source, wanted)

    def names(self, source: str, wanted: list[str]) -> None:
        """``from source import wanted``: a submodule is taken whole, a name from where it is bound."""
        parts = source.split(".")
        for depth in range(1, len(parts)):
            self._package_init(".".join(parts[:depth]), names=())
        if _package_dir(source) is None:
            self._whole(source)
            return
        rest = []
        for name in wanted:
            if name != "*" and _locate(f"{source}.{name}") is not None:
                self.module(f"{source}.{name}")
            else:
                rest.append(name)
        if "*" in rest:
            self._whole(source)
        elif rest:
            self._package_init(source, names=rest)


def _own_roots() -> dict[Path, str]:
    """rapt-audit's own source folders and the names their files are hashed under."""
    roots = {}
    for package, name in (("rapt_audit", "rapt_audit"), *((p, p.rpartition(".")[2]) for p in _BESIDE)):
        folder = _package_dir(package)
        if folder is not None:
            roots[folder] = name
    return roots


@functools.lru_cache(maxsize=None)
def module_files(*modules: str) -> dict[str, Path]:
    """The source files that importing ``modules`` can run, by label: rapt-audit's own and, for a module of
    another distribution (a third-party plugin), its own top-level package's."""
    roots = _own_roots()
    for module in modules:
        top = module.split(".")[0]
        folder = _package_dir(top)
        if folder is not None and top != "rapt_audit":
            roots.setdefault(folder, top)
        elif folder is None and (single := _locate(top)) is not None:
            roots.setdefault(single.parent, single.parent.name)  # a plugin that is one module
    walk = _Walk(roots)
    for module in modules:
        walk.module(module)
    return dict(sorted(walk.files.items()))


def digest_files(files: Mapping[str, Path], *, version: str = "") -> str:
    """The digest of source files (label → path) and, for a third-party plugin, its ``version``."""
    digest = hashlib.sha256(version.encode("utf-8"))
    for label, path in sorted(files.items()):
        digest.update(f"\n{label}\n".encode("utf-8") + path.read_bytes())
    return digest.hexdigest()[:DIGEST_LENGTH]


def class_modules(cls: type) -> tuple[str, ...]:
    """The modules a plugin class's code lives in: its own and its base classes' (a subclass of a built-in
    runs the built-in's methods)."""
    return tuple(dict.fromkeys(c.__module__ for c in cls.__mro__ if c.__module__ not in ("builtins", "typing",
                                                                                       "abc")))


@functools.lru_cache(maxsize=None)  # the code does not change under a running process
def core_digest() -> str:
    """The core's digest: what :data:`CORE_MODULE` imports."""
    return digest_files(module_files(CORE_MODULE))


def release_code(defense_type: type) -> str:
    """The digest of the code a ``defense_type`` defense's cached work can run (its releases, privatized texts and
    calibrated η): the core's and the defense's own component digests. An edit to one defense's file, or to an
    attack, keeps every other defense's cache entries."""
    text = f"core={core_digest()}\ndefense={plugin_digest(defense_type)}"
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@functools.lru_cache(maxsize=None)
def plugin_digest(cls: type, origin: str = "") -> str:
    """A defense's or attack's digest: the code its class and base classes import; ``origin``
    (``"dist version"`` of a third-party plugin, empty for a built-in) joins it."""
    return digest_files(module_files(*class_modules(cls)), version=origin)


#: The component name of a result signed before issue #62: one digest of the whole package.
ALL = "all"


@dataclass(frozen=True)
class CellCode:
    """The digests of one cell's components: the core, its defense and each of its attacks.

    A cell signed before per-component digests holds one digest of the whole package (``legacy``, the
    signature's ``code:``): it is then one component, :data:`ALL`, and all of it is stale as soon as the
    package's digest (:func:`rapt_audit.api.files.package_code_digest`) moves. The code *here* carries that
    package digest too (``package``), to compare such cells with.
    """

    core: str = ""
    defense: str = ""
    attacks: Mapping[str, str] = field(default_factory=dict)
    legacy: str = ""
    package: str = ""

    def to_dict(self) -> dict[str, Any]:
        """The form a result records (``env.code``)."""
        return {"core": self.core, "defense": self.defense, "attacks": dict(sorted(self.attacks.items()))}

    @classmethod
    def stored(cls, signature_code: str, env: Mapping[str, Any]) -> "CellCode":
        """A stored result's code: its ``env.code`` or, signed before issue #62, its signature's ``code:``."""
        doc = env.get("code")
        if not isinstance(doc, Mapping):
            return cls(legacy=signature_code)
        return cls(core=str(doc.get("core", "")), defense=str(doc.get("defense", "")),
                   attacks={str(k): str(v) for k, v in dict(doc.get("attacks", {})).items()})

    def shared(self) -> str:
        """The digest every row of one table shares, the signature's ``code:`` (8 hex digits): the core and
        the attacks, which are the table's columns; the defense, one per row, is not in it. A legacy
        cell's is its one digest."""
        if self.legacy:
            return self.legacy[:8]
        text = "\n".join([self.core, *(f"{n}={d}" for n, d in sorted(self.attacks.items()))])
        return hashlib.sha256(text.encode("utf-8")).hexdigest()[:8]

    def stale(self, here: "CellCode") -> "Staleness":
        """Which stages of this stored cell the code ``here`` would compute differently.

        The core is under every stage; the defense under its utility, its release and so every attack on
        it; an attack only under itself. An attack ``here`` runs that the cell lacks is stale too.
        """
        if self.legacy:
            # Its one digest is the package's here, or (a result that records no env.code, written by hand or by
            # a tool of ours that keeps only the signature) the table's code here: nothing of it can differ.
            same = self.legacy[:8] in (here.package[:8], here.shared())
            return Staleness() if same else Staleness(core=True, defense=True, attacks=frozenset(here.attacks),
                                                      legacy=self.legacy[:8])
        core = self.core != here.core
        defense = core or self.defense != here.defense
        attacks = frozenset(n for n, d in here.attacks.items() if defense or self.attacks.get(n) != d)
        return Staleness(core=core, defense=defense, attacks=attacks)


@dataclass(frozen=True)
class Staleness:
    """What of a stored cell is stale: the core, the defense (its utility and release) and which attacks."""

    core: bool = False
    defense: bool = False
    attacks: frozenset[str] = frozenset()
    #: The one digest of a cell signed before issue #62 that the code here does not match ("" otherwise).
    legacy: str = ""

    def __bool__(self) -> bool:
        return self.core or self.defense or bool(self.attacks)

    def components(self) -> list[str]:
        """The stale components by name (``all`` for a cell of one digest, ``core``; else ``defense`` and
        ``attack:NAME``), for a listing."""
        if self.legacy:
            return [f"{ALL} (code:{self.legacy}, one digest for everything)"]
        if self.core:
            return ["core"]
        return (["defense"] if self.defense else []) + [f"attack:{n}" for n in sorted(self.attacks)]


def current_code(defense: str, attacks: Iterable[str]) -> CellCode:
    """The digests the code here gives a cell of ``defense`` and ``attacks`` (names in the plugin registries,
    which the caller has loaded; a name not registered here gets an empty digest, so it reads as stale)."""
    def digest(registry: Any, name: str) -> str:
        if name not in registry:
            return ""
        entry = registry.entry(name)
        return plugin_digest(entry.obj, entry.origin)

    return CellCode(core=core_digest(), defense=digest(DEFENSES, defense),
                    attacks={name: digest(ATTACKS, name) for name in attacks}, package=package_code_digest())


def table_codes(attacks: Iterable[str]) -> tuple[str, str]:
    """The signature ``code:`` values the code here gives a table of ``attacks``: the per-component one
    (:meth:`CellCode.shared`) first, then the package's, which results signed before issue #62 carry."""
    return current_code("", list(attacks)).shared(), package_code_digest()[:8]


__all__ = ["ALL", "CORE_MODULE", "CellCode", "DIGEST_LENGTH", "Staleness", "class_modules", "core_digest",
           "current_code", "digest_files", "release_code", "table_codes", "module_files", "plugin_digest"]
