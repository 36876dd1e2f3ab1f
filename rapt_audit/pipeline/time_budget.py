"""A sweep's time budget (``--time-budget SECONDS``): the one rule every sweep starts its cells by.

The in-process loop (:func:`rapt_audit.pipeline.sweep.run_sweep`) and the executors' shared loop
(:class:`~rapt_audit.pipeline.cell_driver.CellDriver`, ``--jobs N`` and Ray) ask the same question before a
cell starts: does the longest cell so far still fit in what is left? When it no longer does, they start no
further cell and raise :class:`~rapt_audit.pipeline.sweep.BudgetSpent`, the rest pending for the next call.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from rapt_audit.pipeline.results import RunResult


def budget_spent(deadline: tuple[float, float] | None, longest: float | None,
                 clock: Callable[[], float]) -> float | None:
    """The seconds left of a time budget once a cell as long as ``longest`` no longer fits in them, else ``None``.

    The next cell starts only while the longest cell so far fits in what is left. ``None`` (start it) also
    when there is no budget or no finished cell to judge by yet.

    Args:
        deadline: ``(start, budget)``: the clock's reading when the sweep started and its budget in seconds.
        longest: The longest cell so far in seconds (:func:`longest_finished`, then the cells run since).
        clock: Where the time is read (the clock ``start`` came from).
    """
    if deadline is None or longest is None:
        return None
    left = deadline[1] - (clock() - deadline[0])
    return left if longest > left else None


def cell_seconds(result: RunResult) -> float:
    """What ``result``'s cell costs run whole: ``env.cold_time_s`` where the run reused stages of an earlier run of
    the cell (its own ``wall_time_s`` is shorter by them), else ``env.wall_time_s``."""
    env = result.env
    return float(env.get("cold_time_s") or env.get("wall_time_s") or 0.0)


def longest_finished(finished: Iterable[RunResult]) -> float | None:
    """The longest cell (:func:`cell_seconds`) of those finished before this call (``None`` when there are none).

    The longest cell so far estimates the next one: cells differ (identity trains less than RAPT),
    and a cell started that does not fit is lost when the machine's time runs out.
    """
    return max((cell_seconds(r) for r in finished), default=None)


__all__ = ["budget_spent", "cell_seconds", "longest_finished"]
