"""Sweeps: one run per value of a parameter (``--sweep eta=25,75,inf``), resumable.

A sweep is a grid of ordinary runs. Each cell is the base configuration with one value per swept
key applied as a ``--set`` pair, so any key ``--set`` understands can be swept (``eta``,
``replacement``, ``defense.eta``, ``seed``, ``defense``, ``attacks.whitebox.topk``...). Several
``--sweep`` options form the Cartesian product. Cell ``c`` writes ``<out>/<c.name>/result.json``
with the runner's atomic write, and a cell whose directory already holds that exact run is reused,
so an interrupted sweep resumes where it stopped and loses nothing. ``<out>/sweep.json`` indexes
the cells and is rewritten (atomically) after every cell. One process at a time: the sweep holds
the lock of ``<out>`` and each running cell that of its own directory.

With a time budget (``--time-budget SECONDS``) a sweep starts a cell only while its estimate (the sweep's
one estimator, :mod:`~rapt_audit.pipeline.estimates`: its pair's finished cells, else the best evidence) still
fits in what is left (:class:`~rapt_audit.pipeline.time_budget.TimeBudget`; with no estimate, freely), and otherwise
starts no further cell and stops with :class:`BudgetSpent`, its remaining cells pending: a machine
lent for a limited time (a batch job's wall clock, a GPU call capped at minutes) ends between cells
rather than in one, and the same command run again goes on from there. The rule is the same for
every executor: with ``--jobs N`` or on Ray the cells already running when the budget stops new
ones finish and are written first, and a cell's time is measured side by side with the others
(start to write, as the command sees it), so it is judged by what it costs there.

By default the cells run one after another in this process. An :class:`Executor` runs them
elsewhere: :class:`~rapt_audit.pipeline.ray_executor.RayExecutor` (``--executor ray``) runs each cell
as a Ray task, on this machine or a cluster, and
:class:`~rapt_audit.pipeline.local_executor.LocalExecutor` (``--jobs N``) runs N at once in worker
processes on this machine, each with its share of the cores; both write what the workers return
here (:mod:`~rapt_audit.pipeline.cell_driver`). All check every cell first and reuse finished ones
in the same way.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
import time
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Mapping, Protocol, Sequence

from rapt_audit.api.errors import RaptAuditError, UsageError
from rapt_audit.api.files import remove_stray_temps, write_json_atomic
from rapt_audit.api.locks import hold_out_dir
from rapt_audit.api.outputs import check_out_folder
from rapt_audit.api.parsing import repeated
from rapt_audit.pipeline import runner as audit_runner
from rapt_audit.pipeline.cell_limit import check_cell_count, count_cells
from rapt_audit.pipeline.config import RunConfig, build_config, repeated_settings
from rapt_audit.pipeline.results import RESULT_FILE, RunResult
from rapt_audit.pipeline.time_budget import TimeBudget

SWEEP_SCHEMA = "rapt-audit/sweep/1"
SWEEP_INDEX = "sweep.json"
Log = Callable[[str], None]


@dataclass(frozen=True)
class Axis:
    """One swept key and its values, in the order given."""

    key: str
    values: tuple[str, ...]


@dataclass(frozen=True)
class Cell:
    """One point of the sweep grid: its ``--set`` pairs, directory name and configuration.

    ``expected_s``: the seconds the cell is expected to take, where the caller has an estimate (a
    benchmark's, from ``costs.toml`` and its finished cells); the progress line's time left then sums
    the estimates of what is left instead of multiplying the mean of the cells so far, which a grid
    whose first cells are its cheapest reads as minutes for hours of work.
    """

    assignments: tuple[tuple[str, str], ...]
    name: str
    config: RunConfig
    expected_s: float | None = None

    @property
    def label(self) -> str:
        """``eta=25, seed=1``: how the cell is named in messages."""
        return ", ".join(f"{k}={v}" for k, v in self.assignments)


def parse_axis(spec: str) -> Axis:
    """Parse one ``--sweep KEY=V1,V2,...`` option.

    Raises:
        UsageError: on a missing ``=``, an empty key, no values or a repeated value.
    """
    key, sep, values = spec.partition("=")
    key = key.strip()
    items = tuple(v.strip() for v in values.split(",") if v.strip())
    if not sep or not key or not items:
        raise UsageError(f"--sweep expects KEY=V1,V2,... (for example eta=25,75,inf), got {spec!r}")
    if key in {"out", "force", "device", "data_dir"}:
        raise UsageError(f"--sweep {key}=... does not change the result; sweep a parameter such as eta, "
                         "replacement, seed or defense")
    twice = repeated(items)  # one pass: a long list of values is checked in linear time
    if twice:
        raise UsageError(f"--sweep {key} lists {', '.join(sorted(twice))} more than once")
    return Axis(key, items)


def parse_axes(specs: Sequence[str]) -> list[Axis]:
    """Parse every ``--sweep`` option; the same key may not be swept twice."""
    axes = [parse_axis(s) for s in specs]
    twice = sorted(repeated(a.key for a in axes))
    if twice:
        raise UsageError(f"--sweep {', '.join(twice)} is given more than once; list all its values in one option")
    return axes


_UNSAFE = re.compile(r"[^A-Za-z0-9.=+_-]+")
#: The longest cell folder name (a file name may have 255 bytes; a benchmark adds a suffix).
MAX_NAME = 120


def cell_name(assignments: Sequence[tuple[str, str]]) -> str:
    """A stable directory name for a cell: ``eta=25`` or ``defense=t2t_eta=inf``.

    Characters that are unsafe in file names (a model path's ``/``, spaces) become ``-``; a short
    hash is appended whenever that happens, so two different values never share a directory. A name
    longer than :data:`MAX_NAME` characters is cut there (with the hash), within every file system's limit.
    """
    raw = "_".join(f"{k}={v}" for k, v in assignments)
    safe = _UNSAFE.sub("-", raw).strip("-.") or "cell"
    if safe != raw or len(safe) > MAX_NAME:
        safe = safe[:MAX_NAME - 7].rstrip("-.") + "-" + hashlib.sha256(raw.encode("utf-8")).hexdigest()[:6]
    return safe


def default_sweep_dir(base: RunConfig, axes: Sequence[Axis]) -> Path:
    """``runs/sweep-<defense>-<keys>-<hash>`` for a sweep run without ``--out``."""
    digest = hashlib.sha256(json.dumps({"base": base.cell_id(), "axes": [[a.key, list(a.values)] for a in axes]},
                                       sort_keys=True).encode("utf-8")).hexdigest()[:8]
    return Path("runs") / f"sweep-{base.defense}-{'-'.join(a.key for a in axes)}-{digest}"


def expand(*, axes: Sequence[Axis], file: str | Path | None, cli: Mapping[str, Any], sets: Sequence[str],
           out: Path, max_cells: int | None = None) -> list[Cell]:
    """The cells of the grid, in row-major order of the axes, each with a complete configuration.

    The swept pairs are applied after the user's ``--set`` pairs, so they win over them; none over ``max_cells``.
    """
    lengths = [len(a.values) for a in axes]  # counted, not built: a product of lengths (cell_limit)
    check_cell_count(count_cells(lengths), limit=max_cells, what="--sweep", factors=" × ".join(map(str, lengths)))
    cli = {k: v for k, v in cli.items() if k != "out"}
    cells = []
    for combo in itertools.product(*(a.values for a in axes)):
        assignments = tuple(zip((a.key for a in axes), combo))
        config = build_config(file=file, cli=cli, sets=list(sets) + [f"{k}={v}" for k, v in assignments])
        name = cell_name(assignments)
        cells.append(Cell(assignments, name, replace(config, out=str(out / name))))
    twice = [" and ".join(cells[i].label for i in same) for same in repeated_settings([c.config for c in cells])]
    if twice:  # refused, as a value listed twice is: one run in two cells would be two seeds in the sweep's table
        raise UsageError(f"--sweep makes one setting more than once: {'; '.join(twice)} are the same run (equal "
                         "values, or a value and its default); list each setting once")
    return cells


class CellsFailed(RaptAuditError):
    """Some cells of a sweep failed; the others finished and their results are on disk.

    Attributes:
        results: ``(cell, result)`` of every finished cell, in grid order.
        failures: ``(cell, error message)`` of every failed cell, in grid order.
    """

    def __init__(self, *, out: Path, total: int, results: Sequence[tuple[Cell, RunResult]],
                 failures: Sequence[tuple[Cell, str]]) -> None:
        self.results, self.failures = list(results), list(failures)
        listed = "\n".join(f"  {cell.label}: {error}" for cell, error in failures)
        super().__init__(f"{len(failures)} of {total} cells failed; {len(results)} finished cells are kept in {out} "
                         f"and a rerun of the same command runs only the others:\n{listed}")


class BudgetSpent(RaptAuditError):
    """A sweep stopped before a cell that would not fit in its time budget (the cells running then finished).

    Raised rather than :class:`CellsFailed` when cells also failed: the cells left pending are the
    sweep's to run, so the command says "try again" (:attr:`EXIT_CODE`), and the failed cells,
    marked ``failed`` in ``sweep.json`` and named here, run again in that next call.

    Attributes:
        results: ``(cell, result)`` of every finished cell, in grid order.
        pending: How many cells are left to run (not started; the failed ones not counted).
        failures: ``(cell, error message)`` of the cells that failed in this call, in grid order.
    """

    #: The command's exit status: sysexits' EX_TEMPFAIL, "try again" (the same command goes on).
    EXIT_CODE = 75

    def __init__(self, *, out: Path, results: Sequence[tuple[Cell, RunResult]], pending: int, needed: float,
                 left: float, budget: float, failures: Sequence[tuple[Cell, str]] = ()) -> None:
        self.results, self.pending, self.failures = list(results), pending, list(failures)
        cells = "1 cell" if pending == 1 else f"{pending} cells"
        message = (f"time budget of {budget:g} s: {max(left, 0.0):.0f} s left, and the next cell is estimated "
                   f"at {needed:.0f} s, so the {cells} left {'was' if pending == 1 else 'were'} not started; "
                   f"{len(results)} finished in {out}, and the same command run again goes on from there")
        if failures:
            listed = "\n".join(f"  {cell.label}: {error}" for cell, error in failures)
            message += (f"; {len(failures)} cell{'s' if len(failures) > 1 else ''} failed (marked in sweep.json; "
                        f"that command runs {'them' if len(failures) > 1 else 'it'} again):\n{listed}")
        super().__init__(message)


class Executor(Protocol):
    """Runs the pending cells of a checked sweep elsewhere than in this process (several at once, other machines)."""

    def run_cells(self, cells: Sequence[Cell], *, index: SweepIndex, log: Log,
                  deadline: tuple[float, float] | None = None,
                  clock: Callable[[], float] = time.monotonic) -> list[tuple[Cell, RunResult]]:
        """Run every cell whose ``index.status`` is ``pending`` and write its result; return all results.

        Must reuse the ``complete`` ones, write each cell's ``result.json`` atomically while holding
        its directory's lock, call ``index.mark`` as cells finish, raise :class:`CellsFailed` after
        the last cell when some failed, and leave finished cells in place on ``KeyboardInterrupt``.
        With a ``deadline`` (``(start, budget)`` on ``clock``) it must start a cell only while
        :func:`~rapt_audit.pipeline.time_budget.budget_spent` says it fits, and otherwise start none, let the running ones finish and
        raise :class:`BudgetSpent` (rather than :class:`CellsFailed`) with the cells not started pending.
        """
        ...


class SweepIndex:
    """The status of every cell (``pending``, ``complete``, ``failed``), mirrored in ``<out>/sweep.json``."""

    def __init__(self, out: Path, cells: Sequence[Cell], axes: Sequence[Axis], status: Mapping[str, str],
                 data: Mapping[str, tuple[str, str]] | None = None,
                 finished: Mapping[str, RunResult] | None = None) -> None:
        self.out, self.cells, self.axes = out, list(cells), list(axes)
        self.status = dict(status)
        #: Cell name → the result a ``complete`` cell's directory held when it was checked (read once).
        self.finished = dict(finished or {})
        self.errors: dict[str, str] = {}
        #: Cell name → (dataset name, data fingerprint) as the check saw them on this machine, so that
        #: a result computed elsewhere can be checked to come from the same data.
        self.data = dict(data or {})
        self.write()

    def mark(self, cell: Cell, status: str, error: str | None = None) -> None:
        """Set one cell's status (with its error message when it failed) and rewrite the index."""
        self.status[cell.name] = status
        if error is not None:
            self.errors[cell.name] = error
        self.write()

    def write(self) -> None:
        """Rewrite ``sweep.json`` atomically (readers never see half a file)."""
        rows = []
        for c in self.cells:
            row = {"name": c.name, "assignments": dict(c.assignments), "dir": c.name,
                   "cell_id": c.config.cell_id(), "status": self.status[c.name]}
            if self.status[c.name] == "failed" and c.name in self.errors:
                row["error"] = self.errors[c.name]
            rows.append(row)
        doc = {"schema": SWEEP_SCHEMA, "updated_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
               "axes": [{"key": a.key, "values": list(a.values)} for a in self.axes], "cells": rows}
        write_json_atomic(self.out / SWEEP_INDEX, doc)


def run_sweep(cells: Sequence[Cell], *, out: Path, axes: Sequence[Axis], log: Log | None = None,
              progress: bool = False, runner: Callable[..., RunResult] | None = None,
              executor: Executor | None = None, time_budget: float | None = None,
              clock: Callable[[], float] = time.monotonic,
              own_index: tuple[str, str, str] = (SWEEP_INDEX, SWEEP_SCHEMA, "sweep")) -> list[tuple[Cell, RunResult]]:
    """Run every cell that is not complete yet and return each cell's result, in grid order.

    Every cell is validated before any work starts (plugin names and values, data, and that no
    cell directory holds a different run), so a bad value fails in seconds, not after hours. The
    sweep holds the lock of ``out`` throughout (:mod:`~rapt_audit.api.locks`), so a second sweep
    into the same directory fails at once. ``Ctrl-C`` (or SIGTERM, through the CLI) abandons the
    cell in progress without writing it; completed cells stay on disk and the next call reuses
    them. The interrupt is re-raised with a message saying how many finished cells were kept.

    Args:
        cells: From :func:`expand`.
        out: The sweep directory (cells live in its sub-directories).
        axes: The swept keys (for the index file).
        log: Where progress lines go.
        progress: Show progress bars inside each run (in-process sweeps only).
        runner: The function that runs one configuration (default :func:`rapt_audit.pipeline.runner.run`).
        executor: Where the cells run (default: one after another in this process). Either way a
            failing cell is marked ``failed`` in ``sweep.json``, the other cells run, and
            :class:`CellsFailed` then lists the failed ones.
        time_budget: Seconds from this call after which no cell is started that would not fit
            (see the module docstring); with an executor the cells running then finish first.
        clock: Where the time is read (seconds; tests pass their own).
        own_index: ``(file, schema, kind)`` of the index that makes ``out`` ours (:func:`check_sweep_dir`;
            a benchmark passes its ``benchmark.json``).

    Raises:
        ResultError: when another process is using ``out`` or a cell directory holds another run.
        UsageError: when ``out`` is not new or empty and holds no index of ours (nothing is written).
        CellsFailed: when cells failed and none was left pending by the budget (the finished ones are kept).
        BudgetSpent: when cells were left pending because the time budget ran out (cells that failed
            too are listed in it: the same command runs them again with the pending ones).
        UsageError: for a time budget that is not positive.
    """
    if time_budget is not None and not time_budget > 0:
        raise UsageError(f"--time-budget must be a positive number of seconds, got {time_budget:g}")
    deadline = None if time_budget is None else (clock(), float(time_budget))
    check_sweep_dir(out, own_index=own_index)
    with hold_out_dir(out):
        remove_stray_temps(out, SWEEP_INDEX)  # left by a killed sweep; never read, now removed
        try:
            if executor is not None:
                say = log or (lambda _msg: None)
                budget = {} if deadline is None else {"deadline": deadline, "clock": clock}  # older executors: none
                return executor.run_cells(cells, index=check_cells(cells, out=out, axes=axes, log=say), log=say,
                                          **budget)
            return _run_cells(cells, out=out, axes=axes, log=log, progress=progress, runner=runner,
                              deadline=deadline, clock=clock)
        except KeyboardInterrupt as stop:
            # Counted on disk: a cell whose result was written just before the interrupt is kept too.
            kept = sum((Path(c.config.out) / RESULT_FILE).is_file() for c in cells)
            stop.args = (f"{kept} of {len(cells)} finished cells kept in {out}; rerun the same command to resume",)
            raise


def check_sweep_dir(out: Path, *, own_index: tuple[str, str, str] = (SWEEP_INDEX, SWEEP_SCHEMA, "sweep")) -> None:
    """The output rule (:func:`~rapt_audit.api.outputs.check_out_folder`): ``out`` is new, empty or holds our
    own ``sweep.json`` (by its schema: a user's file of that name is not ours), else refused before any cell."""
    check_out_folder(out, name="--out", index=own_index[0], schema=own_index[1], what=own_index[2])


def check_cells(cells: Sequence[Cell], *, out: Path, axes: Sequence[Axis], log: Log) -> SweepIndex:
    """Validate every cell before any work (names, values, data, directories) and write the index.

    A cell whose directory already holds its exact result is ``complete`` (unless ``force``), every
    other one ``pending``; the caller holds the lock of ``out``.

    Raises:
        UsageError, DataError, ResultError: as :func:`rapt_audit.pipeline.runner.plan`, for the first bad cell.
    """
    status: dict[str, str] = {}
    data: dict[str, tuple[str, str]] = {}
    finished: dict[str, RunResult] = {}
    for cell in cells:
        checked = audit_runner.plan(cell.config)
        data[cell.name] = (checked.dataset.name, checked.dataset.fingerprint)
        status[cell.name] = "complete" if checked.existing is not None and not cell.config.force else "pending"
        if status[cell.name] == "complete":
            finished[cell.name] = checked.existing
    index = SweepIndex(out, cells, axes, status, data, finished)
    todo = sum(s == "pending" for s in status.values())
    log(f"sweep of {len(cells)} cells in {out}: {len(cells) - todo} complete, {todo} to run")
    return index


def _run_cells(cells: Sequence[Cell], *, out: Path, axes: Sequence[Axis], log: Log | None, progress: bool,
               runner: Callable[..., RunResult] | None, deadline: tuple[float, float] | None,
               clock: Callable[[], float]) -> list[tuple[Cell, RunResult]]:
    say = log or (lambda _msg: None)
    runner = runner or audit_runner.run  # looked up at call time, so a patched runner is honoured
    index = check_cells(cells, out=out, axes=axes, log=say)
    budget = TimeBudget(deadline, cells, out=out, finished=index.finished, clock=clock)  # the one estimator's rule
    results: list[tuple[Cell, RunResult]] = []
    failures: list[tuple[Cell, str]] = []
    for i, cell in enumerate(cells, 1):
        pending = index.status[cell.name] != "complete"
        left = budget.spent(cell) if pending else None
        if left is not None:
            rest = cells[i - 1:]
            done = results + [(c, index.finished[c.name]) for c in rest if index.status[c.name] == "complete"]
            raise BudgetSpent(out=out, results=done,  # in grid order: the cells before this one, then finished ones
                              needed=budget.needed(cell), left=left, budget=deadline[1], failures=failures,
                              pending=sum(index.status[c.name] != "complete" for c in rest))
        rest = [c for c in cells[i - 1:] if index.status[c.name] == "pending"]  # this cell and those after it
        say(f"cell {i}/{len(cells)} {cell.label}: {'running' if pending else 'reusing'} {cell.config.out}"
            f"{budget.note([], rest) if pending else ''}")
        started = clock()
        try:
            result = runner(cell.config, log=log, progress=progress)
        except Exception as exc:  # noqa: BLE001 - a failing cell (a defense that raises) must not cost the others
            message = str(exc) if isinstance(exc, RaptAuditError) else f"{type(exc).__name__}: {exc}"
            say(f"cell {i}/{len(cells)} {cell.label}: failed, going on with the other cells: {message}")
            index.mark(cell, "failed", message)
            failures.append((cell, message))
            continue
        if pending:
            budget.observe(cell, result, clock() - started)
        index.mark(cell, "complete")
        results.append((cell, result))
    if failures:
        raise CellsFailed(out=out, total=len(cells), results=results, failures=failures)
    return results


__all__ = ["Axis", "BudgetSpent", "Cell", "CellsFailed", "Executor", "SWEEP_INDEX", "SWEEP_SCHEMA", "SweepIndex",
           "cell_name", "check_cells", "check_sweep_dir", "default_sweep_dir", "expand", "parse_axes", "parse_axis",
           "run_sweep"]
