"""``rapt-audit benchmark report``: the report and the leaderboard of a benchmark folder.

Both are the existing ones (:func:`rapt_audit.reporting.report.write_report`,
:func:`rapt_audit.reporting.leaderboard.render_leaderboard`) rendered from the joined results
(:mod:`~rapt_audit.benchmark.join`: one row per defense setting, seeds combined, every attack family
in it), with the benchmark's headline placed first: what it ran (protocol, datasets per attack
family, families not run, cells still pending), how intervals combine seeds, and privacy at matched
utility (:mod:`~rapt_audit.benchmark.matched`) with the best defense at each target.
"""

from __future__ import annotations

import html
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from rapt_audit.api.files import write_text_atomic
from rapt_audit.api.outputs import check_outputs
from rapt_audit.api.plugins import ATTACKS, WORST_CASE, load as load_plugins
from rapt_audit.api.types import Estimate
from rapt_audit.benchmark.ceiling import no_privacy_checks
from rapt_audit.benchmark.claims import CLAIMS_FILE, claims_markdown
from rapt_audit.benchmark.drilldown import heatmap
from rapt_audit.benchmark.headline import headline_html, headline_markdown, reading_cell
from rapt_audit.benchmark.join import Joined, join
from rapt_audit.benchmark.matched import FRACTIONS, Matched, Reading, matched
from rapt_audit.benchmark.paired import Margin
from rapt_audit.benchmark.run import COPY_FILE, INDEX_FILE
from rapt_audit.benchmark.status import code_summary, fresh_counts
from rapt_audit.pipeline.results import RESULT_FILE, signature_fields
from rapt_audit.pipeline.sweep import SWEEP_INDEX
from rapt_audit.reporting.overview_figures import headline_figure, small_multiples_figure
from rapt_audit.reporting.leaderboard import git_states, render_leaderboard
from rapt_audit.reporting.markdown import markdown_text
from rapt_audit.reporting.report import write_report
from rapt_audit.reporting.group_tables import attack_column
from rapt_audit.reporting.summary import fmt_estimate, group_results, is_local_baseline
from rapt_audit.reporting.table import Cell, Column, Foreign, Line, Table, Tag, measure, table as make_table
from rapt_audit.reporting.table_render import to_html, to_markdown

e = html.escape

#: How the report says seeds are combined (the same rule as every report: ``scoring.stats.seed_summary``).
SEEDS_NOTE = ("Seeds: each seed draws its own victim and attacker records (the splits are seeded by the run "
              "seed) and its own training randomness, so the spread of the per-seed estimates holds both the "
              "record and the seed-to-seed variance. A setting's value is the mean over its seeds, with a 95 % "
              "Student-t interval over the per-seed estimates (n − 1 degrees of freedom: wide with few seeds, as it "
              "should be); a single seed keeps its record-bootstrap interval.")
MATCHED_NOTE = ("Privacy at matched utility: each seed's Pareto frontier of a defense's private settings is read at "
                "the target, a share of that seed's own ceiling, by linear interpolation between the two settings "
                "that bracket it, and the readings are averaged over the seeds; 'not reached' where no setting keeps "
                "that much utility (never extrapolated), 'not bracketed' where only the no-privacy setting does (no "
                "chord towards sending the text in the clear), '≥' where every private setting keeps more (the grid "
                "stops before the target: a lower bound). Intervals: a paired hierarchical bootstrap — the seeds "
                "drawn with replacement, then each drawn seed's victim records, jointly for every defense, since "
                "each sees the same records at a seed (rapt_audit/scoring/hierarchical.py); never narrower than "
                "the Student-t interval over the per-seed readings, since resampling a few seeds under-covers. "
                "Best: the highest reading, with its probability of being best over the resamples; its lead over "
                "another defense is established when it holds in enough resamples where either reaches the target "
                "and in the paired t-test over the seeds (Holm over the comparisons, one-sided 2.5 %; a joint "
                "non-reach is left out, not counted as a tie; one seed establishes nothing). "
                "The no-privacy reference and the local-only baselines are utility references, never "
                "candidates. Where results kept no per-record outcomes the verdict says '(unpaired)': a parametric "
                "bootstrap from each setting's seed-combined interval.")


