"""Every command the documentation shows is run here, so the documentation cannot drift from the code.

The commands are parsed out of the fenced ``bash`` blocks of README.md and of every page of ``docs/`` (``PAGES``;
the two plugin guides' commands need their example plugins installed: ``tests/test_plugin_examples.py`` installs
and runs those, and the defense guide's leaderboard walk-through runs here, as written, in order) and out of the
``--help`` text of
``rapt-audit`` and each sub-command (every line that starts with ``rapt-audit``); nothing is listed
by hand. Each one runs in an empty working directory, in process, through the console script's own
entry point (``rapt_audit.cli:main``):

* ``run`` (and ``run --sweep``) with ``--dry-run`` appended: every check a run makes before it
  starts, without the minutes of work. Under ``-m slow`` each one also runs for real at the smoke
  profile on a few records.
* ``report``, ``leaderboard``, ``check`` and ``ls`` for real, on stored results built at the
  documented paths (``FIXTURES``).
* ``calibrate`` for real at the smoke profile (it loads the model).
* ``privatize`` for real, on small input files written at the documented paths.

Commands documented for a real dataset are skipped, with the reason, when ``RAPT_AUDIT_DATA`` does
not name a data directory (CI sets it). The other lines of the documented shell blocks (the bootstrap
script, the test commands, ``export``) are checked, not executed. Code paths the docs name must exist, and so
must the pages and headings their links point to.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import importlib.metadata
import importlib.util
import os
import re
import shlex
import shutil
import stat
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest

from rapt_audit.api.plugins import DEFENSES, load
from rapt_audit.benchmark.run import read_index
from rapt_audit.benchmark.verify import matches
from rapt_audit.cli.main import build_parser, main
from rapt_audit.data import DATA_ENV
from rapt_audit.pipeline.results import write_result
from rapt_audit.reporting.check import read_baseline
from rapt_audit.benchmark.validate import load_benchmark, public_corpora
from tests.result_factory import benchmark_folder, submission_folder, t2t_sweep

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
DOCS_DIR = REPO / "docs"
#: The guides whose commands need their example plugins installed (see the module docstring).
GUIDES = ("writing-a-defense.md", "writing-an-attack.md")
#: The pages whose bash blocks are run here: the README and every page of docs/ but the guides.
PAGES = [README, *sorted(p for p in DOCS_DIR.glob("*.md") if p.name not in GUIDES)]
#: The page of the Tests section: CI's slow-test command and the slow tests that stay out of it, with why.
TESTS_PAGE = DOCS_DIR / "tests-and-ci.md"
TESTS_SECTION = "## What CI runs"
PROGRAM = "rapt-audit"
VENV_PROGRAM = ".venv/bin/rapt-audit"
TEST_COMMAND = ".venv/bin/python -m pytest"
SLOW_COMMAND = f"{TEST_COMMAND} -n 0 -m slow "


def _ci_gate(path: Path) -> None:
    """``runs/ci-gate``: the runs the committed baseline was recorded from, where CI writes them."""
    for result in read_baseline(REPO / "baselines" / "ci-smoke.json"):
        write_result(result, path / Path(result.config["out"]).name)


#: The stored inputs that documented report commands read: documented path → how to build it in the
#: test's working directory. These are the only changes made to a documented command's world.
FIXTURES: dict[str, Callable[[Path], object]] = {
    "runs/t2t-eta": t2t_sweep,  # the documented η sweep of t2t, as result files (invented numbers)
    "runs/ci-gate": _ci_gate,
    "runs/bench-smoke": benchmark_folder,  # the smoke benchmark's folder, every cell finished (invented numbers)
    "runs/submission": submission_folder,  # a contributor's copy of it with t2t at η = 50 added (benchmark verify)
    "baselines/ci-smoke.json": lambda path: shutil.copyfile(REPO / "baselines" / "ci-smoke.json", path),
    # The user's own input files of the documented privatize commands.
    "notes.txt": lambda path: path.write_text("My landlord John raised the rent.\nI see my doctor on Friday.\n",
                                              encoding="utf-8"),
    "reviews.jsonl": lambda path: path.write_text('{"id": 1, "body": "Great food, rude staff in Leeds."}\n',
                                                  encoding="utf-8"),
    "reviews.csv": lambda path: path.write_text('id,review\n1,"Great food, rude staff in Leeds."\n', encoding="utf-8"),
    # The user's own dataset of the documented `run --dataset my_reviews.csv` (enough rows for real smoke splits).
    "my_reviews.csv": lambda path: path.write_text("review,stars,gender,age\n" + "".join(
        f'"Order {i} from the {("Leeds", "York")[i % 2]} shop was {("slow", "great")[i % 2]}.",{i % 2 + 1},'
        f'{("female", "male")[i % 3 == 0]},{20 + i % 50}\n' for i in range(200)), encoding="utf-8"),
}

#: What is appended to documented commands to keep them cheap (argparse and --set: the last value wins).
DRY_RUN = ["--dry-run"]
CALIBRATE_COST = ["--profile", "smoke"]
AUDIT_COST = ["--samples", "500"]  # the documented 2,000 releases per input took 6 s; the audit has its own tests
SMOKE_RUN = ["--profile", "smoke", "--quiet", "--set", "data.victim_train=60", "--set", "data.victim_test=40",
             "--set", "data.attacker_train=60", "--set", "data.attacker_valid=30"]


@dataclass(frozen=True)
class DocLine:
    """One step of a documented shell line (``a && b`` gives two), with where it was documented."""

    source: str
    argv: tuple[str, ...]
    line: int = 0
    also: tuple[str, ...] = ()  # other places that document the same command

    @property
    def label(self) -> str:
        """``docs/quick-start.md: rapt-audit ls datasets``: the test id (no line number, so ids stay stable)."""
        return f"{self.source}: {shlex.join(self.argv)}"

    @property
    def where(self) -> str:
        here = f"{self.source}:{self.line}" if self.line else self.source
        return ", ".join((here, *self.also))


def _page_steps(page: Path) -> list[DocLine]:
    """Each ``&&``-separated step of each line of ``page``'s fenced bash blocks (comments dropped)."""
    steps, fence, source = [], None, page.relative_to(REPO).as_posix()
    for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
        if line.startswith("```"):
            fence = None if fence is not None else line[3:].strip()
            continue
        if fence != "bash" or not line.strip():
            continue
        tokens, step = shlex.split(line, comments=True), []
        for token in tokens + ["&&"]:
            if token == "&&":
                steps.append(DocLine(source, tuple(step), number))
                step = []
            else:
                step.append(token)
    return steps


