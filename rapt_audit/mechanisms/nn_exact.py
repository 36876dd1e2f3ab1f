"""Float64 brute-force nearest-neighbour search in numpy: the reference ranking, and the index's cold start.

:class:`~rapt_audit.mechanisms.nn_search.NearestNeighbourIndex` promises the outputs of this
search: the row of the largest float64 score ``q·e − ‖e‖²/2`` per query, the lowest row on ties
(what ``argmin ‖q − e‖²`` gives exactly, without forming ``q − e``). It is ~2,000 queries/s on one
core, far slower than the index, but it needs no torch: a user's device that privatizes one short
text answers it here and never pays the 1–1.5 s of importing torch (``cold_queries`` of the index).
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["Float64Search", "as_matrix", "exact_nearest"]


def as_matrix(name: str, x: Any, dim: int | None = None) -> np.ndarray:
    """``x`` as a finite 2-D real array; ValueError naming the problem otherwise."""
    arr = np.asarray(x)
    if arr.ndim == 1 and dim is not None and arr.shape[0] == dim:
        arr = arr[None, :]
    if arr.ndim != 2 or arr.dtype.kind not in "fiu":
        raise ValueError(f"{name} must be a 2-D float array, but has shape {arr.shape} and dtype {arr.dtype}")
    if dim is not None and arr.shape[1] != dim:
        raise ValueError(f"{name} must have {dim} columns (the table's width), but has {arr.shape[1]}")
    # Chunked, so that checking a long input never allocates an n × d temporary.
    bad = np.concatenate([s + np.flatnonzero(~np.isfinite(arr[s:s + 65536]).all(axis=1))
                          for s in range(0, arr.shape[0], 65536)] + [np.empty(0, dtype=np.int64)])
    if bad.size:
        raise ValueError(f"{name} contain NaN or infinite values in {bad.size} row(s) (first: row {bad[0]}); "
                         "refusing to search (argmin over NaN/inf silently returns row 0)")
    return arr


class Float64Search:
    """Exact search over a fixed table by float64 scores ``q·e − ‖e‖²/2`` (numpy only).

    Args:
        table: ``(V, d)`` finite table; a float64 copy is kept (8·V·d bytes).
    """

    def __init__(self, table: np.ndarray) -> None:
        self.table = np.asarray(as_matrix("table rows", table), dtype=np.float64)
        if self.table.shape[0] == 0:
            raise ValueError("table must have at least one row")
        self.half_sq = 0.5 * np.einsum("ij,ij->i", self.table, self.table)

    def nearest(self, queries: np.ndarray, *, chunk: int = 512) -> np.ndarray:
        """int64 row of the nearest table vector per query (lowest row on ties), ``chunk × V`` scores at a time."""
        q = as_matrix("queries", queries, self.table.shape[1])
        out = np.empty(q.shape[0], dtype=np.int64)
        for s in range(0, q.shape[0], chunk):
            # argmax returns the first maximum: ties go to the lowest row, as the index's do.
            out[s:s + chunk] = np.argmax(np.asarray(q[s:s + chunk], dtype=np.float64) @ self.table.T - self.half_sq,
                                         axis=1)
        return out


def exact_nearest(table: np.ndarray, queries: np.ndarray, *, chunk: int = 512) -> np.ndarray:
    """Brute-force float64 reference: row of the L2-nearest table vector per query (lowest on ties).

    Ranks by ``q·e − ‖e‖²/2`` (``‖q‖²`` is constant per query), chunk by chunk, so memory stays at
    ``chunk × V`` float64. Meant for tests and benchmarks; the index's cold start uses the same search.
    """
    return Float64Search(table).nearest(queries, chunk=chunk)
