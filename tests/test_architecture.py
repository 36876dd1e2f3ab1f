"""The layout draws the design (ARCHITECTURE.md): layers import downwards only, no cycles, small modules.

The import graph is read from the source with ``ast`` (nothing is imported), so a new upward or
circular import fails here with the offending modules named, before it can confuse a reader. Imports
under ``TYPE_CHECKING`` follow the layering too: a lower layer names what it is handed through the
protocols of ``api/`` (``api.context.RunContext``), never a class of a layer above it.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: Which layers each layer may import, at run time or under TYPE_CHECKING alike.
ALLOWED = {
    "api": set(),
    "scoring": {"api"},
    "encoder": {"api"},
    "data": {"api"},
    "mechanisms": {"api", "scoring", "encoder"},
    "utility": {"api", "scoring", "encoder"},
    "pipeline": {"api", "scoring", "encoder", "data", "mechanisms"},
    # The three commands built on the pipeline, each in a folder named after its command: siblings above pipeline
    # (and below reporting and cli), none importing another, so the order api < ... < pipeline < bundle, user_side,
    # audit < reporting < plugin_kit < benchmark < cli has no cycle; only cli and the package's re-exports import them.
    "bundle": {"api", "scoring", "encoder", "data", "mechanisms", "pipeline"},  # rapt-audit bundle
    "user_side": {"api", "scoring", "encoder", "data", "mechanisms", "pipeline"},  # rapt-audit privatize
    "audit": {"api", "scoring", "encoder", "data", "mechanisms", "pipeline"},  # rapt-audit audit
    "defenses": {"api", "scoring", "encoder", "data", "mechanisms", "utility"},
    "attacks": {"api", "scoring", "encoder", "data", "mechanisms", "utility"},
    "reporting": {"api", "scoring", "mechanisms", "pipeline"},
    # The plugin author's kit (conformance battery, skeleton writer) reaches plugins through the registries and
    # judges them with the runner's own contract checks: above pipeline, never importing a plugin package.
    "plugin_kit": {"api", "scoring", "encoder", "data", "mechanisms", "pipeline"},
    # Benchmarks: a declared file run through the sweeps and read through the reports, above both.
    "benchmark": {"api", "scoring", "data", "pipeline", "reporting"},
    "cli": {"api", "scoring", "encoder", "data", "mechanisms", "utility", "pipeline", "bundle", "user_side", "audit",
            "reporting", "plugin_kit", "benchmark"},
    # rapt_audit/plugin.py, the public plugin API, re-exports the plugin packages' bases, so it sits above them
    # (beside cli); no layer lists it, so nothing in rapt-audit imports it: only third-party plugins do. It also
    # re-exports the embedding space (encoder) and what PCT2T is built from (mechanisms) for defense authors.
    "plugin": {"api", "scoring", "encoder", "mechanisms", "defenses", "attacks", "plugin_kit"},
    # rapt_audit/__init__.py: the public re-exports (run, load, summarize, privatize, audit_defense)
    "": {"api", "pipeline", "user_side", "audit", "reporting"},
}
MAX_LINES = 400
HEAVY = {"torch", "transformers", "spacy", "peft", "sklearn", "scipy", "matplotlib", "seqeval", "tqdm", "numpy",
         "jsonschema", "pandas", "pyarrow", "datasets", "ray"}


def module_files() -> dict[str, Path]:
    """Installed module name → source file, for the core package and the two plugin packages."""
    files = {}
    for folder, package in (("rapt_audit", "rapt_audit"), ("attacks", "rapt_audit.attacks"),
                            ("defenses", "rapt_audit.defenses")):
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = list(path.relative_to(ROOT / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            files[".".join([package, *parts])] = path
    return files


def _type_checking_nodes(tree: ast.Module) -> set[int]:
    return {id(node) for top in tree.body
            if isinstance(top, ast.If) and "TYPE_CHECKING" in ast.unparse(top.test) for node in ast.walk(top)}


def imports_of(path: Path, known: set[str], *, with_type_hints: bool = False) -> list[tuple[str, ast.stmt]]:
    """Imports of rapt-audit modules in ``path``: (target module, import statement); run-time ones only
    unless ``with_type_hints`` (then those under ``TYPE_CHECKING`` as well)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skip = set() if with_type_hints else _type_checking_nodes(tree)
    found = []
    for node in ast.walk(tree):
        if id(node) in skip or not isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                 else [node.module or ""] + [f"{node.module}.{a.name}" for a in node.names])
        for name in names:
            while name and name not in known:
                name = name.rpartition(".")[0]
            if name.startswith("rapt_audit"):
                found.append((name, node))
    return found