CEILING_NOTE = ("No-privacy check: each defense at η = ∞ (ε = ∞) adds no noise, so under the same service it "
                "should land inside the no-privacy reference's interval; a defense whose service differs says so "
                "(rapt_audit/benchmark/ceiling.py).")


LOCAL_NOTE = ("Against sending nothing: the local-only baselines classify on the client with what it already holds "
              "and its own labelled data, releasing nothing (defenses/local.py). Each setting's utility minus the best "
              "of them (the best client in each resample, which favours the baseline), paired over seeds and records, "
              "and the share of the service's gain over that baseline (the reference's utility minus it) the setting "
              "keeps (none where it falls below the baseline, only its upper bound where that is not established). A "
              "share is at most the whole gain by its meaning: a setting whose utility lies above the reference's (by "
              "chance, or by noise that regularizes the service) keeps all of it, shown "
              "'≥ 1 (above the reference)', and an interval's end above one is shown '≥ 1'.")
LOCAL_HEAD = ("defense", "setting", "utility", "over the best local-only baseline", "share of the service's gain kept",
              "verdict")


def local_rows(table: Matched) -> list[tuple[str, ...]]:
    """The against-sending-nothing table's rows (:data:`LOCAL_HEAD`): the baselines, then every other setting."""
    if not table.against_local or table.utility is None:
        return []
    baselines = [r for r in table.group.rows if is_local_baseline(r.defense) and table.utility in r.utility]
    rows = [(r.defense, r.setting, fmt_estimate(r.utility[table.utility]), "local-only baseline", "", "")
            for r in baselines]
    return rows + [(m.row.defense, m.row.setting, fmt_estimate(m.row.utility[table.utility]), fmt_estimate(m.margin),
                    _share_cell(m), m.verdict) for m in table.against_local]


def _share_cell(margin: Margin) -> str:
    """The share of the service's gain a setting keeps; "none" below sending nothing, where the ratio only grows
    without bound as the gain shrinks (−10.3 for DPNR at ε = 1 on sst2-paper) and reads as no share at all.
    Where the margin is not established either way only the upper bound is shown: the lower end of that ratio
    is as unbounded (RAPT η = 75 on sst2-cpu read −0.688 [−2.769, 0.054]), while "at most 0.054" is what it says.
    A share is bounded by its meaning, at most the whole gain: a setting above the reference's utility has a ratio
    over one (issue #65: "at most 1.200" for a plugin's p = 0.1), shown "≥ 1", never as a share above one; a shown
    value is compared, so the reference's own 1 (a ratio with rounding error) reads 1.000."""
    if margin.share is None:
        return "no gain to keep"
    if margin.verdict == "below sending nothing":
        return "none (below the baseline)"
    share = margin.share
    if margin.verdict == "not established":
        if _above_one(share.ci_high):
            return "not established (anywhere from none to ≥ 1)"
        return f"at most {max(share.ci_high, 0.0):.3f} (not established)"
    if _above_one(share.ci_low):
        return "≥ 1 (above the reference)"  # the whole interval: no end left to show
    value = "≥ 1 (above the reference)" if _above_one(share.value) else _bounded(share.value)
    return f"{value} [{_bounded(share.ci_low)}, {_bounded(share.ci_high)}]"


def _above_one(value: float) -> bool:
    """Whether a share reads above one as shown (three decimals)."""
    return round(value, 3) > 1.0


def _bounded(value: float) -> str:
    """A share or an end of its interval, inside its meaning's [0, 1]: "≥ 1" above it."""
    return "≥ 1" if _above_one(value) else f"{max(value, 0.0):.3f}"


