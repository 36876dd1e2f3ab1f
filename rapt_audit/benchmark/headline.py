"""The benchmark's first screen (issue #40 item 1, issue #65 item 1): at each target utility, the answer first.

Two tables per task and target (a share of the ceiling), each row of one meaning (issue #65):

**Deployable choices** — a row is one setting a user deploys, and every number on it is that setting's own:

- **deployable setting**: the most private of a defense's private settings whose utility (seeds combined) reaches
  the target; none where no private setting does (or where the defense's frontier misses the target at some seed:
  the reading's rule, so both tables agree on who reaches it);
- **utility** and **worst-case privacy** of that setting: its row of the per-setting tables (``Row.utility``,
  ``Row.privacy[worst_case]``: the mean over its seeds with their Student-t interval), and the attack that was
  strongest most often at its seeds (``weakest to``);
- **vs sending nothing**: that setting's paired margin over the best local-only baseline and its verdict.

Rows of a release kind are ordered by that privacy (no deployable setting last); the no-privacy reference
(``identity``) and the local-only baselines come first, as references.

**The frontier at the target** — a row is a defense, not a setting: its Pareto frontier read at the target itself,
interpolated between the settings named (:mod:`rapt_audit.benchmark.matched`'s reading; "≥" where the grid stops above
it), and the 95 % interval of its rank among every defense (:mod:`rapt_audit.benchmark.paired`: each seed's frontier
read at the target; paired readings only), ordered by the reading. It is kept, apart, because it is what defenses are
compared by at *equal* utility: each deployable setting keeps a utility of its own (0.770 for one defense, 0.797 for
another on the CPU benchmark), so ranking their own privacy would reward a defense for a grid point that happens to
land nearer the target. A reading between two settings is no setting's, so it never shares a row with one.

Everything is read from the :class:`~rapt_audit.benchmark.matched.Matched` table; nothing is computed twice.
"""

from __future__ import annotations

import html
from collections import Counter
from itertools import groupby
from dataclasses import dataclass
from typing import Sequence

from rapt_audit.api.plugins import WORST_CASE
from rapt_audit.api.types import AttackResult, Estimate
from rapt_audit.benchmark.matched import Matched, Reading
from rapt_audit.benchmark.paired import Margin
from rapt_audit.reporting.summary import Row, fmt_estimate, is_local_baseline, is_reference
from rapt_audit.reporting.table import Block, Cell, Column, Foreign, Line as TableLine, Table, measure, table
from rapt_audit.reporting.table_render import cell_text, heading_text, to_html, to_markdown

#: The column the headline reads privacy from.
MEASURE = WORST_CASE
#: The measure the worst case's headline is (declared in :mod:`rapt_audit.scoring.worst_case`): its arrow is the
#: privacy columns'.
PRIVACY = "worst_case_privacy"
#: The deployable-choice table's columns.
_COLUMNS = (Column("defense", foreign=True), Column("deployable setting", foreign=True),
            Column("its utility", numeric=True), measure("its worst-case privacy", PRIVACY),
            Column("weakest to", foreign=True), Column("vs sending nothing"))
#: The frontier table's: a defense's reading at the target, the settings it lies between, its rank.
_FRONTIER = (Column("defense", foreign=True), measure("frontier read at the target (interpolated)", PRIVACY),
             Column("read from", foreign=True), Column("rank of that reading (95 %)", numeric=True))
#: Their headings, as every format shows them.
COLUMNS = tuple(heading_text(c) for c in _COLUMNS)
FRONTIER_COLUMNS = tuple(heading_text(c) for c in _FRONTIER)
#: How the first screen is read: under its tables in the report and the leaderboard alike (and README's Results).
NOTATION = ("How to read these tables: a row of the first is one deployable choice — a defense's most private "
            "setting whose utility (seeds combined) reaches the target, with that setting's own utility and own "
            "worst-case privacy (the strongest inversion attack that reads its release), each the mean over the "
            "seeds with its 95 % interval; rows are ordered by that privacy within each release kind, 'weakest to' "
            "names the attack strongest at most of its seeds and 'vs sending nothing' is its paired margin over the "
            "best local-only baseline. A row of the second is a defense, not a setting: its frontier read at the "
            "target itself, interpolated between the settings it is read from ('≥': its grid stops above the "
            "target), which is what defenses are compared by at equal utility; rows are ordered by that reading, "
            "and the rank is its 95 % interval among every defense (paired bootstrap).")
#: Release kinds as the headline names its groups, in the order it shows them. The sentence-vector defenses (CAPE,
#: DPNR) encode with the client's own model and the service trains a head on the noisy vectors, which the encoder
#: client classifies clean: the group says so, rather than leaving a reader to infer it from the margins (#63).
RELEASES = {"texts": "releases text", "token_embeddings": "releases token vectors",
            "sequence_embeddings": "releases sentence vectors (the client's own encoder, noised: not expected "
                                   "above the encoder client, which classifies the same vectors clean)"}
