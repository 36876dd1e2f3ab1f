"""The plugin guides' worked examples, and ``rapt-audit plugin new``'s skeletons, as a plugin author uses them.

Each example package under ``examples/`` is installed with pip (offline: ``--no-index``, the venv's own
setuptools as build backend) into a temporary folder, which a fresh ``rapt-audit`` process then finds
on ``PYTHONPATH`` as it would find any installed package: ``ls`` lists both with their distribution and
version, ``plugin check`` passes them, and a smoke audit of the synthetic demo corpus runs them beside
a built-in attack, records their versions in ``env.versions`` and renders into a report. A generated
skeleton installs and passes the check the same way. The examples import only ``rapt_audit.plugin``.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rapt_audit.plugin_kit.rules import ATTACK_RULES, DEFENSE_RULES

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = {"word_drop": ROOT / "examples" / "word-drop-defense",
            "verbatim_share": ROOT / "examples" / "verbatim-share-attack"}
GUIDES = {"defense": ROOT / "docs" / "writing-a-defense.md", "attack": ROOT / "docs" / "writing-an-attack.md"}
#: The console script's entry point, run in a fresh process (the in-process registry never sees new packages).
CLI = [sys.executable, "-c", "import sys; from rapt_audit.cli import main; sys.exit(main())"]


def pip_install(packages: list[Path], target: Path) -> None:
    """``pip install`` the package folders into ``target``: copies first (the build writes into the source
    folder), no dependencies, no index (nothing is downloaded), the venv's setuptools as build backend."""
    copies = []
    for package in packages:
        copy = target.parent / "src" / package.name
        shutil.copytree(package, copy, ignore=shutil.ignore_patterns("__pycache__", "build", "*.egg-info"))
        copies.append(str(copy))
    done = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation", "--no-index",
                           "--disable-pip-version-check", "--quiet", "--target", str(target), *copies],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr


def rapt_audit(args: list[str], site: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``rapt-audit ARGS`` in a fresh process that sees the packages installed in ``site``, without a data directory."""
    env = {**os.environ, "PYTHONPATH": str(site), "OMP_NUM_THREADS": "1"}
    env.pop("RAPT_AUDIT_DATA", None)
    return subprocess.run([*CLI, *args], capture_output=True, text=True, cwd=cwd, env=env, timeout=600)


@pytest.fixture(scope="module", autouse=True)
def _session_cache_with_the_table(tmp_path_factory: pytest.TempPathFactory, seed_warm_cache) -> None:
    """The fresh processes use the session's cache folder (conftest's ``RAPT_AUDIT_CACHE``): seeded with the
    embedding table, so that a run or check there reads it rather than loading the model to build it (4.5 s
    each), whichever files ran before in this worker."""
    seed_warm_cache(tmp_path_factory.getbasetemp() / "cache")


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Both example packages, installed into a temporary folder."""
    target = tmp_path_factory.mktemp("examples") / "site"
    pip_install(list(EXAMPLES.values()), target)
    return target