def layer_of(module: str) -> str:
    """``rapt_audit.mechanisms.noise`` → ``mechanisms``; the package itself → ``""``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def graph(*, with_type_hints: bool = False) -> dict[str, set[str]]:
    """Module → the rapt-audit modules it imports (``with_type_hints``: those under ``TYPE_CHECKING`` too)."""
    files = module_files()
    edges: dict[str, set[str]] = defaultdict(set)
    for module, path in files.items():
        for target, _ in imports_of(path, set(files), with_type_hints=with_type_hints):
            if target != module and not (module.startswith(target + ".") and target in files
                                         and files[target].name == "__init__.py"):
                edges[module].add(target)
    return edges


def test_no_import_cycle():
    # Imports under TYPE_CHECKING count: a circle of type hints still ties the modules together for
    # whoever reads or moves them (and for a type checker), inside a package as across packages.
    edges = graph(with_type_hints=True)
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                cycle = stack[stack.index(nxt):] + [nxt]
                pytest.fail("import cycle: " + " → ".join(cycle))
            if nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for module in sorted(edges):
        if module not in state:
            visit(module)


def test_the_layer_table_is_an_order():
    """The table itself has no circle: every layer may import only layers that are listed and can be put below it."""
    placed: list[str] = []
    while len(placed) < len(ALLOWED):
        ready = sorted(layer for layer, below in ALLOWED.items()
                       if layer not in placed and below <= set(placed))
        assert ready, f"the layer table has a cycle among {sorted(set(ALLOWED) - set(placed))}"
        placed += ready


def test_layers_import_downwards_only():
    bad = []
    for module, targets in graph(with_type_hints=True).items():
        layer = layer_of(module)
        for target in targets:
            other = layer_of(target)
            if other == layer:
                continue
            allowed = ALLOWED[layer]
            if other in allowed or ".".join(target.split(".")[1:3]) in allowed:
                continue
            bad.append(f"{module} imports {target} ({layer or 'rapt_audit'} → {other})")
    assert not bad, "imports against the layering of ARCHITECTURE.md:\n" + "\n".join(sorted(bad))


def test_every_layer_says_what_it_owns_and_may_import():
    for path in sorted((ROOT / "rapt_audit").glob("*/__init__.py")):
        doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
        assert "May import" in doc, f"{path.relative_to(ROOT)}: the docstring must say what the layer may import"


def command_parts(source: str) -> list[str]:
    """What makes a module a command, as ``LINE: what``: an ``argparse`` import, an ``add_parser`` or a ``cmd_*``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [node.module or ""]
        else:
            names = []
        if any(name.split(".")[0] == "argparse" for name in names):
            found.append(f"{node.lineno}: imports argparse")
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and (
                node.name == "add_parser" or node.name.startswith("cmd_")):
            found.append(f"{node.lineno}: defines {node.name}")
    return found


def test_commands_live_in_cli_and_reporting_parses_no_arguments():
    """Every ``add_parser`` and ``cmd_*`` is in ``cli/``; ``reporting/`` reads and renders, and imports no argparse
    (issue #64). Outside ``reporting/`` argparse stays allowed: ``bundle/target.py`` is the GPU machine's own script."""
    bad = []
    for module, path in module_files().items():
        if layer_of(module) == "cli":
            continue
        for part in command_parts(path.read_text(encoding="utf-8")):
            if layer_of(module) == "reporting" or "imports argparse" not in part:
                bad.append(f"{path.relative_to(ROOT)}:{part}")
    assert not bad, "argument parsing outside cli/ (move the command to rapt_audit/cli/):\n" + "\n".join(bad)


