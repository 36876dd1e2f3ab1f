"""The table a sweep prints when it ends (``rapt-audit run --sweep``): one line per cell, built as a
:class:`~rapt_audit.reporting.table.Table` and drawn as console text."""

from __future__ import annotations

from collections.abc import Sequence

from rapt_audit.api.types import AttackFailure, AttackResult
from rapt_audit.pipeline.results import RunResult
from rapt_audit.pipeline.sweep import Cell as SweepCell
from rapt_audit.reporting.table import Cell, Column, Line, Table, measure, skipped, table
from rapt_audit.reporting.table_render import to_text
from rapt_audit.scoring.metrics import headline_metric


def sweep_table(results: Sequence[tuple[SweepCell, RunResult]]) -> Table:
    """One line per cell: utility, then each attack's headline (4 decimals); each column's arrow is its measure's."""
    utility = list(dict.fromkeys(m for _, r in results for m in r.utility))
    attacks = list(dict.fromkeys(a for _, r in results for a in r.attacks))
    columns = [Column("cell")] + [measure(m) for m in utility]
    for attack in attacks:
        # The measure an attack's headline is (ae_inversion's reconstruction MSE), from its first measured cell.
        found = next((o for _, r in results if isinstance(o := r.attacks.get(attack), AttackResult)), None)
        columns.append(measure(attack, "empirical_privacy" if found is None else
                               headline_metric(found.metrics, found.empirical_privacy)))
    lines = []
    for cell, result in results:
        cells = [Cell(cell.label)]
        cells += [Cell(result.utility[m].value, digits=4) if m in result.utility else skipped("not measured")
                  for m in utility]
        for attack in attacks:
            outcome = result.attacks.get(attack)
            cells.append(Cell("failed", state="fail") if isinstance(outcome, AttackFailure)
                         else Cell(outcome.empirical_privacy.value, digits=4) if isinstance(outcome, AttackResult)
                         else skipped("not run"))
        lines.append(Line(tuple(cells)))
    return table(columns, lines)


def format_sweep(results: Sequence[tuple[SweepCell, RunResult]]) -> str:
    """A compact table: one line per cell, utility then each attack's empirical privacy (:func:`sweep_table`)."""
    if not results:
        return "no cells"
    first = results[0][1]
    lines = [f"sweep on {first.dataset.get('name')}  ({first.signature})"]
    lines += [f"WARNING: {w}" for w in dict.fromkeys(w for _, r in results for w in r.warnings)]
    lines += to_text(sweep_table(results))
    if len({r.signature for _, r in results}) > 1:
        lines.append("note: the cells have different comparability signatures (the sweep changed data, "
                     "splits, model, profile or attack settings); compare them with care")
    return "\n".join(lines)


__all__ = ["format_sweep", "sweep_table"]