def _roles(index: dict[str, Any], escape: Callable[[str], str] = str) -> str:
    """The models of the client and the service (issue #63): apart, or one model in both roles, which the line then
    says is a regime where sending nothing wins by construction (the service is no larger than the client)."""
    if index.get("service_model"):
        return f"client model {escape(str(index['model']))}, service model {escape(str(index['service_model']))}"
    return (f"model {escape(str(index['model']))} as client and service alike (a service no larger than the client: "
            "sending nothing is favoured by construction)")


def _facts(index: dict[str, Any], joined: Joined) -> list[tuple[str, str]]:
    """What the benchmark ran, as ``(heading, text)``: the same facts for the HTML and the Markdown."""
    facts = [("benchmark", f"{index['name']} (file {index['file']}, sha256 {str(index.get('file_sha256'))[:12]}), "
                           f"profile {index['profile']}, {_roles(index)}, seeds "
                           f"{', '.join(map(str, index['seeds']))}"),
             ("service", f"{index.get('service_text', 'default')} (as the reference ran it: "
                         f"{index.get('protocol', 'not yet run')}): applied to every defense whose service "
                         "customizes the encoder (a method parameter); the others train their own head on what they "
                         "release"),
             ("datasets", "; ".join([f"utility on {', '.join(index['tasks'])}"] + [
                 f"{family} attacks ({', '.join(index['family_attacks'].get(family, [])) or 'none selected'}) on "
                 f"{dataset}" for family, dataset in index["datasets"].items()]))]
    facts += [("not run", f"{family} attacks ({', '.join(names)}): the benchmark names no {family} dataset")
              for family, names in index.get("not_run", {}).items()]
    if joined.pending:
        shown = ", ".join(c["name"] for c in joined.pending[:6]) + (" ..." if len(joined.pending) > 6 else "")
        facts.append(("pending", f"{len(joined.pending)} of {len(index['cells'])} cells have no result yet ({shown}); "
                                 "their rows or attacks are missing: run the benchmark again to finish them"))
    if joined.cells:
        facts.append(("ran", _provenance(list(joined.cells.values()))))
    if index.get("description"):
        facts.insert(0, ("about", str(index["description"])))
    return facts


def _provenance(cells: Sequence[Any]) -> str:
    """Which code and machine made the finished cells, and what they cost: the code per component and how many
    cells are fresh or stale against the code rendering this (:func:`~rapt_audit.benchmark.status.code_summary`:
    cells signed with one digest of the whole package are one component, ``all``), the git states the cells ran
    from (a modified tree says ``-dirty``; a grid run in slices over several sessions lists many), the platforms
    and threads, and the sum of the cells' wall times."""
    platforms = sorted({f"{r.env.get('platform', '?')}, {r.env.get('device', '?')}, "
                        f"{r.env.get('threads', '?')} thread(s) per cell" for r in cells})
    seconds = sum(float(r.env.get("wall_time_s") or 0.0) for r in cells)
    return (f"{code_summary(cells)}; from git {git_states(cell_shas(cells))}; on {'; '.join(platforms)}; "
            f"{seconds / 3600:.2f} h of cell time in all (cells side by side with --jobs overlap, so the elapsed "
            "time is shorter)")


def cell_shas(cells: Sequence[Any]) -> list[str]:
    """The git states a benchmark's cells ran from: the one list its leaderboard's header and its "ran" line both
    name (a joined row records its task cell's only, so the rows' would miss a state that ran only attack cells)."""
    return [str(r.env.get("git_sha") or "not a git checkout") for r in cells]


def _is_sanity(attack: str) -> bool:
    """A sanity baseline (tagged ``baseline``: ``random_guess`` ignores the release, so it reads the same for every
    defense by construction): one check line, never a column of the matched tables or a "best" verdict."""
    load_plugins()
    return attack in ATTACKS and "baseline" in ATTACKS.entry(attack).tags


