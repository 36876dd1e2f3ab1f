"""A sweep's time budget (``--time-budget SECONDS``): the one rule every sweep starts its cells by.

The in-process loop (:func:`rapt_audit.pipeline.sweep.run_sweep`) and the executors' shared loop
(:class:`~rapt_audit.pipeline.cell_driver.CellDriver`, ``--jobs N`` and Ray) ask the same question before a
cell starts: does its estimate still fit in what is left? The estimate is the sweep's one estimator's
(:class:`~rapt_audit.pipeline.estimates.Estimator`: the pair's finished cells, else the best evidence there
is), the same figure the dry run listed and the progress line sums. When it no longer fits, they start no
further cell and raise :class:`~rapt_audit.pipeline.sweep.BudgetSpent`, the rest pending for the next call.
While nothing is measured yet (no cell of the sweep, nor any its folder held, has finished) the cells start
freely, as many as run at once: every call makes progress, and the estimates learn from what it measures.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from rapt_audit.pipeline.estimates import Estimate, Estimator, duration, pair_of, read_evidence
from rapt_audit.pipeline.results import RunResult


def budget_spent(deadline: tuple[float, float] | None, needed: float | None,
                 clock: Callable[[], float]) -> float | None:
    """The seconds left of a time budget once a cell estimated at ``needed`` seconds no longer fits in them,
    else ``None`` (start it); ``None`` also when there is no budget or no estimate to judge by.

    Args:
        deadline: ``(start, budget)``: the clock's reading when the sweep started and its budget in seconds.
        needed: The next cell's estimate in seconds (:meth:`TimeBudget.needed`).
        clock: Where the time is read (the clock ``start`` came from).
    """
    if deadline is None or needed is None:
        return None
    left = deadline[1] - (clock() - deadline[0])
    return left if needed > left else None


def cell_seconds(result: RunResult) -> float:
    """What ``result``'s cell costs run whole: ``env.cold_time_s`` where the run reused stages of an earlier run of
    the cell (its own ``wall_time_s`` is shorter by them), else ``env.wall_time_s``."""
    env = result.env
    return float(env.get("cold_time_s") or env.get("wall_time_s") or 0.0)


def sweep_estimator(cells: Iterable[Any], *, out: Path | None, finished: Mapping[str, RunResult]) -> Estimator:
    """The estimator of a sweep's loop: the evidence its folder holds (a benchmark run writes it,
    :func:`~rapt_audit.pipeline.estimates.read_evidence`) and the cells found finished (``finished``: cell name →
    stored result), each measured by its whole cost."""
    estimator = Estimator(read_evidence(out))
    by_name = {c.name: c for c in cells}
    for name, result in finished.items():
        if name in by_name:
            estimator.observe(name, pair_of(by_name[name]), cell_seconds(result))
    return estimator


def cells_that_fit(estimates: Sequence[float | None], *, budget: float, workers: int = 1,
                   measured: bool = True) -> int:
    """How many of the cells estimated at ``estimates`` (in the order they start) a sweep would start under a
    budget of ``budget`` seconds on ``workers`` workers: each starts on the first free worker while its estimate
    fits in what is left then, and once one does not, none starts again (the rule of :func:`budget_spent`); with
    nothing ``measured`` yet, the first cells (one a worker) start freely (:meth:`TimeBudget.spent`)."""
    free = [0.0] * max(1, workers)
    for started, seconds in enumerate(estimates):
        now = min(free)
        if (measured or now > 0) and budget_spent((0.0, budget), seconds, lambda: now) is not None:
            return started
        free[free.index(now)] = now + (seconds or 0.0)
    return len(estimates)


class TimeBudget:
    """One sweep's budget, judged by its estimator: what its loop asks before a cell and tells after one.

    Attributes:
        deadline: ``(start, budget)`` on ``clock``, or ``None`` (no budget: every cell starts).
        estimator: The sweep's :class:`~rapt_audit.pipeline.estimates.Estimator` (the progress line's too).
    """

    def __init__(self, deadline: tuple[float, float] | None, cells: Sequence[Any], *, out: Path | None,
                 finished: Mapping[str, RunResult], clock: Callable[[], float]) -> None:
        self.deadline, self.clock = deadline, clock
        self.estimator = sweep_estimator(cells, out=out, finished=finished)

    def estimate(self, cell: Any) -> Estimate:
        """The cell's estimate and where it comes from."""
        return self.estimator.estimate(cell)

    def needed(self, cell: Any) -> float | None:
        """The seconds the cell is estimated to take (``None``: nothing to judge by)."""
        return self.estimate(cell).seconds

    def spent(self, cell: Any) -> float | None:
        """The seconds left when ``cell`` no longer fits in them (start no further cell), else ``None``; ``None``
        too while nothing is measured (see the module docstring)."""
        if not self.estimator.finished:
            return None
        return budget_spent(self.deadline, self.needed(cell), self.clock)

    def observe(self, cell: Any, result: RunResult, elapsed: float) -> None:
        """A cell finished after ``elapsed`` seconds on the sweep's clock: its pair is measured from now on, by the
        whole cell's cost (``elapsed`` plus the seconds of the stages it reused, which a rerun would not have)."""
        reused = max(0.0, cell_seconds(result) - float(result.env.get("wall_time_s") or 0.0))
        self.estimator.observe(cell.name, pair_of(cell), elapsed + reused)

    def note(self, running: Sequence[tuple[Any, float]], queued: Sequence[Any], workers: int = 1) -> str:
        """``, about 5 min left`` for a progress line (empty while there is nothing to judge by)."""
        left = self.estimator.time_left(running, queued, workers)
        return "" if left is None else f", about {duration(left)} left"


__all__ = ["TimeBudget", "budget_spent", "cell_seconds", "cells_that_fit", "sweep_estimator"]
