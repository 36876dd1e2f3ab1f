"""How many cells a grid may make: counted from the axes' lengths before a single cell is built.

A grid is a product: three ``--sweep`` options (or benchmark grid axes) of 100 values each make a million
cells from a one-line command or a 1 KB file, and building and checking them all would take minutes and
gigabytes before anything ran. :func:`count_cells` multiplies the lengths, and :func:`check_cell_count`
refuses a count above the limit (:data:`DEFAULT_MAX_CELLS`, raised with ``--max-cells N``), saying the
count and the flag, so a refusal costs no more than reading the axes.
"""

from __future__ import annotations

import math
from typing import Any, Iterable

from rapt_audit.api.errors import UsageError

#: The most cells a sweep or benchmark builds unless ``--max-cells`` raises it.
DEFAULT_MAX_CELLS = 2_000


def count_cells(lengths: Iterable[int]) -> int:
    """The number of cells of a grid whose axes have ``lengths`` (their product; 1 for no axis)."""
    return math.prod(lengths)


def check_max_cells(limit: Any) -> int:
    """``--max-cells``: a whole number >= 1 (``None``: :data:`DEFAULT_MAX_CELLS`).

    Raises:
        UsageError: for anything else.
    """
    if limit is None:
        return DEFAULT_MAX_CELLS
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise UsageError(f"--max-cells must be a whole number >= 1, got {limit!r}")
    return limit


def check_cell_count(count: int, *, limit: Any, what: str, factors: str = "") -> None:
    """Refuse a grid of more than ``limit`` cells, before any is built.

    Args:
        count: The cells the grid makes (:func:`count_cells`).
        limit: The ``--max-cells`` value (``None``: the default).
        what: What makes them, for the message (``"--sweep"``, ``"benchmark FILE"``).
        factors: How the count arises (``"100 × 100 × 100"``), shown after it.

    Raises:
        UsageError: naming the count, the limit and ``--max-cells``.
    """
    limit = check_max_cells(limit)
    if count > limit:
        how = f" ({factors})" if factors else ""
        raise UsageError(f"{what} makes {count:,} cells{how}, more than the limit of {limit:,}; nothing was built or "
                         f"run. Use fewer values, or raise the limit with --max-cells {count} if you mean it")


__all__ = ["DEFAULT_MAX_CELLS", "check_cell_count", "check_max_cells", "count_cells"]
