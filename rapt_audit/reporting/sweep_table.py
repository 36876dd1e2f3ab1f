"""The table a sweep prints when it ends (``rapt-audit run --sweep``): one line per cell."""

from __future__ import annotations

from collections.abc import Sequence

from rapt_audit.api.types import AttackFailure, AttackResult
from rapt_audit.pipeline.results import RunResult
from rapt_audit.pipeline.sweep import Cell
from rapt_audit.scoring.metrics import arrow


def format_sweep(results: Sequence[tuple[Cell, RunResult]]) -> str:
    """A compact table: one line per cell, utility then each attack's empirical privacy (↑ = better)."""
    if not results:
        return "no cells"
    first = results[0][1]
    utility = list(dict.fromkeys(m for _, r in results for m in r.utility))
    attacks = list(dict.fromkeys(a for _, r in results for a in r.attacks))
    width = max(len(c.label) for c, _ in results)
    cols = [f"{m} {arrow(m)}".rstrip() for m in utility] + [f"{a} ↑" for a in attacks]  # an error is ↓
    lines = [f"sweep on {first.dataset.get('name')}  ({first.signature})"]
    lines += [f"WARNING: {w}" for w in dict.fromkeys(w for _, r in results for w in r.warnings)]
    lines.append(f"{'cell':<{width}}  " + "  ".join(f"{c:>{max(8, len(c))}}" for c in cols))
    for cell, result in results:
        values = [result.utility[m].value if m in result.utility else None for m in utility]
        for a in attacks:
            outcome = result.attacks.get(a)
            values.append("failed" if isinstance(outcome, AttackFailure) else outcome.empirical_privacy.value
                          if isinstance(outcome, AttackResult) else None)
        cells = ["skipped" if v is None else v if isinstance(v, str) else f"{v:.4f}" for v in values]
        lines.append(f"{cell.label:<{width}}  " + "  ".join(f"{s:>{max(8, len(c))}}" for s, c in zip(cells, cols)))
    if len({r.signature for _, r in results}) > 1:
        lines.append("note: the cells have different comparability signatures (the sweep changed data, "
                     "splits, model, profile or attack settings); compare them with care")
    return "\n".join(lines)


__all__ = ["format_sweep"]
