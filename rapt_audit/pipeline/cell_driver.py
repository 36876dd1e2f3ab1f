"""The command's side of a sweep whose cells run in other processes: one loop for every executor.

An executor (:class:`~rapt_audit.pipeline.ray_executor.RayExecutor`, ``--executor ray``;
:class:`~rapt_audit.pipeline.local_executor.LocalExecutor`, ``--jobs N``) runs each pending cell
in a worker that calls :func:`rapt_audit.pipeline.runner.compute` and returns the result
*document*; workers never write results. :class:`CellDriver` is what both do here, in the command's
process: it reuses the cells found complete, starts as many cells as the workers can run at once
and queues the rest, holds each started cell's directory lock from its start to its write,
validates each returned document (schema, cell id, the data the check saw) and writes
``<cell>/result.json``, marks ``sweep.json`` as cells finish, and raises
:class:`~rapt_audit.pipeline.sweep.CellsFailed` after the last cell when some failed. Under a time
budget it starts a queued cell only while its estimate fits in what is left
(:class:`~rapt_audit.pipeline.time_budget.TimeBudget`, the in-process sweep's rule and estimator); once one
does not, it starts none, lets the running cells finish and be written, and raises
:class:`~rapt_audit.pipeline.sweep.BudgetSpent` with the rest pending. Its progress lines' time left is the
same estimator's (:meth:`CellDriver.time_left`). Subclasses
say only how a cell is started, waited for and read back (:meth:`CellDriver.start`,
:meth:`~CellDriver.wait`, :meth:`~CellDriver.outcome`), and how many run at once.
"""

from __future__ import annotations

import time
from collections import deque
from contextlib import ExitStack
from pathlib import Path
from typing import Any, Callable, Sequence

from rapt_audit.api.errors import RaptAuditError, ResultError
from rapt_audit.api.files import remove_stray_temps
from rapt_audit.api.locks import hold_out_dir
from rapt_audit.encoder.threads import set_threads
from rapt_audit.pipeline import runner as audit_runner
from rapt_audit.pipeline.cache_ledger import recording
from rapt_audit.pipeline.config import RunConfig
from rapt_audit.pipeline.estimates import duration
from rapt_audit.pipeline.result_schema import validate_result_document
from rapt_audit.pipeline.results import RESULT_FILE, RunResult, write_result
from rapt_audit.pipeline.stage_reuse import StoredStages, cell_code, reusable_in, staleness
from rapt_audit.pipeline.sweep import BudgetSpent, Cell, CellsFailed, Log, SweepIndex
from rapt_audit.pipeline.time_budget import TimeBudget


class CellError(Exception):
    """A cell's worker did not return a result; the message says why.

    Attributes:
        retry: Whether running the cell again may succeed (its worker process died) rather than
            fail the same way (the run raised).
    """

    def __init__(self, message: str, *, retry: bool = False) -> None:
        super().__init__(message)
        self.retry = retry


def cell_task(compute: Callable[..., RunResult], config: RunConfig,
              threads: int | None = None, reused: StoredStages | None = None) -> dict[str, Any]:
    """What a worker runs for one cell: the audit, returned as the result document (no result written; the cache
    entries it stores are recorded in the cache's ledger, :func:`~rapt_audit.pipeline.cache_ledger.recording`).

    Args:
        compute: The audit (:func:`rapt_audit.pipeline.runner.compute`, or a test's stand-in).
        config: The cell's configuration.
        threads: When given, the threads the worker computes with (its share of the cores),
            set before the cell runs.
        reused: The stages of a stored run of the cell that the code here computes alike, read by the driver
            (a worker never reads the output folder): only the others are computed.
    """
    if threads is not None:
        set_threads(threads)
    with recording(config):  # what the cell stores in the cache goes into its ledger record (cache_ledger)
        return (compute(config, reused=reused) if reused else compute(config)).to_dict()


def reuse(cell: Cell, index: SweepIndex, log: Log, number: str) -> RunResult:
    """The finished result of a cell that :func:`~rapt_audit.pipeline.sweep.check_cells` found complete."""
    result = index.finished[cell.name]  # read and checked (fresh against the code here) under the sweep's lock
    log(f"cell {number} {cell.label}: reusing {cell.config.out}")
    return result


