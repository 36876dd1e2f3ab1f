"""``benchmark run PUBLISHED --add FILE``: a defense added to a published benchmark, only its cells run.

The published folder is the tiny benchmark of ``test_benchmark_verify`` run for real (one cell of 20 synthetic
records, a second); the added defense is the guide's word drop (``examples/word-drop-defense``), installed
as a plugin would be. Its cells are real runs of the smallest cells there are (about a second each). The guide's
section "Put your defense on the leaderboard" is run as printed, with that folder at ``reports/sst2-cpu``.
"""

from __future__ import annotations

import importlib.util
import re
import shlex
import shutil
import sys
from pathlib import Path

import pytest

from rapt_audit.api.plugins import DEFENSES, load
from rapt_audit.benchmark.run import read_index
from rapt_audit.cli.main import main
from tests.fake_plugins import GUIDE
from tests.test_benchmark_verify import PUBLISHED

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "word-drop-defense" / "word_drop.py"
SECTION = "## 7. Put your defense on the leaderboard"


@pytest.fixture(scope="module", autouse=True)
def word_drop_plugin():
    """The guide's example defense, registered as its installed entry point would register it."""
    load()
    spec = importlib.util.spec_from_file_location("word_drop", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    sys.modules["word_drop"] = module  # as an installed plugin's module is (dataclasses look it up)
    try:
        spec.loader.exec_module(module)
        DEFENSES.add("word_drop", module.WordDrop, tags=module.WordDrop.tags, origin="rapt-audit-word-drop 0.1.0")
        yield
        DEFENSES.remove("word_drop")
    finally:
        sys.modules.pop("word_drop", None)


@pytest.fixture(scope="module")
def published_run(tmp_path_factory) -> Path:
    """The tiny benchmark's folder as ``benchmark run`` writes it: its one identity cell a real run (a second), so
    the added cells carry the signature the published ones do, as on a real checkout."""
    root = tmp_path_factory.mktemp("published")
    (root / "tiny.toml").write_text(PUBLISHED, encoding="utf-8")
    with pytest.MonkeyPatch.context() as patch:  # the session's cache, as conftest gives each test
        patch.setenv("RAPT_AUDIT_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))
        assert main(["benchmark", "run", str(root / "tiny.toml"), "--out", str(root / "sst2-cpu"), "--quiet"]) == 0
    return root / "sst2-cpu"


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, published_run: Path) -> Path:
    """A working folder holding the tiny published benchmark at ``reports/sst2-cpu`` (as a checkout holds its own)."""
    shutil.copytree(published_run, tmp_path / "reports" / "sst2-cpu")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _guide() -> tuple[str, list[list[str]]]:
    """The section's additions file (its ``toml`` block) and its commands (its ``bash`` block), as printed."""
    text = GUIDE.read_text(encoding="utf-8")
    section = text[text.index(SECTION):text.index("\n## ", text.index(SECTION) + 1)]
    toml = re.search(r"```toml\n(.*?)```", section, re.S).group(1)
    bash = re.search(r"```bash\n(.*?)```", section, re.S).group(1)
    return toml, [shlex.split(line) for line in bash.splitlines() if line.strip()]


def test_the_guide_walk_runs_as_printed(workdir, capsys):
    toml, commands = _guide()
    (workdir / "word-drop.toml").write_text(toml, encoding="utf-8")
    published = _tree(workdir / "reports" / "sst2-cpu")
    out = workdir / "runs" / "word-drop-bench"
    outputs = []
    for argv in commands:
        assert argv[0] == "rapt-audit"
        code = main(argv[1:])
        captured = capsys.readouterr()
        assert code == 0, f"{shlex.join(argv)} exited {code}: {captured.err or captured.out}"
        outputs.append(captured.out)
        if "--dry-run" in argv:
            assert not out.exists(), "a dry run writes nothing"
    dry, one, rest, verified = outputs
    # The dry run: only word drop's two cells, the published one reused, the plugin's cost a stated guess.
    assert "2 cells, 0 finished, 2 to run" in dry and "defense=identity" not in dry
    assert "1 published cell(s)" in dry and "no smoke-profile figure for word_drop" in dry
    # One cell first, no report while the other is still to run; then the rest and the report of the whole file.
    assert "1 cell(s) of the file still to run, so no report yet" in one
    assert "wrote" in rest and (out / "leaderboard.md").is_file() and (out / "index.html").is_file()
    index = read_index(out)
    assert index["name"] == "tiny" and {c["defense"] for c in index["cells"]} == {"identity", "word_drop"}
    assert "word_drop" in (out / "leaderboard.md").read_text(encoding="utf-8")
    assert "0 refused" in verified and "2 unchecked" in verified  # a maintainer's checks admit both cells
    assert _tree(workdir / "reports" / "sst2-cpu") == published, "the published folder is never written"


def test_a_header_key_or_a_published_defense_in_the_file_is_refused(workdir, capsys):
    (workdir / "add.toml").write_text('seeds = [0, 1]\n\n[defenses.word_drop]\np = 0.3\n', encoding="utf-8")
    assert main(["benchmark", "run", "reports/sst2-cpu", "--add", "add.toml", "--out", "runs/x", "--dry-run"]) == 2
    assert "add.toml:1: 'seeds' is the published benchmark's" in capsys.readouterr().err
    (workdir / "add.toml").write_text('[defenses.identity]\n', encoding="utf-8")
    assert main(["benchmark", "run", "reports/sst2-cpu", "--add", "add.toml", "--out", "runs/x", "--dry-run"]) == 2
    assert "already on the published benchmark" in capsys.readouterr().err


def test_a_bad_setting_is_named_at_the_line_of_the_additions_file(workdir, capsys):
    (workdir / "add.toml").write_text('# mine\n[defenses.word_drop]\np = 7\n', encoding="utf-8")
    assert main(["benchmark", "run", "reports/sst2-cpu", "--add", "add.toml", "--out", "runs/x", "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert re.search(r"add\.toml:[23]:", err), err


def test_the_published_folder_is_never_the_out_and_a_filter_that_matches_nothing_says_what_there_is(workdir, capsys):
    (workdir / "add.toml").write_text('[defenses.word_drop]\np = [0.1, 0.3]\n', encoding="utf-8")
    for args, message in ((["--out", "reports/sst2-cpu"], "is the published folder"), ([], "needs --out"),
                          (["--out", "runs/x", "--cell", "p=0.5"], "matches none")):
        assert main(["benchmark", "run", "reports/sst2-cpu", "--add", "add.toml", *args]) == 2
        err = capsys.readouterr().err
        assert message in err, err
    assert "p=0.1" in err and "p=0.3" in err
    assert not (workdir / "runs").exists()


def test_a_cell_filter_narrows_any_benchmark_run_and_its_dry_run(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    main(["benchmark", "run", "smoke", "--cell", "defense=t2t", "--cell", "seed=0", "--out", "runs/s", "--dry-run"])
    out = capsys.readouterr().out  # exit 2 where a public corpus is missing: the listing is made all the same
    assert "total: 2 cells, 0 finished, 2 to run" in out and "defense=identity" not in out
    assert "the report is rendered once every cell of the file has finished" in out
    assert not (tmp_path / "runs").exists()