def first_line(index: dict[str, Any], joined: Joined, escape: Callable[[str], str] = str) -> str:
    """The one line of provenance under the headline: what ran, and where the rest is (``escape``: for the benchmark's
    name, the one part read from a file)."""
    codes = sorted({code for cell in joined.cells.values() if (code := signature_fields(cell.signature).get("code"))})
    seeds = ", ".join(map(str, index["seeds"]))
    fresh, stale = fresh_counts(list(joined.cells.values()))
    return (f"{escape(str(index['name']))} — profile {index['profile']}, {_roles(index, escape)}, seeds {seeds}, "
            f"{len(joined.cells)} of "
            f"{len(index['cells'])} cells, code {', '.join(codes) or 'unknown'} ({fresh} fresh, {stale} stale against "
            "the code that rendered this). The method, "
            "the per-attack tables, signatures and full provenance are below.")


def _attacks(table: Matched) -> list[str]:
    return [a for a in table.readings if not _is_sanity(a)]


def sanity_lines(table: Matched) -> list[str]:
    """One line per sanity baseline: its range over every measured setting, which should not depend on the defense."""
    lines = []
    for attack in (a for a in table.readings if _is_sanity(a)):
        values = [r.privacy[attack].value for r in table.group.rows if isinstance(r.privacy.get(attack), Estimate)]
        if values:
            lines.append(f"Check: {attack} (a sanity baseline that ignores the release) reads {min(values):.3f} – "
                         f"{max(values):.3f} over {len(values)} settings; it should not depend on the defense.")
    return lines


#: The row under each matched table that states its resolution (issue #38 item 5).
DETECTABLE = "detectable difference (80 % power)"


@dataclass(frozen=True)
class TaskTables:
    """One task's tables, built once for the report and the leaderboard: the no-privacy checks, the comparison with
    sending nothing, and privacy at matched utility at each target (one table per target)."""

    checks: Table | None
    local: Table | None
    at: tuple[Table, ...]


def task_tables(index: dict[str, Any], joined: Joined, table: Matched) -> TaskTables:
    """The tables of one task whose ceiling was read (:class:`TaskTables`)."""
    assert table.ceiling is not None  # the callers say "Not read" instead
    checks = no_privacy_checks(table, index, joined.pending)
    check_table = make_table(
        [Column("defense", foreign=True), Column("setting", foreign=True), measure(Foreign(str(table.utility))),
         Column(f"against {table.reference}", foreign=True)],
        [Line((Cell(c.defense), Cell(c.setting), Cell(c.utility if c.utility is not None else "–"),
               Cell(c.text(table.ceiling))))
         for c in checks]) if checks else None
    against = local_rows(table)
    local_table = make_table(
        [Column(h, foreign=i < 2, numeric=1 < i < 5) for i, h in enumerate(LOCAL_HEAD)],
        [Line(tuple(map(Cell, r))) for r in against]) if against else None
    attacks = _attacks(table)
    at = []
    for f in FRACTIONS:
        lines = [Line((Cell(Foreign(r.defense), tags=(Tag("reference"),) if r.defense == table.reference else ()),
                       *(reading_cell(_find(table, a, f, r.defense)) for a in attacks)))
                 for r in (table.readings[attacks[0]][f] if attacks else [])]
        lines += [Line((Cell("best", strong=True), *(Cell(Foreign(table.verdicts[a][f])) for a in attacks))),
                  Line((Cell(DETECTABLE), *(Cell(_detectable(table, a, f)) for a in attacks)))]
        at.append(make_table([Column("defense"), *(attack_column(table.group, a) for a in attacks)], lines,
                             title=(f"Utility = {100 * f:.0f} % of the ceiling (", Foreign(str(table.utility)),
                                    f" {fmt_estimate(table.targets[f])}): each defense's frontier read at the target")))
    return TaskTables(check_table, local_table, tuple(at))


