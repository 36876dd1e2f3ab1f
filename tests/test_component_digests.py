"""Issue #62 item 1: a digest per component, derived from the imports, moves exactly where a change can reach.

Each check lays out an installed copy of the package (as a bundle or a wheel does, ``attacks/`` and
``defenses/`` inside ``rapt_audit/``), plants a one-line change in one file of the copy and recomputes every
built-in defense's and attack's digest and the core's in a fresh interpreter there.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from rapt_audit.api.components import module_files

_DIGESTS = """
import json
from rapt_audit.api.plugins import ATTACKS, DEFENSES, load_builtins
from rapt_audit.api.components import core_digest, plugin_digest
load_builtins()
print(json.dumps({"core": core_digest(),
                  **{"defense:" + n: plugin_digest(DEFENSES.entry(n).obj) for n in DEFENSES.names()},
                  **{"attack:" + n: plugin_digest(ATTACKS.entry(n).obj) for n in ATTACKS.names()}}))
"""


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """An installed layout of this checkout's package, and its digests before any change."""
    from rapt_audit.bundle.pieces import package_members

    root = tmp_path_factory.mktemp("installed")
    for member in package_members([]):
        path = root / member.name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(member.data)
    return root, _digests(root)


def _digests(root):
    out = subprocess.run([sys.executable, "-c", _DIGESTS], cwd=root, capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def _moved_by(installed, relative):
    """The components whose digest moves when ``relative`` (a file of the installed copy) changes."""
    root, before = installed
    path = root / relative
    original = path.read_bytes()
    path.write_bytes(original + b"\n_PLANTED = 1  # a change that reaches only what imports this file\n")
    try:
        after = _digests(root)
    finally:
        path.write_bytes(original)
    assert set(after) == set(before)
    return {name for name in before if before[name] != after[name]}


def test_a_change_to_one_attack_moves_only_that_attack(installed):
    assert _moved_by(installed, "rapt_audit/attacks/bayes_inversion.py") == {"attack:bayes_inversion"}


def test_a_change_to_one_defense_moves_only_the_defenses_of_its_module(installed):
    # CusText+ is CusText with ``plus=True``, one registered name: no other defense, no attack, not the core.
    assert _moved_by(installed, "rapt_audit/defenses/custext.py") == {"defense:custext"}


def test_a_shared_helper_moves_exactly_the_components_that_import_it(installed):
    moved = _moved_by(installed, "rapt_audit/mechanisms/align.py")
    assert {"attack:bayes_inversion", "defense:custext"} <= moved
    assert "core" not in moved and "attack:random_guess" not in moved and "defense:identity" not in moved
    # Exactly as far as the imports reach: a component moves if and only if its files hold the helper.
    _, before = installed
    reaching = {name for name in before
                if "rapt_audit/mechanisms/align.py" in module_files(*_modules_of(name))}
    assert reaching == moved


def test_a_change_to_the_core_moves_the_core_and_every_stage_on_it(installed):
    moved = _moved_by(installed, "rapt_audit/data/base.py")
    assert "core" in moved


def _modules_of(component):
    """The modules whose imports make ``component``'s digest (``core``, ``defense:NAME``, ``attack:NAME``)."""
    from rapt_audit.api.components import CORE_MODULE, class_modules
    from rapt_audit.api.plugins import ATTACKS, DEFENSES, load_builtins

    if component == "core":
        return (CORE_MODULE,)
    load_builtins()
    kind, _, name = component.partition(":")
    return class_modules((DEFENSES if kind == "defense" else ATTACKS).entry(name).obj)


def test_a_facade_is_followed_by_the_names_taken_from_it(tmp_path, monkeypatch):
    """A package ``__init__`` that only re-exports is followed by the names taken from it: ``from pkg import
    f`` reaches the module that defines ``f`` and not the package's other members; ``rapt_audit/__init__.py``,
    which re-exports the reporting layer, does not pull reporting into an attack's digest."""
    package = tmp_path / "facadepkg"
    package.mkdir()
    (package / "__init__.py").write_text('"""Re-exports."""\nfrom facadepkg.a import f\nfrom facadepkg.b import g\n')
    (package / "a.py").write_text("def f():\n    return 1\n")
    (package / "b.py").write_text("def g():\n    return 2\n")
    (package / "user.py").write_text("from facadepkg import f\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert set(module_files("facadepkg.user")) >= {"facadepkg/user.py", "facadepkg/a.py"}
    assert not {"facadepkg/b.py", "facadepkg/__init__.py"} & set(module_files("facadepkg.user"))
    files = module_files("rapt_audit.attacks.random_guess")
    assert not any(label.startswith("rapt_audit/reporting/") for label in files)
    assert not any(label.startswith("rapt_audit/cli/") for label in module_files("rapt_audit.pipeline.runner"))
    assert "rapt_audit/data/base.py" in module_files("rapt_audit.pipeline.runner")