def _help_commands() -> list[DocLine]:
    """Every line of the ``--help`` texts (description and epilog) that starts with ``rapt-audit``."""
    parser = build_parser()
    parsers = {PROGRAM: parser}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            parsers.update({f"{PROGRAM} {name}": sub for name, sub in action.choices.items()})
    found = []
    for where, p in parsers.items():
        for line in f"{p.description or ''}\n{p.epilog or ''}".splitlines():
            if line.strip().startswith(PROGRAM + " "):
                found.append(DocLine(f"{where} --help", tuple(shlex.split(line, comments=True))))
    return found


def _is_program(step: DocLine) -> bool:
    return bool(step.argv) and step.argv[0] in (PROGRAM, VENV_PROGRAM)


def _once(steps: list[DocLine]) -> list[DocLine]:
    """Each command once, whichever program path it is written with: a page and a ``--help`` text often
    document the same line, and running it twice checks nothing more (a failure names every place)."""
    first: dict[tuple[str, ...], DocLine] = {}
    for step in steps:
        key = step.argv[1:]
        first[key] = dataclasses.replace(first[key], also=(*first[key].also, step.where)) if key in first else step
    return list(first.values())


ALL_STEPS = [step for page in PAGES for step in _page_steps(page)] + _help_commands()
COMMANDS = _once([s for s in ALL_STEPS if _is_program(s)])
OTHER_STEPS = [s for s in ALL_STEPS if not _is_program(s)]
# The documented runs, once each for the real-run test (the pages and --help share some; a documented
# dry run is the same run without --dry-run).
_runs: dict[tuple[str, ...], DocLine] = {}
for _c in COMMANDS:
    if _c.argv[1] == "run":
        _runs.setdefault(tuple(a for a in _c.argv[1:] if a != "--dry-run"), _c)