def matched_html(index: dict[str, Any], joined: Joined, tables: Sequence[Matched]) -> str:
    """The report's benchmark section: the facts, the seed rule, and each task's matched-utility tables."""
    parts = ["<section class='group' id='benchmark'><h2>Benchmark: privacy at matched utility</h2><ul>"]
    parts += [f"<li><strong>{e(head)}</strong>: {e(text)}</li>" for head, text in _facts(index, joined)]
    parts += ["</ul>", f"<p class='note'>{e(SEEDS_NOTE)}</p>", f"<p class='note'>{e(MATCHED_NOTE)}</p>"]
    for table in tables:
        first = table.group.first
        parts.append(f"<h3>task {e(str(first.dataset.get('name')))}</h3>"
                     f"<p class='sig'>signature <code>{e(table.group.signature)}</code></p>")
        if table.ceiling is None:
            parts.append(f"<p class='note'>Not read: {e(table.note)}.</p>")
            continue
        parts.append(f"<p>Ceiling ({e(str(table.reference))}, {e(str(table.utility))}): {e(fmt_estimate(table.ceiling))}.</p>")
        built = task_tables(index, joined, table)
        if built.checks is not None:
            parts.append(f"<p class='note'>{e(CEILING_NOTE)}</p>" + to_html(built.checks))
        if built.local is not None:
            parts.append(f"<p class='note'>{e(LOCAL_NOTE)}</p>" + to_html(built.local))
        parts += [f"<p class='note'>{e(line)}</p>" for line in sanity_lines(table)]
        parts += [to_html(at, heading="h4") for at in built.at]
    parts.append("</section>")
    return "\n".join(parts)


def _detectable(table: Matched, attack: str, fraction: float) -> str:
    """The smallest paired difference the column would detect (:func:`rapt_audit.scoring.hierarchical.
    minimum_detectable`), or why there is none."""
    ranking = table.rankings.get(attack, {}).get(fraction)
    if ranking is None:
        return "– (unpaired)"
    return "–" if ranking.detectable is None else f"{ranking.detectable:.3f}"


def _find(table: Matched, attack: str, fraction: float, defense: str) -> Reading:
    return next(r for r in table.readings[attack][fraction] if r.defense == defense)


def matched_markdown(index: dict[str, Any], joined: Joined, tables: Sequence[Matched]) -> str:
    """The leaderboard's headline: the same facts and matched-utility tables, in Markdown."""
    t = markdown_text
    lines = ["## Privacy at matched utility", ""]
    lines += [f"- **{t(head)}**: {t(text)}" for head, text in _facts(index, joined)]
    # This module's own notes and numbers are written plain (an escaped "\\[0.76, 0.84\\]" reads badly on a code host);
    # every name or text read from a result file or the benchmark file goes through markdown_text.
    lines += ["", SEEDS_NOTE, "", MATCHED_NOTE, ""]
    for table in tables:
        lines += [f"### task {t(table.group.first.dataset.get('name'))}", ""]
        if table.ceiling is None:
            lines += [f"Not read: {t(table.note)}.", ""]
            continue
        lines += [f"Ceiling ({t(table.reference)}, {t(table.utility)}): {fmt_estimate(table.ceiling)}.", ""]
        built = task_tables(index, joined, table)
        if built.checks is not None:
            lines += [CEILING_NOTE, "", *to_markdown(built.checks), ""]
        if built.local is not None:
            lines += [LOCAL_NOTE, "", *to_markdown(built.local), ""]
        lines += [x for line in sanity_lines(table) for x in (t(line), "")]
        for at in built.at:
            lines += [*to_markdown(at), ""]
    return "\n".join(lines)


def claims_file(folder: str | Path, *, out: str | Path | None = None, leaderboard: str | Path | None = None,
                claims: str | Path | None = None) -> Path:
    """Where a benchmark's report writes the claims: ``claims`` where given, else ``claims.md`` beside the leaderboard
    where one is named, else beside the report where one is named, else in the folder: the claims follow the outputs
    a user sent elsewhere, and a command writes no file where it was not asked to write."""
    if claims is not None:
        return Path(claims)
    named = leaderboard if leaderboard is not None else out
    return (Path(named).parent if named is not None else Path(folder)) / CLAIMS_FILE


