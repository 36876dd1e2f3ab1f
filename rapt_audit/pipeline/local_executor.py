"""Sweeps side by side on this machine (``rapt-audit run --sweep ... --jobs N``): N worker processes.

Each pending cell runs in one of ``N`` worker processes (``concurrent.futures`` with the ``spawn``
start method: a forked copy of a process that has loaded torch may deadlock in its thread pools).
A worker computes with its share of this process's cores, ``cores // N`` threads (at least 1;
the user's ``OMP_NUM_THREADS`` wins), set by the pool's initializer before any cell: left alone,
every process starts one thread per core, and cells side by side then slow each other far beyond
their share (:mod:`~rapt_audit.encoder.threads`). Fewer pending cells than ``N`` start fewer
workers, each with a larger share.

Everything else is a Ray sweep's (:class:`~rapt_audit.pipeline.cell_driver.CellDriver`): workers
return result documents that this process checks and writes under each cell's lock, a cell that
fails is marked ``failed`` while the others go on and the sweep then raises
:class:`~rapt_audit.pipeline.sweep.CellsFailed`, and ``Ctrl-C`` stops the workers and keeps the
finished cells. A worker that dies (killed, out of memory) breaks the pool: the cells it was
running with are run again once, in a fresh pool. Under ``--time-budget`` a cell starts only while
its estimate (the sweep's one estimator, which learns from the cells timed side by side with the others)
fits in what is left; once one does not, the running cells finish and are written and the rest stay
pending for the next call.
"""

from __future__ import annotations

import multiprocessing
import signal
import time
import traceback
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from rapt_audit.api.errors import RaptAuditError, UsageError
from rapt_audit.encoder.threads import available_cores, cell_threads, set_threads
from rapt_audit.pipeline.cell_driver import CellDriver, CellError, cell_task
from rapt_audit.pipeline.config import RunConfig
from rapt_audit.pipeline.results import RunResult
from rapt_audit.pipeline.sweep import Cell, Log, SweepIndex


@dataclass
class LocalExecutor:
    """Run a sweep's cells ``jobs`` at a time in worker processes on this machine; see the module docstring.

    Attributes:
        jobs: How many cells run at once (each in its own process).
        cores: The cores the workers share (default: those this process may run on).
        max_retries: How often a cell whose worker process died is run again.
        compute: The function a worker runs on a cell's config (default
            :func:`rapt_audit.pipeline.runner.compute`, looked up at call time); it must be
            importable by name in a fresh process (a module-level function).
    """

    jobs: int
    cores: int | None = None
    max_retries: int = 1
    compute: Callable[[RunConfig], RunResult] | None = None

    def __post_init__(self) -> None:
        if not (isinstance(self.jobs, int) and self.jobs >= 1):
            raise UsageError(f"--jobs must be a whole number >= 1, got {self.jobs!r}")
        if self.max_retries < 0:
            raise UsageError(f"max_retries must be >= 0, got {self.max_retries}")

    def threads(self, workers: int) -> int:
        """The threads each of ``workers`` processes computes with: its share of the cores."""
        return cell_threads(self.cores or available_cores(), workers)

    def run_cells(self, cells: Sequence[Cell], *, index: SweepIndex, log: Log,
                  deadline: tuple[float, float] | None = None,
                  clock: Callable[[], float] = time.monotonic) -> list[tuple[Cell, RunResult]]:
        """Run the pending cells of a checked sweep in worker processes.

        See :class:`~rapt_audit.pipeline.sweep.Executor` (``deadline``, ``clock``: its time budget).

        Raises:
            BudgetSpent: after the running cells ended, when the time budget left cells unstarted.
            CellsFailed: after every cell ended, when some failed (the others are written).
        """
        pending = sum(index.status[c.name] == "pending" for c in cells)
        workers = max(1, min(self.jobs, pending))
        threads = self.threads(workers)
        if pending:
            log(f"{workers} worker process{'es' if workers > 1 else ''} on this machine, computing with "
                f"{threads} thread{'s' if threads > 1 else ''} each")
        driver = _Driver(self, cells, index, log, workers=workers, threads=threads, deadline=deadline, clock=clock)
        try:
            return driver.run()
        finally:
            driver.close()


def _start_worker(threads: int) -> None:
    """A worker's first step, before any cell: its share of the threads, and Ctrl-C left to the command.

    Ctrl-C at a terminal reaches every process of the group; the command stops the workers itself
    (:meth:`_Driver.cancel`), so a worker ignores it rather than print a traceback of its own.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    set_threads(threads)


class _Driver(CellDriver):
    """One ``--jobs`` sweep's loop: cells are futures of a process pool."""

    worker = "its worker process"

    def __init__(self, executor: LocalExecutor, cells: Sequence[Cell], index: SweepIndex, log: Log, *,
                 workers: int, threads: int, deadline: tuple[float, float] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(cells, index, log, executor.compute, deadline=deadline, clock=clock)
        self.workers, self.threads = workers, threads
        self.max_retries = executor.max_retries
        self.where = f"in {workers} processes"
        self.pool: ProcessPoolExecutor | None = None

    def _new_pool(self) -> ProcessPoolExecutor:
        return ProcessPoolExecutor(max_workers=self.workers, mp_context=multiprocessing.get_context("spawn"),
                                   initializer=_start_worker, initargs=(self.threads,))

    def capacity(self, *, quiet: bool = False) -> int:
        """The number of worker processes."""
        return self.workers

    def start(self, cell: Cell) -> Future:
        """Submit the cell to the pool (a fresh one when a dead worker broke the last)."""
        if self.pool is None:
            self.pool = self._new_pool()
        try:
            return self.pool.submit(cell_task, self.compute, cell.config, None, self.reuse.get(cell.name))
        except BrokenProcessPool:
            self.pool.shutdown(wait=False)  # its workers were terminated when it broke
            self.pool = self._new_pool()
            return self.pool.submit(cell_task, self.compute, cell.config, None, self.reuse.get(cell.name))

    def wait(self) -> list[Any]:
        """The futures that ended within a second."""
        done, _ = wait(list(self.running), timeout=1.0, return_when=FIRST_COMPLETED)  # Ctrl-C stays prompt
        return list(done)

    def outcome(self, handle: Any) -> Any:
        """The worker's document; a run that raised is not retried, a worker that died may be."""
        try:
            return handle.result()
        except BrokenProcessPool as exc:
            raise CellError(f"a worker process died while the cell ran (killed, out of memory?): {exc}",
                            retry=True) from None
        except Exception as exc:  # the run raised in its worker (re-raised here by the pool)
            if not isinstance(exc, RaptAuditError):  # a bug: the worker's traceback helps its report
                self.log("".join(traceback.format_exception(exc)).rstrip())
            raise CellError(f"{type(exc).__name__}: {exc}") from None

    def cancel(self) -> None:
        """Stop every worker now: a pool shut down normally waits for the running cells to end."""
        if self.pool is None:
            return
        terminate = getattr(self.pool, "terminate_workers", None)  # Python 3.14
        if terminate is not None:
            terminate()
        else:  # no public way before 3.14: the pool's own table of its processes
            for process in list((getattr(self.pool, "_processes", None) or {}).values()):
                process.terminate()
        self.pool.shutdown(wait=False, cancel_futures=True)
        self.pool = None

    def close(self) -> None:
        """Let the workers exit (after a normal end, none is running)."""
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)
            self.pool = None


__all__ = ["LocalExecutor"]
