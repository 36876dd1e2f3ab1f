"""The benchmark's drill-down (issue #40 item 3): every defense against every attack at a target, one grid.

Each cell is the defense's privacy under that attack at the target utility (the matched reading of
:mod:`rapt_audit.benchmark.matched`), or says why there is none — and *which* why: an attack that cannot read what
the defense releases ("does not apply": a text attack on sentence vectors, any attack on a local-only baseline) is
drawn apart from a cell that has not finished ("pending") and from an attack that did not run or declined ("not
run"), and from a frontier that does not reach the target ("not reached"). Sanity baselines are not columns (the
report's check line); the no-privacy reference is the first row.
"""

from __future__ import annotations

from rapt_audit.api.types import Skip
from rapt_audit.benchmark.matched import Matched
from rapt_audit.reporting.figures import Figure
from rapt_audit.reporting.overview_figures import AtLeast, heatmap_figure
from rapt_audit.reporting.summary import is_local_baseline, is_reference

#: Skip reasons that mean the attack cannot read the release (pipeline/contracts.unreadable_release's wording).
_DOES_NOT_APPLY = ("needs a release of kind", "does not apply")


def why_not(table: Matched, defense: str, attack: str) -> str:
    """Why ``defense`` has no reading under ``attack``: a state of :data:`rapt_audit.reporting.overview_figures.CELL_STATES`."""
    reasons = [r.privacy.get(attack) for r in table.group.rows if r.defense == defense]
    skips = [s.reason for s in reasons if isinstance(s, Skip)]
    if skips and all(reason.startswith(_DOES_NOT_APPLY) for reason in skips):
        return "does not apply"
    if any(reason.startswith("pending") for reason in skips):
        return "pending"
    return "not run"


def cells(table: Matched, fraction: float, attacks: list[str]) -> tuple[list[str], list[list[float | str]]]:
    """The grid's rows (defenses, the reference first) and cells at ``fraction`` of the ceiling."""
    shown = [d for d in dict.fromkeys(r.defense for r in table.group.rows) if not is_local_baseline(d)]
    defenses = sorted(shown, key=lambda d: not is_reference(d))  # the reference first, the others in their order
    grid: list[list[float | str]] = []
    for defense in defenses:
        row: list[float | str] = []
        for attack in attacks:
            reading = next((r for r in table.readings.get(attack, {}).get(fraction, []) if r.defense == defense), None)
            if reading is not None and reading.value is not None:
                bound = reading.kind == "lower bound"  # the grid stops before the target: drawn "≥"
                row.append(AtLeast(reading.value.value) if bound else reading.value.value)
            elif reading is not None and reading.kind in ("not reached", "not bracketed"):
                row.append("not reached")
            else:
                row.append(why_not(table, defense, attack))
        grid.append(row)
    return defenses, grid


def heatmap(table: Matched, fraction: float, attacks: list[str], *, stem: str) -> Figure | None:
    """The grid at ``fraction`` as a figure (None without a ceiling)."""
    if table.ceiling is None or fraction not in table.targets:
        return None
    defenses, grid = cells(table, fraction, attacks)
    title = f"privacy at {100 * fraction:.0f} % of the ceiling, defense × attack"
    caption = (f"Each defense's privacy (higher = more private) under each attack at {100 * fraction:.0f} % of the "
               f"no-privacy utility ({table.utility} ≥ {table.targets[fraction].value:.3f}), read on its frontier at "
               "the target (interpolated between the settings that bracket it: the defense's reading, not one "
               "setting's); "
               "≥: a lower bound (the defense's grid stops before the target); hatched: the attack cannot read what "
               "the defense releases; grey: pending or not run; dotted: the defense does not reach the target. "
               f"{defenses[0]}: its own privacy, for reference.")  # a ceiling: the reference's row, first
    return heatmap_figure(defenses, attacks, grid, title, caption, stem=stem)


__all__ = ["cells", "heatmap", "why_not"]
