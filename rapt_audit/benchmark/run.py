"""Running a benchmark: its cells through the sweep machinery, and the index that says what they are.

There is one implementation of running cells: :func:`rapt_audit.pipeline.sweep.run_sweep` (in this
process, in worker processes with ``--jobs N`` or on Ray with ``--executor ray``; each under ``--time-budget``).
It checks every cell before any work, reuses the cells whose folder holds their exact run, and writes
``sweep.json`` as cells finish. What a benchmark adds is ``benchmark.json``, the index: the file's
sha256 and its text's parse (tasks, the dataset of each attack family, the service protocol, the
defenses and their grids) and every cell with what it stands for (defense, setting, seed, dataset,
attacks, cell id), which the report reads to join the cells of one setting and seed. A copy of the
file goes beside it (``benchmark.toml``), so the folder says how to run it again.
"""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Sequence

from rapt_audit.api.errors import ResultError
from rapt_audit.api.files import write_json_atomic, write_text_atomic
from rapt_audit.api.locks import hold_out_dir
from rapt_audit.api.outputs import check_out_folder, folder_exists
from rapt_audit.api.parsing import DocumentError, FloatRangeError, read_document
from rapt_audit.benchmark.plan import BenchCell, estimate_costs, not_applicable_reason
from rapt_audit.benchmark.spec import Benchmark, set_text, shipped_dir
from rapt_audit.pipeline import runner as audit_runner
from rapt_audit.pipeline.cache_ledger import in_use, recording
from rapt_audit.pipeline.config import RunConfig
from rapt_audit.pipeline.estimates import write_evidence
from rapt_audit.pipeline.results import RunResult
from rapt_audit.pipeline.sweep import SWEEP_INDEX, Axis, Cell, Executor, run_sweep

INDEX_FILE = "benchmark.json"
INDEX_SCHEMA = "rapt-audit/benchmark/1"
COPY_FILE = "benchmark.toml"
Log = Callable[[str], None]


def default_out(bench: Benchmark) -> Path:
    """``runs/benchmark-NAME``: where a benchmark run without ``--out`` writes."""
    return Path("runs") / f"benchmark-{bench.name}"


