"""The benchmark's first screen (issue #40 item 1): one row per defense at a target utility, the answer first.

For each target (a share of the ceiling) and each defense, grouped by what it releases and ranked inside the
group by its reading:

- **setting at the target**: the setting a user deploys — the most private of its private settings whose
  utility (seeds combined) reaches the target; none where no private setting does;
- **utility** of that setting;
- **worst-case privacy at the target**: the defense's frontier under the strongest inversion attack that reads its
  release (``worst_case``, computed inside each resample) read at the target, with its interval (the reading of
  :mod:`rapt_audit.benchmark.matched`; "≥" where the grid stops above it), and the attack that was strongest most
  often at the deployable setting (``weakest to``);
- **vs sending nothing**: that setting's paired margin over the best local-only baseline and its verdict;
- **rank**: the 95 % rank interval of that reading among every defense (:mod:`rapt_audit.benchmark.paired`: each
  seed's frontier read at the target; paired readings only).

Rows of a release kind are ranked by that reading (no reading last).

The no-privacy reference (``identity``) and the local-only baselines are reference rows. Everything is read
from the :class:`~rapt_audit.benchmark.matched.Matched` table; nothing is computed twice.
"""

from __future__ import annotations

import html
from collections import Counter
from dataclasses import dataclass
from typing import Sequence

from rapt_audit.api.plugins import WORST_CASE
from rapt_audit.api.types import AttackResult, Estimate
from rapt_audit.benchmark.matched import REFERENCE, Matched, Reading
from rapt_audit.benchmark.paired import Margin
from rapt_audit.reporting.markdown import markdown_text as t
from rapt_audit.reporting.summary import Row, fmt_estimate, is_local_baseline

#: The column the headline reads privacy from, and the columns it shows.
MEASURE = WORST_CASE
COLUMNS = ("defense", "setting at the target", "utility", "worst-case privacy at the target ↑", "weakest to",
           "vs sending nothing", "rank")
#: The cells that hold names read from result files (defense, setting, attack): the ones Markdown escapes.
_FOREIGN = frozenset({0, 1, 4})
#: Release kinds as the headline names its groups, in the order it shows them. The sentence-vector defenses (CAPE,
#: DPNR) encode with the client's own model and the service trains a head on the noisy vectors, which the encoder
#: client classifies clean: the group says so, rather than leaving a reader to infer it from the margins (#63).
RELEASES = {"texts": "releases text", "token_embeddings": "releases token vectors",
            "sequence_embeddings": "releases sentence vectors (the client's own encoder, noised: not expected "
                                   "above the encoder client, which classifies the same vectors clean)"}


@dataclass(frozen=True)
class Line:
    """One row of the headline: the cells of :data:`COLUMNS`, and the group (release kind) it sits in."""

    group: str
    cells: tuple[str, ...]
    order: float


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


def headline(table: Matched, fraction: float) -> list[Line]:
    """The headline's lines at ``fraction`` of the ceiling: reference rows first, then each release kind's defenses
    ranked by their reading (no reading last). Empty when the table has no ceiling or no worst-case column."""
    if table.ceiling is None or table.utility is None or MEASURE not in table.readings:
        return []
    utility, target = table.utility, table.targets[fraction].value
    readings: dict[str, Reading] = {r.defense: r for r in table.readings[MEASURE][fraction]}
    ranking = table.rankings.get(MEASURE, {}).get(fraction)
    margins = {id(m.row): m for m in table.against_local}
    lines = []
    for row in table.group.rows:
        if row.defense == REFERENCE:
            privacy = row.privacy.get(MEASURE)
            lines.append(Line("reference", (f"{row.defense} (no privacy)", "–", fmt_estimate(row.utility[utility])
                                            if utility in row.utility else "–",
                                            fmt_estimate(privacy) if isinstance(privacy, Estimate) else "–",
                                            _weakest_to(row), _margin(margins.get(id(row))), "–"), -2.0))
        elif is_local_baseline(row.defense) and utility in row.utility:
            lines.append(Line("reference", (f"{row.defense} ({row.setting})", "sends nothing",
                                            fmt_estimate(row.utility[utility]), "1 (nothing released)", "–",
                                            "(the baseline)", "–"), -1.0))
    for defense in dict.fromkeys(r.defense for r in table.group.rows):
        if defense == REFERENCE or is_local_baseline(defense) or defense not in readings:
            continue
        mine = [r for r in table.group.rows if r.defense == defense]
        # No deployable setting where the frontier does not reach the target at every seed (the reading's rule).
        reading = readings[defense]
        chosen = deployable(mine, utility, target) if reading.value is not None else None
        # The frontier's reading at the target (as the per-attack tables below, paired where the results allow): the
        # same number the row is ranked by; "≥" where the grid stops above the target.
        value = (("≥ " if reading.kind == "lower bound" else "") + fmt_estimate(reading.value)
                 if reading.value is not None else reading.kind)
        ranks = ranking.ranks.get(defense) if ranking is not None else None
        lines.append(Line(_release(mine[0]), (
            defense, chosen.setting if chosen is not None else
            "–" if reading.kind == "not measured" or reading.value is not None else "none reaches it at every seed",
            fmt_estimate(chosen.utility[utility]) if chosen is not None else "–", value,
            _weakest_to(chosen) if chosen is not None else "–",
            _margin(margins.get(id(chosen))) if chosen is not None else "–",
            ("–" if ranks is None else f"{ranks[0]}" if ranks[0] == ranks[1] else f"{ranks[0]}–{ranks[1]}")),
            -reading.value.value if reading.value is not None else 1.0))  # the frontier's reading orders the group
    groups = ["reference", *RELEASES.values()]
    return sorted(lines, key=lambda x: (groups.index(x.group) if x.group in groups else len(groups), x.group, x.order))