def test_the_command_rule_sees_a_command_where_the_report_commands_stood():
    """The rule above catches the shape the report commands had in ``reporting/`` before issue #64."""
    source = ("import argparse\nfrom argparse import Namespace\n\n\ndef add_parser(sub):\n    pass\n\n\n"
              "def cmd_check(args):\n    return 0\n\n\ndef checked(args):\n    return 0\n")
    assert command_parts(source) == ["1: imports argparse", "2: imports argparse", "5: defines add_parser",
                                     "9: defines cmd_check"]


def test_no_module_over_the_size_limit():
    long = {str(p.relative_to(ROOT)): n for p in module_files().values()
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines: {long}"


def test_imports_inside_functions_are_lazy_on_purpose():
    """Imports belong at the top; one inside a function must be a heavy library marked ``# lazy``."""
    bad = []
    for module, path in module_files().items():
        source = path.read_text(encoding="utf-8")
        tree, lines = ast.parse(source), source.splitlines()
        for fn in ast.walk(tree):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(fn):
                if not isinstance(node, (ast.Import, ast.ImportFrom)):
                    continue
                name = node.names[0].name if isinstance(node, ast.Import) else node.module or ""
                marked = "# lazy" in lines[node.end_lineno - 1]
                if not marked or (name.split(".")[0] not in HEAVY and not name.startswith("rapt_audit")):
                    bad.append(f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)}")
    assert not bad, "imports inside functions that are not marked '# lazy (reason)':\n" + "\n".join(bad)


def test_the_pipeline_run_context_has_every_member_of_the_protocol():
    """Plugins and the lower layers annotate with ``api.context.RunContext``; the pipeline builds the concrete
    class, which must give every attribute and method the protocol promises, with the same parameters."""
    import dataclasses
    import inspect

    from rapt_audit.api import context as api_context
    from rapt_audit.pipeline.context import RunContext

    fields = {f.name for f in dataclasses.fields(RunContext)}
    members = [name for name in vars(api_context.RunContext) if not name.startswith("_")]
    assert {"seed", "rng", "shared", "encoder", "text_releases"} <= set(members)
    for name in members:
        promised = vars(api_context.RunContext)[name]
        if isinstance(promised, property):
            # a field, or a property derived from fields (service_spec: the service's model, else the client's)
            assert name in fields or isinstance(vars(RunContext).get(name), property), \
                f"pipeline.context.RunContext has no attribute {name!r}"
        else:
            given = getattr(RunContext, name, None)
            assert callable(given), f"pipeline.context.RunContext has no method {name!r}"
            assert list(inspect.signature(given).parameters) == list(inspect.signature(promised).parameters), name
    assert isinstance(RunContext(), api_context.RunContext)  # runtime_checkable: every member present


@pytest.mark.parametrize(("protocol", "concrete"), [
    ("rapt_audit.pipeline.tidy:ResultView", "rapt_audit.pipeline.results:RunResult"),
    # DchiTextDefense itself has no name until a subclass is registered: T2T stands for every dχ text defense
    ("rapt_audit.defenses._pretraining:PretrainedDefense", "rapt_audit.defenses.t2t:T2TDefense"),
])
def test_a_protocol_that_breaks_a_circle_names_members_its_class_has(protocol, concrete):
    """A module that cannot import the class it is handed (the class's module imports it) names a protocol
    instead; the class must still have every member the protocol names, so the two cannot drift apart."""
    import dataclasses
    import importlib
    import typing

    def load(spec: str) -> type:
        module, name = spec.split(":")
        return getattr(importlib.import_module(module), name)

    promised, given = load(protocol), load(concrete)
    fields = {f.name for f in dataclasses.fields(given)} | set(vars(given))
    for cls in given.__mro__:
        fields |= set(vars(cls)) | set(getattr(cls, "__annotations__", {}))
    members = set(typing.get_type_hints(promised)) | {n for n in vars(promised) if not n.startswith("_")}
    missing = sorted(members - fields)
    assert not missing, f"{concrete} lacks {missing}, which {protocol} promises"