#: A reading says in how many resamples its target was reached only below this share: above it the note was noise
#: on most cells of the headline (89 notes on the CPU benchmark's leaderboard, 75 of them at 95 % or more).
REACHED_SHOWN_BELOW = 0.95
#: Why a defense has no deployable setting, by its frontier reading's kind.
_NONE = {"not measured": "– (not measured)", "not reached": "none reaches it at every seed",
         "not bracketed": "only its no-privacy setting reaches it"}


@dataclass(frozen=True)
class Line:
    """One row of a headline table: its cells, the group (release kind) it sits in and its place in that group."""

    group: str
    cells: tuple[str, ...]
    order: float


def reading_cell(reading: Reading) -> Cell:
    """A frontier reading as a table's cell: its estimate, ``≥`` before a lower bound, a note of the share of
    resamples that reached the target when under :data:`REACHED_SHOWN_BELOW` (a table says one shared by a row once), or why
    there is none."""
    if reading.value is None:  # not measured, not reached, not bracketed
        return Cell(reading.kind)
    note = f"reached in {100 * reading.reached:.0f} % of resamples" if reading.reached < REACHED_SHOWN_BELOW else ""
    return Cell(reading.value, bound="≥" if reading.kind == "lower bound" else "", note=note)


def reading_text(reading: Reading) -> str:
    """A frontier reading as text: ``0.342 [0.293, 0.388]``, ``≥ ...``, ``... (reached in 87 % of resamples)``."""
    return cell_text(reading_cell(reading))


def _release(row: Row) -> str:
    exposes = row.runs[0].result.defense.get("exposes") or []
    return next((RELEASES[k] for k in RELEASES if k in exposes), "releases " + ", ".join(exposes))


def _weakest_to(row: Row) -> str:
    """The attack the worst case named strongest at most of the row's seeds."""
    named = Counter(o.details.get("strongest_attack") for o in (r.result.attacks.get(MEASURE) for r in row.runs)
                    if isinstance(o, AttackResult) and o.details.get("strongest_attack"))
    return named.most_common(1)[0][0] if named else "–"


def deployable(rows: Sequence[Row], utility: str, target: float) -> Row | None:
    """The most private of ``rows``' private settings whose utility reaches ``target`` (None when none does)."""
    reaching = [r for r in rows if not r.no_privacy and utility in r.utility and r.utility[utility].value >= target
                and isinstance(r.privacy.get(MEASURE), Estimate)]
    return max(reaching, key=lambda r: r.privacy[MEASURE].value, default=None)  # type: ignore[union-attr]


def _candidates(table: Matched, fraction: float) -> list[Reading]:
    """The defenses the headline reads (neither the reference nor a local-only baseline), with their readings."""
    return [r for r in table.readings[MEASURE][fraction] if not is_reference(r.defense) and not is_local_baseline(r.defense)]


def headline(table: Matched, fraction: float) -> list[Line]:
    """The deployable choices at ``fraction`` of the ceiling (this module's docstring): reference rows first, then
    each release kind's defenses ordered by their setting's own worst-case privacy (no deployable setting last).
    Empty when the table has no ceiling or no worst-case column."""
    if table.ceiling is None or table.utility is None or MEASURE not in table.readings:
        return []
    utility, target = table.utility, table.targets[fraction].value
    margins = {id(m.row): m for m in table.against_local}
    lines = []
    for row in table.group.rows:
        if is_reference(row.defense):
            privacy = row.privacy.get(MEASURE)
            lines.append(Line("reference", (f"{row.defense} (no privacy)", "–", fmt_estimate(row.utility[utility])
                                            if utility in row.utility else "–",
                                            fmt_estimate(privacy) if isinstance(privacy, Estimate) else "–",
                                            _weakest_to(row), _margin(margins.get(id(row)))), -2.0))
        elif is_local_baseline(row.defense) and utility in row.utility:
            lines.append(Line("reference", (f"{row.defense} ({row.setting})", "sends nothing",
                                            fmt_estimate(row.utility[utility]), "1 (nothing released)", "–",
                                            "(the baseline)"), -1.0))
    for reading in _candidates(table, fraction):
        mine = [r for r in table.group.rows if r.defense == reading.defense]
        # No deployable setting where the frontier misses the target at some seed (the reading's rule, so that the
        # frontier table below names no reading for a defense this one gives a setting, nor the reverse).
        chosen = deployable(mine, utility, target) if reading.value is not None else None
        if chosen is None:
            why = _NONE.get(reading.kind, "no one setting reaches it (seeds combined)")
            lines.append(Line(_release(mine[0]), (reading.defense, why, "–", "–", "–", "–"), 1.0))
            continue
        privacy = chosen.privacy[MEASURE]
        assert isinstance(privacy, Estimate)  # deployable() chooses only among measured settings
        lines.append(Line(_release(mine[0]), (reading.defense, chosen.setting, fmt_estimate(chosen.utility[utility]),
                                              fmt_estimate(privacy), _weakest_to(chosen),
                                              _margin(margins.get(id(chosen)))), -privacy.value))
    groups = ["reference", *RELEASES.values()]
    return sorted(lines, key=lambda x: (groups.index(x.group) if x.group in groups else len(groups), x.group, x.order))


