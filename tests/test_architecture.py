"""The layout draws the design (ARCHITECTURE.md): layers import downwards only, no cycles, small modules.

The import graph is read from the source with ``ast`` (nothing is imported), so a new upward or
circular import fails here with the offending modules named, before it can confuse a reader.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: Which layers each layer may import at run time (type-only imports under TYPE_CHECKING are free).
ALLOWED = {
    "api": set(),
    "scoring": {"api"},
    "encoder": {"api"},
    "data": {"api"},
    "mechanisms": {"api", "scoring", "encoder"},
    "utility": {"api", "scoring", "encoder"},
    "pipeline": {"api", "scoring", "encoder", "data", "mechanisms"},
    "defenses": {"api", "scoring", "encoder", "data", "mechanisms", "utility", "pipeline.context"},
    "attacks": {"api", "scoring", "encoder", "data", "mechanisms", "utility", "pipeline.context"},
    "reporting": {"api", "scoring", "mechanisms", "pipeline"},
    "cli": {"api", "scoring", "encoder", "data", "mechanisms", "utility", "pipeline", "reporting"},
    "": {"api", "pipeline", "reporting"},  # rapt_audit/__init__.py: the public re-exports (load, summarize)
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


def imports_of(path: Path, known: set[str]) -> list[tuple[str, ast.stmt]]:
    """Run-time imports of rapt-audit modules in ``path``: (target module, import statement)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skip = _type_checking_nodes(tree)
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


def graph() -> dict[str, set[str]]:
    files = module_files()
    edges: dict[str, set[str]] = defaultdict(set)
    for module, path in files.items():
        for target, _ in imports_of(path, set(files)):
            if target != module and not (module.startswith(target + ".") and target in files
                                         and files[target].name == "__init__.py"):
                edges[module].add(target)
    return edges


def test_no_import_cycle():
    edges = graph()
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


def test_layers_import_downwards_only():
    bad = []
    for module, targets in graph().items():
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
