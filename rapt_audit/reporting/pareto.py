"""The privacy–utility Pareto frontier.

A defense setting is worth considering only if no other setting is at least as good on both axes
and strictly better on one. Both axes are oriented so that larger is better for the defender
(utility, and empirical privacy = 1 − attack success), as in RAPT Figs. 4, 7 and 10.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence


@dataclass(frozen=True)
class Point:
    """One setting on the privacy–utility plane.

    Attributes:
        utility: Task quality (x axis).
        privacy: Empirical privacy (y axis).
        label: How the point is labelled in plots (``η=50``).
        key: Anything the caller uses to find the point again (a row of the summary).
    """

    utility: float
    privacy: float
    label: str = ""
    key: Any = None


def dominates(a: Point, b: Point, *, maximize: tuple[bool, bool] = (True, True)) -> bool:
    """Whether ``a`` is at least as good as ``b`` on both axes and strictly better on one."""
    sa = (a.utility if maximize[0] else -a.utility, a.privacy if maximize[1] else -a.privacy)
    sb = (b.utility if maximize[0] else -b.utility, b.privacy if maximize[1] else -b.privacy)
    return sa[0] >= sb[0] and sa[1] >= sb[1] and sa != sb


def pareto_front(points: Sequence[Point], *, maximize: tuple[bool, bool] = (True, True)) -> list[int]:
    """Indices of the non-dominated points, ordered by utility (ties: by privacy).

    Identical points do not dominate each other, so duplicates are all on the frontier. The
    quadratic scan is deliberate: a plot holds tens of points, and the plain definition is easiest
    to check.

    Args:
        points: The candidate points.
        maximize: Direction of (utility, privacy); the default maximizes both.

    Raises:
        ValueError: when a coordinate is NaN or infinite (a frontier through it means nothing).
    """
    for p in points:
        if not (math.isfinite(p.utility) and math.isfinite(p.privacy)):
            raise ValueError(f"point {p.label or p} has a non-finite coordinate")
    front = [i for i, p in enumerate(points)
             if not any(dominates(q, p, maximize=maximize) for j, q in enumerate(points) if j != i)]
    return sorted(front, key=lambda i: (points[i].utility, points[i].privacy))


__all__ = ["Point", "dominates", "pareto_front"]