def test_the_package_metadata_builds_without_a_deprecation_warning():
    """pyproject.toml in the form setuptools keeps building (a SPDX ``license`` string, not the old table)."""
    import warnings

    pytest.importorskip("setuptools", minversion="77", reason="SPDX license strings need setuptools 77")
    from setuptools.config.pyprojecttoml import apply_configuration
    from setuptools.dist import Distribution

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        apply_configuration(Distribution(), ROOT / "pyproject.toml")
    deprecations = [str(w.message).splitlines()[0] for w in caught if "Deprecat" in w.category.__name__]
    assert not deprecations, deprecations




def _built_in_names_used(source: str, names: set[str]) -> list[str]:
    """``line: 'name'`` for every string constant of ``source`` equal to one of ``names``, except what cannot
    dispatch on a defense: a string that is a statement of its own (a docstring); the default of a ``--defense``
    option or of a parameter named ``defense`` (the defense a user gets by naming none, shown in the help, never
    branched on); and the executor named ``local`` (``--executor``'s choices, an ``executor=`` keyword, a comparison
    with an ``.executor`` attribute), another vocabulary that shares the word."""
    tree = ast.parse(source)
    allowed = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and any(isinstance(side, ast.Attribute) and side.attr == "executor"
                                                 for side in (node.left, *node.comparators)):
            allowed |= {id(side) for side in (node.left, *node.comparators)}
        elif isinstance(node, ast.keyword) and node.arg == "executor":
            allowed.add(id(node.value))
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add_argument"
              and node.args and isinstance(node.args[0], ast.Constant)):
            if node.args[0].value == "--executor":
                allowed |= {id(inner) for inner in ast.walk(node)}
            elif node.args[0].value == "--defense":
                allowed |= {id(k.value) for k in node.keywords if k.arg == "default"}
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            given = node.args.posonlyargs + node.args.args
            pairs = [*zip(given[len(given) - len(node.args.defaults):], node.args.defaults),
                     *zip(node.args.kwonlyargs, node.args.kw_defaults)]
            allowed |= {id(default) for arg, default in pairs if arg.arg == "defense" and default is not None}
    found = [n for n in ast.walk(tree)
             if isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value in names and id(n) not in allowed]
    return [f"{n.lineno}: {n.value!r}" for n in sorted(found, key=lambda n: (n.lineno, n.col_offset))]


def test_core_code_reads_capabilities_not_built_in_defense_names():
    """No module of ``rapt_audit/`` outside the plugin packages (where each built-in declares itself and its
    ``Capabilities``) holds a built-in defense's name as a value (issue #64): the audit, the benchmark, the reports
    and the run's defaults read what a defense declares (``api.plugins.capabilities_of``, ``reference_defense``), so a
    third party's defense is treated as a built-in that declares the same. The names come from the registry."""
    from rapt_audit.api.plugins import DEFENSES, load_builtins

    load_builtins()
    names = {name for name in DEFENSES.names() if not DEFENSES.entry(name).origin}
    assert {"identity", "dpnr", "cape", "t2t", "local"} <= names
    # The rule sees the shapes the code had before issue #64, and lets through what it says it allows.
    before = ('AUDITED = {"t2t": "the released token"}\nlaplace = defense in ("dpnr", "cape")\n'
              'if cell["defense"] != "identity":\n    pass\n')
    assert _built_in_names_used(before, names) == ["1: 't2t'", "2: 'dpnr'", "2: 'cape'", "3: 'identity'"]
    allowed = ('def f(texts, defense="pct2t"):\n    """Privatize with "t2t"."""\n    return args.executor == "local"\n\n'
               'p.add_argument("--defense", default="t2t")\np.add_argument("--executor", choices=["local", "ray"])\n')
    assert _built_in_names_used(allowed, names) == []
    bad = []
    for module, path in module_files().items():
        where = str(path.relative_to(ROOT))
        if layer_of(module) in ("defenses", "attacks"):
            continue
        bad += [f"{where}:{hit}" for hit in _built_in_names_used(path.read_text(encoding="utf-8"), names)]
    assert not bad, ("built-in defense names in core code (declare a Capabilities field on the defense and read it "
                     "through rapt_audit.api.plugins.capabilities_of / reference_defense):\n" + "\n".join(bad))