def _margin(found: Margin | None) -> str:
    if found is None:
        return "–"
    verdict = {"beats sending nothing": "yes", "below sending nothing": "no"}.get(found.verdict, "not established")
    return f"{verdict}: {found.margin.value:+.3f} [{found.margin.ci_low:+.3f}, {found.margin.ci_high:+.3f}]"


def _titled(tables: Sequence[Matched], fractions: Sequence[float]) -> list[tuple[str, str, list[Line]]]:
    """Each task and target: the task's name, the title after it, and the lines (targets without lines left out)."""
    out = []
    for table in tables:
        for fraction in fractions:
            lines = headline(table, fraction)
            if lines:
                out.append((str(table.group.first.dataset.get("name")), f"the most private defenses at "
                            f"{100 * fraction:.0f} % of the no-privacy utility ({table.utility} ≥ "
                            f"{table.targets[fraction].value:.3f})", lines))
    return out


def headline_markdown(tables: Sequence[Matched], fractions: Sequence[float], provenance: str) -> str:
    """The headline tables in Markdown (one per task and target), each followed by one line of ``provenance`` (Markdown
    as given: the caller escapes what it read from files)."""
    out = []
    for task, title, lines in _titled(tables, fractions):
        out += [f"**{t(task)} — {title}**", "", "| " + " | ".join(COLUMNS) + " |", "|---|---|---:|---:|---|---|---:|"]
        group = None
        for line in lines:
            if line.group != group:
                group = line.group
                out.append(f"| *{t(group)}* |" + " |" * (len(COLUMNS) - 1))
            # Names and settings come from result files (anyone's): escaped. Numbers and verdicts are this module's
            # own text, left plain so they read as written (no "0.80 \\[0.76, 0.84\\]").
            out.append("| " + " | ".join(t(c) if i in _FOREIGN else c for i, c in enumerate(line.cells)) + " |")
        out += ["", provenance, ""]  # the caller's, its names already escaped
    return "\n".join(out)


def headline_html(tables: Sequence[Matched], fractions: Sequence[float], provenance: str) -> str:
    """The same tables in HTML, for the top of the report."""
    e = html.escape
    parts = []
    for task, title, lines in _titled(tables, fractions):
        parts.append(f"<h3>{e(task)} — {e(title)}</h3><table class='headline'><thead><tr>"
                     + "".join(f"<th>{e(c)}</th>" for c in COLUMNS) + "</tr></thead><tbody>")
        group = None
        for line in lines:
            if line.group != group:
                group = line.group
                parts.append(f"<tr><th colspan='{len(COLUMNS)}' scope='rowgroup'>{e(group)}</th></tr>")
            parts.append(f"<tr><th scope='row'>{e(line.cells[0])}</th>"
                         + "".join(f"<td>{e(c)}</td>" for c in line.cells[1:]) + "</tr>")
        parts.append(f"</tbody></table><p class='note'>{e(provenance)}</p>")
    return "\n".join(parts)


__all__ = ["COLUMNS", "Line", "MEASURE", "RELEASES", "deployable", "headline", "headline_html", "headline_markdown"]