RUNS = list(_runs.values())


def _params(steps: list[DocLine], marks: Callable[[DocLine], tuple] = lambda _s: ()) -> list:
    seen: dict[str, int] = {}
    out = []
    for step in steps:
        seen[step.label] = seen.get(step.label, 0) + 1
        ident = step.label if seen[step.label] == 1 else f"{step.label} #{seen[step.label]}"
        out.append(pytest.param(step, id=ident, marks=marks(step)))
    return out


def _slow_marks(step: DocLine) -> tuple:
    # Plausible deniability privatizes every sampled token a hundred times (about 20 s on 2 cores).
    return (pytest.mark.slow,) if step.argv[1] == "calibrate" and "--deniability" in step.argv else ()


# The documented pct2t commands find PCT2T's lexicon built, as on a machine that has run once (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("session_cache_with_lexicon")


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty working directory, so documented relative paths (``runs/...``) land in tmp."""
    work = tmp_path / "cwd"
    work.mkdir()
    monkeypatch.chdir(work)
    value = os.environ.get(DATA_ENV)
    if value and not Path(value).is_dir():
        monkeypatch.delenv(DATA_ENV)
    return work


def _needs_real_data(argv: tuple[str, ...]) -> str | None:
    """The real dataset a documented run names, or None when it runs on what is there."""
    args = build_parser().parse_args(list(argv[1:]))
    named = [getattr(args, "dataset", None)]
    named += [s.partition("=")[2] for s in getattr(args, "sets", []) if s.startswith("dataset=")]
    named += [v for s in getattr(args, "sweeps", []) if s.startswith("dataset=") for v in s[8:].split(",")]
    if getattr(args, "benchmark_command", None) == "run":  # the datasets its file names, and its defenses read
        bench = load_benchmark(args.benchmark, check_data=False)
        named += [*bench.tasks, *bench.datasets.values(), *(corpus for _, corpus in public_corpora(bench))]
    # The synthetic corpus and the user's own files built as FIXTURES run anywhere.
    real = [n for n in named if n and n != "synthetic" and n not in FIXTURES]
    if (real or getattr(args, "data_dir", None)) and not os.environ.get(DATA_ENV):
        return f"documented for real data ({', '.join(real) or '--data-dir'}); set {DATA_ENV} to the data directory"
    return None


def _main(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _build_fixtures(argv: tuple[str, ...], work: Path, *, inputs_of_run: bool = False) -> None:
    """Build the fixtures a documented command names; for ``run``, only its ``--dataset`` file (its
    ``--out`` must stay as the user would find it: empty)."""
    if inputs_of_run:
        argv = tuple(v for flag, v in zip(argv, argv[1:]) if flag == "--dataset")
    for documented, build in FIXTURES.items():
        if documented in argv:
            (work / documented).parent.mkdir(parents=True, exist_ok=True)
            build(work / documented)


def test_the_documentation_shows_commands():
    """The parsers found what the docs hold (guards against a parser that silently finds nothing, and a page
    whose commands were dropped or moved out of the pages read here)."""
    assert {c.argv[1] for c in COMMANDS} >= {"run", "calibrate", "report", "leaderboard", "check", "ls", "privatize",
                                             "audit", "bundle", "benchmark", "plugin"}
    assert any(c.source.startswith(f"{PROGRAM} run --help") for c in ALL_STEPS if _is_program(c))
    assert any("--dry-run" in c.argv for c in COMMANDS if c.source.endswith(".md"))
    sources = {s.source for s in ALL_STEPS}  # every place a step was found, commands or not
    pages = {"README.md", *(f"docs/{name}" for name in ("quick-start.md", "defenses.md", "sweeps.md",
                                                         "benchmarks.md", "gpu.md", "plugins.md", "tests-and-ci.md"))}
    assert pages <= sources, f"no documented command found on {sorted(pages - sources)}"


def test_documented_program_is_the_entry_point_tested_here():
    """``rapt-audit`` in the docs is the installed console script whose entry point these tests call."""
    scripts = importlib.metadata.entry_points(group="console_scripts", name=PROGRAM)
    assert [s.value for s in scripts] == ["rapt_audit.cli:main"]


@pytest.mark.parametrize("step", _params(OTHER_STEPS))
def test_documented_setup_step(step: DocLine):
    """Setup lines are checked, not executed (the bootstrap builds .venv; pytest is this very suite)."""
    argv = step.argv
    if argv == ("scripts/bootstrap",):
        mode = (REPO / "scripts" / "bootstrap").stat().st_mode
        assert mode & stat.S_IXUSR, "scripts/bootstrap must be executable"
    elif shlex.join(argv) == TEST_COMMAND:
        ci = (REPO / ".ci" / "run").read_text(encoding="utf-8").splitlines()
        assert step.source == "README.md", f"{step.where}: the test command is the README's, documented once"
        assert f"scripts/bootstrap && {TEST_COMMAND}" in ci, "the README's test command must be the one CI runs"
    elif shlex.join(argv).startswith(SLOW_COMMAND):
        ci = (REPO / ".ci" / "run").read_text(encoding="utf-8").splitlines()
        assert shlex.join(argv) in ci, f"{step.where}: the slow-test command must be the one CI runs, on one line"
    elif argv[0] == "export":
        assert [a.partition("=")[0] for a in argv[1:]] == [DATA_ENV], f"{step.where} exports a variable the code does not read"
    else:
        pytest.fail(f"{step.where}: {shlex.join(argv)}: no rule for this documented command; "
                    "add one to tests/test_docs_commands.py")


def test_every_slow_test_runs_in_ci_or_the_docs_say_why_not():
    """A file with ``slow`` tests is on CI's slow-test command (the one ``docs/tests-and-ci.md`` documents), or that
    page's section "What CI runs" names each of its slow tests that stays out, with the reason."""
    (slow,) = [s for s in OTHER_STEPS if shlex.join(s.argv).startswith(SLOW_COMMAND)]
    text = TESTS_PAGE.read_text(encoding="utf-8")
    start = text.index(TESTS_SECTION)
    end = text.find("\n## ", start + 1)
    tests_section = text[start:end if end >= 0 else len(text)]
    assert shlex.join(slow.argv) in tests_section, f"CI's slow-test command is documented in {slow.where}, not there"
    in_ci = {a for a in slow.argv if a.startswith("tests/")}
    assert all((REPO / a).is_file() for a in in_ci), in_ci
    for path in sorted((REPO / "tests").rglob("test_*.py")):
        relative = path.relative_to(REPO).as_posix()
        source = path.read_text(encoding="utf-8")
        if "mark.slow" not in source or relative in in_ci:
            continue
        slow_tests = re.findall(r"@pytest\.mark\.slow\b[^\n]*\n(?:@[^\n]*\n)*def (test_\w+)", source)
        assert slow_tests, (f"{relative} marks tests slow in a way this check cannot read; name them in "
                            f"{TESTS_PAGE.relative_to(REPO)}")
        for name in slow_tests:
            assert f"{relative}::{name}" in tests_section, (
                f"{relative}::{name} is slow but not on CI's slow command; add its file there or say in "
                f"{TESTS_PAGE.relative_to(REPO)}, \"What CI runs\", why it stays out")