class CellDriver:
    """One sweep's loop in the command's process; see the module docstring.

    Attributes:
        where: How the summary line names where the cells ran (``on Ray``).
        worker: How a message names a cell's worker (``its Ray worker``).
        max_retries: How often a cell whose worker died (:class:`CellError` with ``retry``) is run again.
    """

    where = "elsewhere"
    worker = "its worker"
    max_retries = 0

    def __init__(self, cells: Sequence[Cell], index: SweepIndex, log: Log,
                 compute: Callable[[RunConfig], RunResult] | None, *,
                 deadline: tuple[float, float] | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        """``deadline``: ``(start, budget)`` on ``clock``, the sweep's time budget (``None``: none); cells are timed
        on ``clock`` too, from their start to their write, so that they are judged on the budget's clock."""
        self.cells, self.index, self.log = list(cells), index, log
        self.deadline, self.clock = deadline, clock
        #: The budget and the sweep's one estimator (its start: the folder's evidence and the cells found complete).
        self.budget = TimeBudget(deadline, self.cells, out=getattr(index, "out", None), finished=index.finished,
                                 clock=clock)
        #: ``(needed, left)`` when the budget stopped new cells: the next cell's estimate, and the seconds left.
        self.spent: tuple[float, float] | None = None
        self.number = {c.name: i for i, c in enumerate(self.cells, 1)}
        self.results: dict[str, RunResult] = {}
        self.failures: dict[str, str] = {}
        self.attempts: dict[str, int] = {}
        self.queue = deque(c for c in self.cells if index.status[c.name] == "pending")
        self.running: dict[Any, tuple[Cell, float, ExitStack]] = {}
        self.ran = 0
        self.reuse: dict[str, StoredStages] = {}  # cell name → the stored stages its worker is handed
        self.compute = compute or audit_runner.compute  # looked up now, so a patched compute is honoured

    # ------------------------------------------------------------ what an executor says

    def capacity(self, *, quiet: bool = False) -> int:
        """How many cells can run at once now (``quiet``: only counting, say nothing)."""
        raise NotImplementedError

    def start(self, cell: Cell) -> Any:
        """Start one cell's worker; return a handle that :meth:`wait` and :meth:`outcome` know."""
        raise NotImplementedError

    def wait(self) -> list[Any]:
        """The handles of running cells that ended, waiting a second at most (so Ctrl-C stays prompt)."""
        raise NotImplementedError

    def outcome(self, handle: Any) -> Any:
        """The document an ended cell's worker returned.

        Raises:
            CellError: when the run raised or its worker died.
        """
        raise NotImplementedError

    def cancel(self) -> None:
        """Stop the running cells (on Ctrl-C or SIGTERM); their results are not written."""

    # ------------------------------------------------------------ the loop

    def say(self, cell: Cell, message: str) -> None:
        """Log one line about one cell, numbered in grid order."""
        self.log(f"cell {self.number[cell.name]}/{len(self.cells)} {cell.label}: {message}")

    def counts(self) -> str:
        """``2 running, 3 queued, about 5 min left``."""
        if self.spent is not None:
            return f"{len(self.running)} running, {len(self.queue)} left for the next call"
        text = f"{len(self.running)} running, {len(self.queue)} queued"
        left = self.time_left()
        return text if left is None else f"{text}, about {duration(left)} left"

    def time_left(self) -> float | None:
        """Seconds until the running and queued cells are done on this sweep's workers (``None``: no basis yet):
        the sweep's estimator (:meth:`~rapt_audit.pipeline.estimates.Estimator.time_left`), which learns from each
        cell that finishes, less what the running cells have already spent."""
        now = self.clock()
        running = [(cell, now - started) for cell, started, _ in self.running.values()]
        return self.budget.estimator.time_left(running, list(self.queue), max(1, self.capacity(quiet=True)))

    def run(self) -> list[tuple[Cell, RunResult]]:
        """Run every pending cell and write each result; return all results in grid order.

        Raises:
            BudgetSpent: after the running cells ended, when the time budget left cells unstarted
                (those that finished are written; failed ones are listed in it, not raised apart).
            CellsFailed: after every cell ended, when some failed and none was left pending (the others
                are written).
        """
        begun = self.clock()
        for cell in self.cells:
            if self.index.status[cell.name] == "complete":
                self.results[cell.name] = reuse(cell, self.index, self.log,
                                                f"{self.number[cell.name]}/{len(self.cells)}")
        try:
            while self.running or (self.queue and self.spent is None):
                self.submit()
                if self.running:
                    for handle in self.wait():
                        self.finish(handle)
        except KeyboardInterrupt:
            self.cancel()
            raise
        finally:
            for _, _, lock in self.running.values():
                lock.close()  # an unwritten cell's new, empty directory goes with its lock
        left = f"{len(self.queue)} left pending, " if self.queue else ""
        self.log(f"sweep {self.where}: {self.ran} cells run, {len(self.results) - self.ran} reused, "
                 f"{len(self.failures)} failed, {left}in {duration(self.clock() - begun)}")
        done = [(c, self.results[c.name]) for c in self.cells if c.name in self.results]
        failures = [(c, self.failures[c.name]) for c in self.cells if c.name in self.failures]
        if self.spent is not None and self.queue:  # pending cells first: the same command goes on (and retries)
            raise BudgetSpent(out=self.index.out, results=done, pending=len(self.queue), needed=self.spent[0],
                              left=self.spent[1], budget=self.deadline[1], failures=failures)
        if failures:
            raise CellsFailed(out=self.index.out, total=len(self.cells), results=done, failures=failures)
        return done

    def out_of_time(self) -> bool:
        """Whether the time budget stops new cells: once the next cell's estimate does not fit, none starts again."""
        if self.spent is None and self.queue:
            cell = self.queue[0]
            left = self.budget.spent(cell)
            if left is not None:
                estimate = self.budget.estimate(cell)
                self.spent = (float(estimate.seconds or 0.0), left)
                self.log(f"time budget: {max(left, 0.0):.0f} s left and the next cell ({cell.label}) is estimated at "
                         f"{self.spent[0]:.0f} s ({estimate.source}), so no further cell starts ({self.counts()})")
        return self.spent is not None

    def submit(self) -> None:
        """Start queued cells while there is room (and time, under a budget), each under its directory's lock."""
        limit = self.capacity()
        while self.queue and len(self.running) < limit and not self.out_of_time():
            cell = self.queue.popleft()
            lock = ExitStack()
            try:
                # Held from the start to the write, as runner.run holds it in-process.
                lock.enter_context(hold_out_dir(cell.config.out))
                remove_stray_temps(cell.config.out, RESULT_FILE)  # left by a killed command; never read
                existing = audit_runner.check_out_dir(Path(cell.config.out), cell.config)
                here = cell_code(cell.config)
                if existing is not None and staleness(existing, here):
                    existing = None  # other code measured some of it: its stale stages run again
                if existing is None or cell.config.force:
                    self.reuse[cell.name] = reusable_in(Path(cell.config.out), cell.config, here)
                    if stale := self.reuse[cell.name].stale:
                        self.say(cell, f"running again what is stale or unfinished ({', '.join(stale)}); "
                                       "the rest is reused")
                    self.running[self.start(cell)] = (cell, self.clock(), lock)
            except RaptAuditError as exc:  # another process took the directory since the check
                lock.close()
                self.fail(cell, f"{type(exc).__name__}: {exc}", self.clock())
                continue
            except BaseException:
                lock.close()
                raise
            if existing is not None and not cell.config.force:
                lock.close()
                self.results[cell.name] = existing
                self.index.mark(cell, "complete")
                self.say(cell, f"reusing {cell.config.out} (written meanwhile)")
                continue
            self.say(cell, f"started ({self.counts()})")

    def finish(self, handle: Any) -> None:
        """Check and write an ended cell's result, or mark it failed (or queue it again when its worker died)."""
        cell, started, lock = self.running.pop(handle)
        with lock:
            try:
                result = self.accept(cell, self.outcome(handle))
            except CellError as exc:
                if exc.retry and self.attempts.get(cell.name, 0) < self.max_retries:
                    self.attempts[cell.name] = self.attempts.get(cell.name, 0) + 1
                    self.queue.appendleft(cell)
                    self.say(cell, f"{exc}; running it again")
                    return
                self.fail(cell, str(exc), started)
                return
            except RaptAuditError as exc:  # the document failed the checks
                self.fail(cell, f"{type(exc).__name__}: {exc}", started)
                return
        elapsed = self.clock() - started  # after the write: a cell costs the budget until its result is safe
        self.budget.observe(cell, result, elapsed)
        self.ran += 1
        self.results[cell.name] = result
        self.index.mark(cell, "complete")
        self.say(cell, f"done in {duration(elapsed)} ({self.counts()})")

    def fail(self, cell: Cell, error: str, started: float) -> None:
        """Mark a cell failed in ``sweep.json``; the sweep goes on and lists it at the end (its time is no estimate of
        a cell that finishes, so the estimator does not learn from it; the budget's clock has counted it)."""
        self.failures[cell.name] = error
        self.index.mark(cell, "failed", error)
        self.say(cell, f"FAILED after {duration(self.clock() - started)}: {error} ({self.counts()})")

    def accept(self, cell: Cell, doc: Any) -> RunResult:
        """Validate a worker's result document and write it (the caller holds the cell's lock)."""
        source = f"{Path(cell.config.out) / RESULT_FILE} (as returned by {self.worker})"
        if not isinstance(doc, dict):
            raise ResultError(f"result file {source}: not a result document but {type(doc).__name__}")
        validate_result_document(doc, source)
        result = RunResult.from_dict(doc)
        if result.cell_id != cell.config.cell_id():
            raise ResultError(f"result file {source} is the run of cell {result.cell_id}, not of this cell "
                              f"({cell.config.cell_id()})")
        expected = self.index.data.get(cell.name)
        got = (result.dataset.get("name"), result.env.get("data_fingerprint"))
        if expected is not None and got != expected:
            raise ResultError(
                f"cell {cell.label} ran on other data on its worker ({got[0]}@{str(got[1])[:8]}) than this "
                f"driver checked ({expected[0]}@{expected[1][:8]}); give every node the same data: the same "
                "RAPT_AUDIT_DATA content on each node before 'ray start', or --data-dir with a path valid on all")
        write_result(result, cell.config.out)
        return result


__all__ = ["CellDriver", "CellError", "cell_task", "duration", "reuse"]