def frontier(table: Matched, fraction: float) -> list[Line]:
    """Each defense's frontier read at ``fraction`` of the ceiling, with its rank (:data:`FRONTIER_COLUMNS`), ordered
    by the reading (none last): one group, since a rank is among every defense. Empty as :func:`headline` is."""
    if table.ceiling is None or table.utility is None or MEASURE not in table.readings:
        return []
    ranking = table.rankings.get(MEASURE, {}).get(fraction)
    lines = []
    for reading in _candidates(table, fraction):
        ranks = ranking.ranks.get(reading.defense) if ranking is not None else None
        # The settings the seeds' readings lie between, in the per-setting tables' order (a paired reading's seeds
        # may bracket the target with different pairs: every one is named).
        place = {r.setting: i for i, r in enumerate(table.group.rows) if r.defense == reading.defense}
        between = sorted(reading.between, key=lambda s: place.get(s, len(place)))
        lines.append(Line("frontier", (
            reading.defense, reading_text(reading), ", ".join(between) or "–",
            "–" if ranks is None else f"{ranks[0]}" if ranks[0] == ranks[1] else f"{ranks[0]}–{ranks[1]}"),
            -reading.value.value if reading.value is not None else 1.0))
    return sorted(lines, key=lambda x: x.order)


def _margin(found: Margin | None) -> str:
    if found is None:
        return "–"
    verdict = {"beats sending nothing": "yes", "below sending nothing": "no"}.get(found.verdict, "not established")
    return f"{verdict}: {found.margin.value:+.3f} [{found.margin.ci_low:+.3f}, {found.margin.ci_high:+.3f}]"


def _titled(tables: Sequence[Matched],
            fractions: Sequence[float]) -> list[tuple[str, str, str, list[Line], list[Line]]]:
    """Each task and target: the task's name, the two tables' titles and lines (targets without lines left out)."""
    out = []
    for found in tables:
        for fraction in fractions:
            lines = headline(found, fraction)
            if lines:
                at = f"{found.utility} ≥ {found.targets[fraction].value:.3f}"
                out.append((str(found.group.first.dataset.get("name")),
                            f"each defense's most private setting that keeps {100 * fraction:.0f} % of the no-privacy "
                            f"utility ({at})",
                            f"Ranked at equal utility: each defense's frontier read at the target itself "
                            f"({found.utility} = {found.targets[fraction].value:.3f}), interpolated between its "
                            "settings — no one setting's privacy", lines,
                            frontier(found, fraction)))
    return out


def headline_tables(tables: Sequence[Matched], fractions: Sequence[float]) -> list[tuple[Table, Table | None]]:
    """Each task and target's two tables, built once for the report and the leaderboard alike: the deployable
    choices, in blocks by release kind, and the frontier at the target (None where no defense is read)."""
    out = []
    for task, title, below, lines, read in _titled(tables, fractions):
        blocks = [Block(tuple(TableLine(tuple(map(Cell, line.cells))) for line in kind), title=Foreign(name))
                  for name, kind in groupby(lines, key=lambda line: line.group)]
        choices = table(_COLUMNS, blocks=blocks, title=(Foreign(task), f" — {title}"), kind="headline")
        ranked = table(_FRONTIER, [TableLine(tuple(map(Cell, line.cells))) for line in read], title=f"{below}:",
                       kind="frontier") if read else None
        out.append((choices, ranked))
    return out


def headline_markdown(tables: Sequence[Matched], fractions: Sequence[float], provenance: str) -> str:
    """The headline tables in Markdown (two per task and target), then :data:`NOTATION` and one line of ``provenance``
    (Markdown as given: the caller escapes what it read from files). Empty without a table."""
    out: list[str] = []
    for choices, ranked in headline_tables(tables, fractions):
        # Names and settings come from result files (anyone's): escaped. Numbers and verdicts are this module's own
        # text, left plain so they read as written (no "0.80 \\[0.76, 0.84\\]").
        out += to_markdown(choices) + ([""] + to_markdown(ranked) if ranked is not None else []) + [""]
    if out:
        out += [NOTATION, "", provenance, ""]  # the caller's, its names already escaped
    return "\n".join(out)


def headline_html(tables: Sequence[Matched], fractions: Sequence[float], provenance: str) -> str:
    """The same tables in HTML, for the top of the report."""
    parts = [to_html(choices, heading="h3") + (to_html(ranked) if ranked is not None else "")
             for choices, ranked in headline_tables(tables, fractions)]
    if parts:
        parts.append(f"<p class='note'>{html.escape(NOTATION)}</p><p class='note'>{html.escape(provenance)}</p>")
    return "\n".join(parts)


__all__ = ["COLUMNS", "FRONTIER_COLUMNS", "Line", "MEASURE", "NOTATION", "REACHED_SHOWN_BELOW", "RELEASES",
           "deployable", "frontier", "headline", "headline_html", "headline_markdown", "headline_tables",
           "reading_cell", "reading_text"]
