"""The tables of one comparable group (issue #64), built once as :class:`~rapt_audit.reporting.table.Table`: the
per-setting summary that the report and the leaderboard both render, and the report's per-attack and calibration
tables.

Every column of a measure takes its arrow from :func:`rapt_audit.reporting.table.measure` (the metric registry's
direction): an attack's column from the measure its headline is (``empirical_privacy``, or the attack's own, such as
``ae_inversion``'s reconstruction MSE, named under it), a utility's from its own declaration (an error is ``↓``).
"""

from __future__ import annotations

import json
import math
from dataclasses import replace
from typing import Any
from urllib.parse import quote

from rapt_audit.api.types import AttackFailure, Estimate, Skip
from rapt_audit.mechanisms.calibration import RAPT_TABLE_III
from rapt_audit.reporting.summary import Group, Row, is_estimator
from rapt_audit.reporting.table import (Cell, Column, Foreign, Line, Table, Tag, estimate_cell, failed, measure,
                                        skipped, table)

#: Under the share of units a text defense released unchanged (the report's column).
VERBATIM_SUB = "share of units sent as they were; named entities (spaCy) found verbatim"


def measure_name(group: Group, attack: str) -> str:
    """How an attack's headline is named: ``empirical privacy``, or its own measure (``reconstruction_mse``), and
    ``(estimator)`` after an audit estimator's."""
    name = group.headline(attack)
    return ("empirical privacy" if name == "empirical_privacy" else name) + (" (estimator)" if is_estimator(attack)
                                                                             else "")


def attack_column(group: Group, attack: str) -> Column:
    """An attack's column: its name, the arrow of the measure its headline is, and that measure named under it when
    it is not 1 − attack success (an estimator says so too)."""
    headline = group.headline(attack)
    sub = [headline] if headline != "empirical_privacy" else []
    sub += ["estimator"] if is_estimator(attack) else []
    return measure(Foreign(attack), headline, sub=Foreign(", ".join(sub)) if sub else "")


def outcome_cell(outcome: Estimate | Skip | AttackFailure | None, *, detailed: bool = False) -> Cell:
    """An attack's or a utility's cell: its estimate, or why there is none (a failure never shows a number)."""
    if isinstance(outcome, AttackFailure):
        return failed(outcome.message)
    if isinstance(outcome, Skip) or outcome is None:
        return skipped(outcome.reason if outcome is not None else "not run")
    return estimate_cell(outcome, detailed=detailed)


def row_label(row: Row, *, synthetic: bool = False) -> Cell:
    """A setting's defense cell: its name, tagged when it is the no-privacy reference (and, where ``synthetic``,
    when it ran on the synthetic demo corpus)."""
    tags = (Tag("no privacy"),) if row.no_privacy else ()
    tags += (Tag("synthetic", warn=True),) if synthetic and row.synthetic else ()
    return Cell(Foreign(row.defense), tags=tags)


def summary_table(group: Group, *, report: str | None = None, detailed: bool = False) -> Table:
    """One row per setting: defense, setting, seeds, each utility, each measured attack (and, with ``report``, a link
    to the row in that report). ``detailed`` (the report's): each estimate's sample size and method, rows of the
    demo corpus tagged, and the share a text defense released unchanged."""
    util, attacks = group.utility_metrics, group.measured_attacks
    columns = [Column("defense"), Column("setting"), Column("seeds")]
    columns += [measure(Foreign(m)) for m in util] + [attack_column(group, a) for a in attacks]
    verbatim = detailed and any(row.unchanged_share is not None for row in group.rows)
    columns += [Column("released unchanged", sub=VERBATIM_SUB, numeric=True)] if verbatim else []
    columns += [Column("report")] if report else []
    lines = []
    for row in group.rows:
        cells = [row_label(row, synthetic=detailed), Cell(Foreign(row.setting)), Cell(",".join(map(str, row.seeds)))]
        cells += [estimate_cell(row.utility[m], detailed=detailed) if m in row.utility else Cell("—") for m in util]
        cells += [outcome_cell(row.privacy.get(a), detailed=detailed) for a in attacks]
        if verbatim:
            share, entities = row.unchanged_share, row.entities_verbatim
            cells.append(Cell("—" if share is None else f"{100 * share:.1f} %",
                              detail="" if entities is None else f"named entities {entities[0]} of {entities[1]}"))
        if report:
            # The anchor is a hash id; quote() keeps a report path with spaces or parentheses one link target.
            cells.append(Cell("report", link=f"{quote(report)}#{row.anchor}"))
        lines.append(Line(tuple(cells), anchor=row.anchor))
    return table(columns, lines, labels=3, kind="summary")


def _details(details: Any) -> tuple[tuple[str, str], ...]:
    """An attack's facts (first seed), each value cut to 160 characters."""
    items = []
    for key, value in dict(details).items():
        text = json.dumps(value, default=str) if not isinstance(value, str) else value
        items.append((str(key), text[:157] + "…" if len(text) > 160 else text))
    return tuple(items)


def detail_table(group: Group, attack: str) -> Table:
    """The report's table of one attack: each setting's headline and every measure the attack reports, with the
    facts of its first seed."""
    metrics = list(dict.fromkeys(m for r in group.rows for m in r.metrics.get(attack, {})))
    columns = [Column("defense"), Column("setting"), measure(measure_name(group, attack), group.headline(attack))]
    columns += [measure(Foreign(m)) for m in metrics] + [Column("details (first seed)")]
    lines = []
    for row in group.rows:
        label = [Cell(Foreign(row.defense)), Cell(Foreign(row.setting))]
        outcome = row.privacy.get(attack)
        if not isinstance(outcome, Estimate):
            lines.append(Line((*label, replace(outcome_cell(outcome), span=len(metrics) + 2))))
            continue
        first = row.runs[0].result.attacks.get(attack)
        facts = _details(first.details) if first is not None and not isinstance(first, Skip) else ()
        cells = [estimate_cell(outcome, detailed=True)]
        cells += [outcome_cell(row.metrics[attack].get(m), detailed=True) for m in metrics]
        lines.append(Line((*label, *cells, Cell(facts=facts))))
    return table(columns, lines, labels=2)


def calibration_table(group: Group) -> Table | None:
    """Each dχ setting's observed word-replacement probability beside its target and RAPT's Table III (None when no
    row was calibrated)."""
    columns = [Column("defense"), Column("setting"), Column("η in force"), Column("target p", numeric=True),
               Column("observed replacement", numeric=True), Column("forced", numeric=True), Column("units"),
               Column("RAPT Tab. III (BERT-base)", numeric=True)]
    lines = []
    for row in group.rows:
        meta = row.release_meta
        observed, eta = meta.get("observed_replacement"), meta.get("eta")
        if observed is None or eta is None:  # only a defense with η (dχ) is calibrated
            continue
        ref = RAPT_TABLE_III.get(math.inf if str(eta) == "inf" else float(eta))
        target = meta.get("target_replacement")
        forced = (meta.get("verbatim") or {}).get("units_forced_share_of_perturbed")  # absent before issue 28
        lines.append(Line((Cell(Foreign(row.defense)), Cell(Foreign(row.setting)), Cell(Foreign(str(eta))),
                           Cell(None if target is None else float(target)), Cell(float(observed), digits=4),
                           Cell(None if forced is None else float(forced), digits=4),
                           Cell(Foreign(str(meta.get("units_perturbed", "")))), Cell(ref, digits=2))))
    return table(columns, lines, labels=2) if lines else None


__all__ = ["VERBATIM_SUB", "attack_column", "calibration_table", "detail_table", "measure_name", "outcome_cell",
           "row_label", "summary_table"]