@pytest.mark.parametrize("command", _params(COMMANDS, _slow_marks))
def test_documented_command_runs(command: DocLine, workdir: Path, capsys: pytest.CaptureFixture[str],
                                 monkeypatch: pytest.MonkeyPatch):
    """Each documented command exits 0: ``run`` as a dry run (nothing written), the others for real."""
    name, argv = command.argv[1], list(command.argv[1:])
    if name == "run":
        reason = _needs_real_data(command.argv)
        if reason:
            pytest.skip(reason)
        _build_fixtures(command.argv, workdir, inputs_of_run=True)
        before = sorted(workdir.rglob("*"))
        code, out, err = _main(argv + DRY_RUN, capsys)
        assert code == 0, f"{command.where}: {shlex.join(argv)} --dry-run exited {code}: {err}"
        assert "nothing was run or written" in out
        assert sorted(workdir.rglob("*")) == before, "a dry run must write nothing"
        return
    if name == "benchmark" and argv[1] == "run":  # minutes of cells: its dry run lists each cell and its cost
        reason = _needs_real_data(command.argv)
        if reason:
            pytest.skip(reason)
        code, out, err = _main(argv + ([] if "--dry-run" in argv else DRY_RUN), capsys)
        assert code == 0, f"{command.where}: {shlex.join(argv)} --dry-run exited {code}: {err or out}"
        assert "nothing was run or written" in out and list(workdir.iterdir()) == [], "a dry run must write nothing"
        return
    if name == "bundle":  # a real pack downloads wheels and compresses for minutes: its dry run checks all
        cut = argv.index("--") if "--" in argv else len(argv)
        reason = _needs_real_data((PROGRAM, *argv[cut + 1:])) if cut + 1 < len(argv) else None
        if reason:
            pytest.skip(reason)
        argv = argv[:cut] + (["--dry-run"] if "--dry-run" not in argv[:cut] else []) + argv[cut:]
        code, out, err = _main(argv, capsys)
        assert code == 0, f"{command.where}: {shlex.join(argv)} exited {code}: {err or out}"
        assert list(workdir.iterdir()) == [], "a dry run must write nothing"
        return
    if name == "cache":  # a cache of its own, empty: ls lists nothing; prune (as a dry run) selects what is recorded
        monkeypatch.setenv("RAPT_AUDIT_CACHE", str(workdir / "cache"))
        argv += DRY_RUN if argv[1] == "prune" and "--dry-run" not in argv else []
        code, out, err = _main(argv, capsys)
        # An example naming a benchmark selects what its cells recorded: on an empty cache, the message that none did.
        nothing = code == 2 and "no cache entry was recorded for it" in err and "--benchmark" in argv
        assert code == 0 or nothing, f"{command.where}: {shlex.join(argv)} exited {code}: {err or out}"
        return
    _build_fixtures(command.argv, workdir)
    if name == "calibrate":
        from rapt_audit.data import public

        argv += CALIBRATE_COST
        # A quarter of the smoke profile's calibration sentences: each η of the documented list privatizes them all.
        monkeypatch.setitem(public.CALIBRATION_SENTENCES, "smoke", public.CALIBRATION_SENTENCES["smoke"] // 4)
    if name == "audit":
        argv += AUDIT_COST
    code, out, err = _main(argv, capsys)
    assert code == 0, f"{command.where}: {shlex.join(argv)} exited {code}: {err or out}"


@pytest.mark.slow
@pytest.mark.parametrize("command", _params(RUNS))
def test_documented_run_runs_for_real(command: DocLine, workdir: Path, capsys: pytest.CaptureFixture[str]):
    """Each documented ``run`` for real, at the smoke profile on a few records."""
    reason = _needs_real_data(command.argv)
    if reason:
        pytest.skip(reason)
    argv = [a for a in command.argv[1:] if a != "--dry-run"] + SMOKE_RUN
    _build_fixtures(command.argv, workdir, inputs_of_run=True)
    code, _out, err = _main(argv, capsys)
    assert code == 0, f"{command.where}: {shlex.join(argv)} exited {code}: {err}"
    assert list(workdir.rglob("result.json")), "a run writes its result"


# Paths into the code (`rapt_audit/utility/customize.py`, `scripts/bootstrap`, `defenses/`) and dotted
# module names (`rapt_audit.attacks.whitebox.undo_norm_clipping`), wherever they appear in the text.
_CODE_PATH = re.compile(r"(?<![\w./-])((?:rapt_audit|scripts|attacks|defenses)/[\w./-]*)")
_MODULE = re.compile(r"(?<![\w./-])(rapt_audit(?:\.\w+)+)")
DOCS = [README, REPO / "leaderboard.md", *sorted((REPO / "reports").rglob("*.md")), *sorted(DOCS_DIR.rglob("*.md"))]


def _missing_module(dotted: str) -> bool:
    """Whether ``a.b.c`` names neither a module nor an attribute of the longest importable prefix."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for attr in parts[cut:]:
            obj = getattr(obj, attr, None)
        return obj is None
    return True


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_code_named_in_the_docs_exists(doc: Path):
    """Every code path and dotted module name the docs give exists, so moving code shows up here."""
    text = doc.read_text(encoding="utf-8")
    paths = [p.rstrip(".") for p in _CODE_PATH.findall(text)]
    missing = [p for p in paths if not (REPO / p).exists()]
    missing += [m for m in _MODULE.findall(text) if _missing_module(m.rstrip("."))]
    assert not missing, f"{doc.relative_to(REPO)} names code that does not exist: {sorted(set(missing))}"
    if doc == DOCS_DIR / "defenses.md":
        assert "rapt_audit/utility/selection.py" in paths, "the path pattern no longer finds the pages' paths"


# Links between the pages: `[text](page.md#heading)`, outside code blocks; web addresses are not followed.
_LINK = re.compile(r"\[[^\]\n]*\]\(([^)\s]+)\)")
LINKED = [README, REPO / "ARCHITECTURE.md", *sorted(DOCS_DIR.glob("*.md"))]


def _prose_lines(text: str) -> list[str]:
    """The lines of a Markdown text outside its fenced code blocks."""
    lines, fenced = [], False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced:
            lines.append(line)
    return lines


def _anchors(page: Path) -> set[str]:
    """The anchors a Markdown renderer (GitHub's rule) gives the headings of ``page``: lower case, punctuation
    but ``-`` and ``_`` dropped, spaces as dashes, a repeated heading numbered."""
    anchors, count = set(), {}
    for line in _prose_lines(page.read_text(encoding="utf-8")):
        if re.match(r"#{1,6} ", line):
            slug = re.sub(r"[^\w\- ]", "", line.lstrip("#").strip().lower()).replace(" ", "-")
            count[slug] = count.get(slug, 0) + 1
            anchors.add(slug if count[slug] == 1 else f"{slug}-{count[slug] - 1}")
    return anchors


@pytest.mark.parametrize("page", LINKED, ids=lambda p: str(p.relative_to(REPO)))
def test_links_between_the_pages_resolve(page: Path):
    """Every relative link of the README, ARCHITECTURE.md and the docs names a file that exists and, with
    ``#anchor``, a heading of it: moving a section between pages shows up here."""
    broken = []
    for line in _prose_lines(page.read_text(encoding="utf-8")):
        for target in _LINK.findall(line):
            if re.match(r"[a-z]+:", target):  # https:, mailto:
                continue
            path, _, anchor = target.partition("#")
            linked = (page.parent / path).resolve() if path else page
            if not linked.exists():
                broken.append(f"{target} (no {path})")
            elif anchor and linked.suffix == ".md" and anchor not in _anchors(linked):
                broken.append(f"{target} (no heading #{anchor} in {linked.relative_to(REPO)})")
    assert not broken, f"{page.relative_to(REPO)} links to what is not there: {broken}"


def test_the_readme_stays_a_first_screen():
    """The README says what the tool is, the two commands, the results and where to go next; the manual is in docs/
    (issue 64: at most 12 KB), and it links every page there."""
    text = README.read_text(encoding="utf-8")
    assert len(text.encode("utf-8")) <= 12 * 1024, f"README.md is {len(text.encode('utf-8'))} bytes; move the detail into docs/"
    assert [line for line in text.splitlines() if line.startswith("## ")] == [
        "## The two commands", "## Results", "## Where to go next"]
    unlinked = [p.name for p in sorted(DOCS_DIR.glob("*.md")) if p.name != "README.md" and f"docs/{p.name}" not in text]
    index = (DOCS_DIR / "README.md").read_text(encoding="utf-8")
    unindexed = [p.name for p in sorted(DOCS_DIR.glob("*.md")) if p.name != "README.md" and f"({p.name})" not in index]
    assert not unlinked and not unindexed, f"pages the README does not link: {unlinked}; docs/README.md: {unindexed}"


# The defense guide's leaderboard walk-through, run as written and in order (its commands depend on each other).
WALK_GUIDE = DOCS_DIR / "writing-a-defense.md"
WALK_HEADING = "## 7. Put your defense on the leaderboard"
WALK_PLUGIN = REPO / "examples" / "word-drop-defense"
#: The published benchmark the walk adds to, built at ``reports/sst2-cpu`` as a checkout holds the real one (whose
#: code digest this checkout need not have): sst2-cpu's datasets for the families its two cheapest attacks read,
#: SST-2 for the task and inversion and Trustpilot for attribute inference, on a few records at the smoke profile.
#: So an added setting and seed match a cell on each dataset, as on the real grid, and ``dataset=`` picks one.
WALK_PUBLISHED = """\
name = "sst2-cpu"
profile = "smoke"
seeds = [0]
attacks = ["random_guess", "attribute_gender"]

[datasets]
utility = "sst2"
inversion = "sst2"
attribute = "trustpilot"

[splits]
victim_train = 20
victim_test = 20
attacker_train = 20
attacker_valid = 10

[defenses.identity]
"""


def _section(page: Path, heading: str) -> tuple[str, int, int]:
    """The text of ``heading``'s section of ``page`` (to the next ``## ``) and its first and last line numbers."""
    text = page.read_text(encoding="utf-8")
    start = text.index(heading)
    end = text.find("\n## ", start + 1)
    end = len(text) if end < 0 else end
    return text[start:end], text[:start].count("\n") + 1, text[:end].count("\n") + 1


@pytest.fixture
def word_drop(monkeypatch: pytest.MonkeyPatch):
    """The guide's example defense, registered as its installed entry point would register it."""
    load()
    project = tomllib.loads((WALK_PLUGIN / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    spec = importlib.util.spec_from_file_location("word_drop", WALK_PLUGIN / "word_drop.py")
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "word_drop", module)  # as an installed plugin's module is (dataclasses look it up)
    spec.loader.exec_module(module)
    DEFENSES.add("word_drop", module.WordDrop, tags=module.WordDrop.tags,
                 origin=f"{project['name']} {project['version']}")
    yield
    DEFENSES.remove("word_drop")


@pytest.mark.slow
def test_the_leaderboard_walk_runs_as_written(workdir: Path, capsys: pytest.CaptureFixture[str], word_drop):
    """The guide's section 7, exactly as printed: its additions file, then its four commands in order. The dry run
    writes nothing, the ``--cell`` command runs one cell (where its setting and seed alone match one per dataset),
    the next runs the rest and renders the report, and ``verify --sample 0`` admits every cell."""
    if not os.environ.get(DATA_ENV):
        pytest.skip(f"the walk's published benchmark reads SST-2 and Trustpilot; set {DATA_ENV} to the data directory")
    section, first, last = _section(WALK_GUIDE, WALK_HEADING)
    steps = [s for s in _page_steps(WALK_GUIDE) if first <= s.line <= last]
    assert [s.argv[1:3] for s in steps] == [("benchmark", "run")] * 3 + [("benchmark", "verify")], steps
    (workdir / "word-drop.toml").write_text(re.search(r"```toml\n(.*?)```", section, re.S).group(1), encoding="utf-8")
    (workdir / "published.toml").write_text(WALK_PUBLISHED, encoding="utf-8")
    assert main(["benchmark", "run", "published.toml", "--out", "reports/sst2-cpu", "--quiet"]) == 0
    published = {p: p.read_bytes() for p in sorted((workdir / "reports").rglob("*")) if p.is_file()}
    out = workdir / "runs" / "word-drop-bench"
    outputs, finished, boards = [], [], []
    for step in steps:
        code, stdout, err = _main(list(step.argv[1:]), capsys)
        assert code == 0, f"{step.where}: {shlex.join(step.argv)} exited {code}: {err or stdout}"
        outputs.append(stdout)
        finished.append(sorted(p.parent.name for p in out.glob("defense=word_drop*/result.json")))
        boards.append((out / "leaderboard.md").read_text(encoding="utf-8") if (out / "leaderboard.md").is_file() else "")
    assert not finished[0] and "nothing was run or written" in outputs[0]
    assert "defense=identity" not in outputs[0], "the dry run lists only the added defense's cells"
    cells = [c for c in read_index(out)["cells"] if c["defense"] == "word_drop"]
    selectors = [value for flag, value in zip(steps[1].argv, steps[1].argv[1:]) if flag == "--cell"]
    setting_and_seed = [s for s in selectors if not s.startswith("dataset=")]
    assert sum(matches(c, setting_and_seed) for c in cells) > 1, "the walk's setting and seed alone match one cell"
    assert len(finished[1]) == 1 and [c["name"] for c in cells if matches(c, selectors)] == finished[1], finished[1]
    assert "no report yet" in outputs[1] and "word_drop" not in boards[1], "no leaderboard of part of the file"
    assert finished[2] == sorted(c["name"] for c in cells)
    assert all((out / name).is_file() for name in ("index.html", "leaderboard.md", "claims.md"))
    assert "word_drop" in boards[2]
    assert "0 refused" in outputs[3] and f"{len(cells)} unchecked" in outputs[3]
    assert {p: p.read_bytes() for p in sorted((workdir / "reports").rglob("*")) if p.is_file()} == published, (
        "the published folder is never written")


def test_the_skeleton_is_installed_as_the_guides_say(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    """``plugin new`` prints, and its README says, the ``pip install`` of the plugin guides (``--no-deps``: rapt-audit
    is installed already), so a newcomer following either meets one command."""
    flags = set()
    for guide in GUIDES:
        for step in _page_steps(DOCS_DIR / guide):
            if step.argv[:2] == ("pip", "install") and "-e" in step.argv:
                flags.add(step.argv[2:step.argv.index("-e")])
    assert flags == {("--no-deps",)}, f"the guides install a plugin in more than one way: {flags}"
    (install,) = [" ".join(("pip", "install", *f, "-e")) for f in flags]
    assert main(["plugin", "new", "defense", "my_defense", "--dir", str(tmp_path)]) == 0
    assert f"{install} {tmp_path / 'my-defense'}" in capsys.readouterr().out
    readme = (tmp_path / "my-defense" / "README.md").read_text(encoding="utf-8")
    assert f"{install} ." in readme and "pip install -e" not in readme