def file_label(path: Path) -> str:
    """How the index names the file: ``benchmarks/NAME.toml`` for a shipped one (wherever the package is
    installed), else the path relative to the working folder when it lies below it."""
    resolved = Path(path).resolve()
    if resolved.parent == shipped_dir().resolve():
        return f"benchmarks/{resolved.name}"
    try:
        return str(resolved.relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(resolved)


def index_document(bench: Benchmark, cells: Sequence[BenchCell]) -> dict[str, Any]:
    """The index of a benchmark's output folder (see the module docstring)."""
    return {"schema": INDEX_SCHEMA, "name": bench.name, "file": file_label(bench.path), "file_sha256": bench.sha256,
            "written_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "description": bench.description, "profile": bench.profile, "model": bench.model,
            **({"service_model": bench.service_model} if bench.service_model else {}),
            "seeds": list(bench.seeds), "service": {k: set_text(v) for k, v in bench.service},
            "service_text": bench.service_text, "tasks": list(bench.tasks), "datasets": dict(bench.datasets),
            "family_attacks": {f: list(a) for f, a in bench.family_attacks.items()},
            "not_run": {f: list(a) for f, a in bench.not_run.items()},
            # Values as --set text: JSON has no infinity, and the text is what the cells ran with.
            "defenses": {d.name: {"service": {k: set_text(v) for k, v in d.service},
                                  "fixed": {k: set_text(v) for k, v in d.fixed},
                                  "grid": {k: [set_text(x) for x in v] for k, v in d.grid}} for d in bench.defenses},
            "sweep": SWEEP_INDEX, "cells": [c.to_index() for c in cells]}


def read_index(out: str | Path) -> dict[str, Any]:
    """The index of a benchmark's output folder.

    Raises:
        ResultError: when the folder holds no benchmark index, or an unreadable one.
    """
    path = Path(out) / INDEX_FILE
    if not path.is_file():
        raise ResultError(f"{out} holds no {INDEX_FILE}: it is not the output of rapt-audit benchmark run "
                          "(run one with: rapt-audit benchmark run NAME --out DIR)")
    try:
        doc = read_document(path, source=str(path), fmt="json")[1]
    except DocumentError as exc:  # not a regular file, not JSON, nested too deep
        raise ResultError(f"{exc}; run the benchmark again to rewrite it") from None
    except FloatRangeError as exc:  # a number too large for a float, at its line
        raise ResultError(f"{path}: {exc}; run the benchmark again to rewrite it") from None
    if not isinstance(doc, dict) or doc.get("schema") != INDEX_SCHEMA or not isinstance(doc.get("cells"), list):
        raise ResultError(f"{path} is not a benchmark index of schema {INDEX_SCHEMA!r}; run the benchmark again "
                          "with this rapt-audit to rewrite it")
    problem = _index_problem(doc)
    if problem:
        raise ResultError(f"{path} is malformed ({problem}); it was not written by rapt-audit benchmark run or was "
                          "edited: run the benchmark again into a new folder to rewrite it")
    return doc


#: The index's fields the report reads, with their types (a cell's: :data:`_CELL_FIELDS`).
_INDEX_FIELDS = {"name": str, "file": str, "profile": str, "model": str, "seeds": list, "tasks": list,
                 "datasets": dict, "family_attacks": dict}
_CELL_FIELDS = {"name": str, "defense": str, "setting": dict, "seed": int, "dataset": str, "cell_id": str,
                "attacks": list}


def _index_problem(doc: dict[str, Any]) -> str | None:
    """What is wrong with a parsed index's shape (a missing or mistyped field, a cell name that is a path)."""
    for key, kind in _INDEX_FIELDS.items():
        if not isinstance(doc.get(key), kind):
            return f"{key!r} is missing or not a {kind.__name__}"
    for key in ("not_run", "defenses"):
        if not isinstance(doc.get(key, {}), dict):
            return f"{key!r} is not a dict"
    for i, cell in enumerate(doc["cells"]):
        if not isinstance(cell, dict):
            return f"cell {i} is not an object"
        for key, kind in _CELL_FIELDS.items():
            if not isinstance(cell.get(key), kind) or (kind is int and isinstance(cell.get(key), bool)):
                return f"cell {i}: {key!r} is missing or not a {kind.__name__}"
        name = cell["name"]
        if name in ("", ".", "..") or "/" in name or "\\" in name or "\0" in name:
            return f"cell {i}: name {name!r} is not a folder name"
    return None


#: What makes a folder a benchmark's output (``run_sweep``'s ``own_index``): the index, by its schema.
OWN_INDEX = (INDEX_FILE, INDEX_SCHEMA, "benchmark")


def check_benchmark_dir(out: str | Path) -> None:
    """The output rule for ``benchmark run --out``: a new or empty folder, or one holding our own
    ``benchmark.json`` (its schema checked), else refused naming what is there: the run rewrites
    ``index.html``, ``leaderboard.md``, ``claims.md``, ``sweep.json`` and ``figures/`` in it."""
    if check_out_folder(out, name="--out", index=INDEX_FILE, schema=INDEX_SCHEMA, what="benchmark"):
        folder_exists(Path(out) / "figures", name="the figures folder")  # the report's, after every cell


def axes_of(cells: Sequence[BenchCell]) -> list[Axis]:
    """What ``sweep.json`` records as the sweep's axes: the defenses, seeds and datasets of the cells."""
    return [Axis("defense", tuple(dict.fromkeys(c.defense for c in cells))),
            Axis("seed", tuple(dict.fromkeys(str(c.seed) for c in cells))),
            Axis("dataset", tuple(dict.fromkeys(c.dataset for c in cells)))]


def skipped_attacks(cells: Sequence[BenchCell]) -> list[str]:
    """One line per defense naming the attacks its cells skip because they cannot read its release, with why (each
    result records the skip; this says it once for the whole run)."""
    lines = []
    for defense in dict.fromkeys(c.defense for c in cells):
        attacks = dict.fromkeys(a for c in cells if c.defense == defense for a in c.attacks)
        why = {a: reason for a in attacks if (reason := not_applicable_reason(defense, a)) is not None}
        if why:
            lines.append(f"{defense}'s cells skip {len(why)} attack(s) that cannot read its release (each result "
                         f"records the skip): " + "; ".join(f"{a}: {reason}" for a, reason in why.items()))
    return lines


def _recorded_run(config: RunConfig, **kwargs: object) -> RunResult:
    """A cell run in this process, what it stores in the cache recorded in the cache's ledger (as a worker's is)."""
    with recording(config):
        return audit_runner.run(config, **kwargs)


def run_benchmark(bench: Benchmark, cells: Sequence[BenchCell], *, out: Path, log: Log | None = None,
                  progress: bool = False, executor: Executor | None = None,
                  time_budget: float | None = None,
                  indexed: Sequence[BenchCell] | None = None,
                  prepare: Callable[[], object] | None = None,
                  published: Sequence[tuple[str, str, str, RunResult]] = ()) -> list[tuple[Cell, RunResult]]:
    """Write the index and run every cell that is not finished; return each finished cell's result.

    ``indexed``: every cell of the file, when ``cells`` is only some of them (``--cell``, ``--add``): the index
    always lists the whole file, so the folder's report is never a partial benchmark's. ``prepare``: called
    once the index is written, under the folder's lock, before any cell (``--add`` copies the published cells);
    ``published``: their results, already read, for the estimates (``(name, defense, dataset, result)``).
    The estimator's evidence (:func:`~rapt_audit.benchmark.plan.estimate_costs`, what the dry run showed) is
    written into the folder for the sweep's loops (:data:`~rapt_audit.pipeline.estimates.ESTIMATES_FILE`), and
    what each cell stores in the cache is recorded in the cache's ledger (:mod:`~rapt_audit.pipeline.cache_ledger`).

    The output folder's lock is held from the index's write to the last cell (a second command on it
    fails at once). A file changed since the folder's last run is said so; its finished cells that
    still match a cell exactly are reused.

    Raises:
        UsageError: when ``out`` is not new or empty and holds no benchmark index of ours
            (:func:`check_benchmark_dir`): nothing is written.
        CellsFailed, BudgetSpent, KeyboardInterrupt: as :func:`rapt_audit.pipeline.sweep.run_sweep`
            (finished cells are kept and a rerun goes on).
    """
    say = log or (lambda _msg: None)
    check_benchmark_dir(out)
    with hold_out_dir(out):
        previous = None
        try:
            previous = read_index(out).get("file_sha256")
        except ResultError:
            pass
        if previous is not None and previous != bench.sha256:
            say(f"{bench.path} changed since {out} was last run (sha256 {previous[:12]} → {bench.sha256[:12]}); "
                "finished cells that match a cell of the file exactly are reused")
        write_text_atomic(out / COPY_FILE, bench.text)
        write_json_atomic(out / INDEX_FILE, index_document(bench, cells if indexed is None else indexed))
        if prepare is not None:
            prepare()
        names = {c.name for c in cells}
        others = [c for c in indexed or () if c.name not in names]
        write_evidence(out, estimate_costs(cells, bench, indexed=others, published=published)[1])
        for line in skipped_attacks(cells):
            say(line)
        with in_use():  # between cells too: cache prune waits for the run's end (cache_ledger)
            return run_sweep([c.cell for c in cells], out=out, axes=axes_of(cells), log=log, progress=progress,
                             executor=executor, time_budget=time_budget, own_index=OWN_INDEX,
                             runner=_recorded_run if executor is None else None)


__all__ = ["COPY_FILE", "INDEX_FILE", "INDEX_SCHEMA", "OWN_INDEX", "axes_of", "check_benchmark_dir", "default_out",
           "file_label", "index_document", "read_index", "run_benchmark", "skipped_attacks"]