def write_benchmark_report(folder: str | Path, *, out: str | Path | None = None,
                           leaderboard: str | Path | None = None, claims: str | Path | None = None,
                           title: str | None = None) -> tuple[Path, Path, Joined]:
    """Render a benchmark folder's report (HTML) and leaderboard (Markdown), and the seed papers' claims
    over its joined rows (``claims.md``, what ``rapt-audit claims FOLDER`` prints:
    :mod:`~rapt_audit.benchmark.claims`).

    Args:
        folder: The output folder of ``rapt-audit benchmark run``.
        out: The HTML file (default ``FOLDER/index.html``; figures go to ``figures/`` beside it).
        leaderboard: The Markdown file (default ``FOLDER/leaderboard.md``).
        claims: The claims' Markdown file (default: :func:`claims_file`, ``claims.md`` beside the outputs named).
        title: The heading (default ``benchmark NAME``).

    Raises:
        ResultError: when the folder holds no benchmark index or no finished cell of a task.
        UsageError: when an output is one of the files read, or two outputs are one file
            (:func:`rapt_audit.api.outputs.check_outputs`): nothing is written.
    """
    folder = Path(folder)
    joined = join(folder)
    index = joined.index
    claims = claims_file(folder, out=out, leaderboard=leaderboard, claims=claims)
    out = Path(out) if out is not None else folder / "index.html"
    leaderboard = Path(leaderboard) if leaderboard is not None else folder / "leaderboard.md"
    # The output rule, before any rendering: no output is the index, a cell's result or another output.
    read = [("the index", folder / INDEX_FILE), ("the copy", folder / COPY_FILE), ("the sweep index",
             folder / SWEEP_INDEX)] + [("a cell's result", folder / c["name"] / RESULT_FILE) for c in index["cells"]]
    check_outputs([("--out", out), ("--leaderboard", leaderboard), ("--claims", claims)], read)
    title = title or f"rapt-audit benchmark {index['name']}"
    joined.collection.require_results(f"the report of benchmark {index['name']} (no task cell has finished)")
    tables = [matched(group) for group in group_results(joined.collection.results)]
    first = first_line(index, joined)  # the report escapes it as HTML; the leaderboard's is escaped as Markdown
    figures = [fig for i, table in enumerate(tables, 1) if table.ceiling is not None and table.utility is not None
               for fig in (headline_figure(table.group, table.utility, table.ceiling.value, FRACTIONS, WORST_CASE,
                                           stem=f"headline-{i}"),
                           *(heatmap(table, f, _attacks(table), stem=f"heatmap-{i}-{100 * f:.0f}") for f in FRACTIONS),
                           small_multiples_figure(table.group, table.utility, _attacks(table), stem=f"attacks-{i}"))
               if fig is not None]
    write_report([], out=out, title=title, collection=joined.collection,
                 headline=headline_html(tables, FRACTIONS, first), headline_figures=figures,
                 detail=matched_html(index, joined, tables))
    link = os.path.relpath(out.resolve(), leaderboard.parent.resolve()).replace(os.sep, "/")
    write_text_atomic(leaderboard, render_leaderboard(joined.collection, report=link, title=title,
                                                      preamble=matched_markdown(index, joined, tables),
                                                      headline=headline_markdown(
                                                          tables, FRACTIONS, first_line(index, joined, markdown_text)),
                                                      long=True, shas=cell_shas(list(joined.cells.values()))))
    write_text_atomic(claims, claims_markdown(joined))  # what rapt-audit claims FOLDER prints
    return out, leaderboard, joined


__all__ = ["CEILING_NOTE", "DETECTABLE", "LOCAL_NOTE", "MATCHED_NOTE", "SEEDS_NOTE", "TaskTables", "cell_shas",
           "claims_file", "local_rows", "matched_html", "matched_markdown", "sanity_lines", "write_benchmark_report"]