def test_the_examples_install_list_with_their_versions_and_pass_the_check(site: Path, tmp_path: Path):
    listed = rapt_audit(["ls"], site, tmp_path)
    assert listed.returncode == 0, listed.stderr
    for name, dist in (("word_drop", "rapt-audit-word-drop 0.1.0"),
                       ("verbatim_share", "rapt-audit-verbatim-share 0.1.0")):
        line = next((row for row in listed.stdout.splitlines() if row.split()[:1] == [name]), "")
        assert dist in line, listed.stdout
    checked = rapt_audit(["plugin", "check", "word_drop", "verbatim_share"], site, tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "defense word_drop (rapt-audit-word-drop 0.1.0): verdict: PASS" in checked.stdout
    assert "attack verbatim_share (rapt-audit-verbatim-share 0.1.0): verdict: PASS" in checked.stdout
    assert "FAIL" not in checked.stdout and "SKIP" not in checked.stdout


def test_the_examples_run_in_an_audit_record_their_versions_and_render(site: Path, tmp_path: Path):
    out = tmp_path / "run"
    done = rapt_audit(["run", "--defense", "word_drop", "--attacks", "verbatim_share,whitebox", "--profile", "smoke",
                       "--out", str(out), "--quiet"], site, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads((out / "result.json").read_text(encoding="utf-8"))
    assert result["env"]["versions"]["rapt-audit-word-drop"] == "0.1.0"
    assert result["env"]["versions"]["rapt-audit-verbatim-share"] == "0.1.0"
    fields = dict(part.split(":", 1) for part in result["signature"].split("|"))  # the comparability signature
    # The attack's version groups the rows it measured; the defense's is its row's provenance (issue #42).
    assert fields["plugins"] == "rapt-audit-verbatim-share=0.1.0"
    assert result["defense"]["origin"] == "rapt-audit-word-drop 0.1.0"
    assert fields["attacks"].startswith("verbatim_share,whitebox@") and len(fields["code"]) == 8
    share = result["attacks"]["verbatim_share"]
    assert 0 < share["empirical_privacy"]["value"] < 1, share  # p = 0.3: about 70 % of the words are sent
    assert "whitebox" in result["attacks"] and result["defense"]["params"]["p"] == 0.3
    report = rapt_audit(["report", str(out), "--out", str(tmp_path / "report.html")], site, tmp_path)
    assert report.returncode == 0, report.stderr
    html = (tmp_path / "report.html").read_text(encoding="utf-8")
    assert "word_drop" in html and "verbatim_share" in html and "rapt-audit-word-drop 0.1.0" in html


def test_a_new_skeleton_installs_and_passes_the_check_and_is_never_overwritten(tmp_path: Path, capsys):
    from rapt_audit.cli import main

    # ``plugin new`` only writes files: run in this process (a fresh one per call cost 0.7 s each); the check,
    # which must find the installed packages, runs in a fresh process below.
    made = tmp_path / "made"
    for kind, name in (("defense", "my_defense"), ("attack", "my_attack")):
        assert main(["plugin", "new", kind, name, "--dir", str(made)]) == 0, capsys.readouterr().err
    module = made / "my-defense" / "my_defense.py"
    before = module.read_text(encoding="utf-8")
    capsys.readouterr()
    assert main(["plugin", "new", "defense", "my_defense", "--dir", str(made)]) == 2
    assert "never overwrites" in capsys.readouterr().err
    assert module.read_text(encoding="utf-8") == before
    assert sorted(p.name for p in (made / "my-attack").rglob("*") if p.is_file()) == [
        "README.md", "my_attack.py", "pyproject.toml", "test_my_attack.py"]
    site = tmp_path / "site"
    pip_install([made / "my-defense", made / "my-attack"], site)
    checked = rapt_audit(["plugin", "check", "--all-installed"], site, tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "defense my_defense (rapt-audit-my-defense 0.1.0): verdict: PASS" in checked.stdout
    assert "attack my_attack (rapt-audit-my-attack 0.1.0): verdict: PASS" in checked.stdout
    assert "SKIP" not in checked.stdout


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_the_examples_import_rapt_audit_only_through_the_plugin_api(name: str):
    allowed = {"rapt_audit.plugin", "numpy", "__future__", *sys.stdlib_module_names}
    for path in EXAMPLES[name].rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                modules = [node.module or ""]
            else:
                continue
            for module in modules:
                assert module in allowed or module.split(".")[0] in sys.stdlib_module_names, (
                    f"{path.relative_to(ROOT)} imports {module}: a plugin imports rapt-audit only as rapt_audit.plugin")


@pytest.mark.parametrize("kind", sorted(GUIDES))
def test_the_guides_name_every_rule_and_the_check_and_the_readme_links_them(kind: str):
    guide = GUIDES[kind].read_text(encoding="utf-8")
    rules = DEFENSE_RULES if kind == "defense" else ATTACK_RULES
    missing = [rule for rule in rules if not re.search(rf"`{rule}`", guide)]
    assert not missing, f"{GUIDES[kind].name} does not explain the rules {missing}"
    assert "rapt-audit plugin check" in guide and "rapt-audit plugin new" in guide
    example = EXAMPLES["word_drop" if kind == "defense" else "verbatim_share"]
    assert f"examples/{example.name}" in guide
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert f"docs/{GUIDES[kind].name}" in readme
