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
from pathlib import Path
from typing import Any, Callable, Sequence

from rapt_audit.api.files import write_text_atomic
from rapt_audit.api.outputs import check_outputs
from rapt_audit.api.plugins import ATTACKS, WORST_CASE, load as load_plugins
from rapt_audit.api.types import Estimate
from rapt_audit.benchmark.ceiling import no_privacy_checks
from rapt_audit.benchmark.drilldown import heatmap
from rapt_audit.benchmark.headline import headline_html, headline_markdown
from rapt_audit.benchmark.join import Joined, join
from rapt_audit.benchmark.matched import FRACTIONS, REFERENCE, Matched, Reading, matched
from rapt_audit.benchmark.paired import Margin
from rapt_audit.benchmark.run import COPY_FILE, INDEX_FILE
from rapt_audit.benchmark.status import code_summary, fresh_counts
from rapt_audit.pipeline.results import RESULT_FILE, signature_fields
from rapt_audit.pipeline.sweep import SWEEP_INDEX
from rapt_audit.reporting.claims import evaluate, format_markdown
from rapt_audit.reporting.overview_figures import headline_figure, small_multiples_figure
from rapt_audit.reporting.leaderboard import git_states, render_leaderboard
from rapt_audit.reporting.markdown import markdown_text
from rapt_audit.reporting.report import write_report
from rapt_audit.reporting.summary import fmt_estimate, group_results, is_local_baseline

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
                f"{REFERENCE} is the no-privacy reference and the local-only baselines are utility references, never "
                "candidates. Where results kept no per-record outcomes the verdict says '(unpaired)': a parametric "
                "bootstrap from each setting's seed-combined interval.")


CEILING_NOTE = ("No-privacy check: each defense at η = ∞ (ε = ∞) adds no noise, so under the same service it "
                f"should land inside {REFERENCE}'s interval; a defense whose service differs says so "
                "(rapt_audit/benchmark/ceiling.py).")


LOCAL_NOTE = ("Against sending nothing: the local-only baselines classify on the client with what it already holds "
              "and its own labelled data, releasing nothing (defenses/local.py). Each setting's utility minus the best "
              "of them (the best client in each resample, which favours the baseline), paired over seeds and records, "
              "and the share of the service's gain over that baseline (identity's utility minus it) the setting keeps "
              "(none where it falls below the baseline, only its upper bound where that is not established).")
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
    is as unbounded (RAPT η = 75 on sst2-cpu read −0.688 [−2.769, 0.054]), while "at most 0.054" is what it says."""
    if margin.share is None:
        return "no gain to keep"
    if margin.verdict == "below sending nothing":
        return "none (below the baseline)"
    if margin.verdict == "not established":
        return f"at most {max(margin.share.ci_high, 0.0):.3f} (not established)"
    return fmt_estimate(margin.share)


#: A reading says in how many resamples its target was reached only below this share: above it the note was noise
#: on most cells of the headline (89 notes on the CPU benchmark's leaderboard, 75 of them at 95 % or more).
REACHED_SHOWN_BELOW = 0.95


def _reading_text(reading: Reading) -> str:
    if reading.value is None:  # not measured, not reached, not bracketed
        return reading.kind
    text = ("≥ " if reading.kind == "lower bound" else "") + fmt_estimate(reading.value)
    if reading.reached < REACHED_SHOWN_BELOW:
        text += f" (reached in {100 * reading.reached:.0f} % of resamples)"
    return text


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
    shas = sorted({str(r.env.get("git_sha") or "not a git checkout") for r in cells})
    platforms = sorted({f"{r.env.get('platform', '?')}, {r.env.get('device', '?')}, "
                        f"{r.env.get('threads', '?')} thread(s) per cell" for r in cells})
    seconds = sum(float(r.env.get("wall_time_s") or 0.0) for r in cells)
    return (f"{code_summary(cells)}; from git {git_states(shas)}; on {'; '.join(platforms)}; {seconds / 3600:.2f} h "
            "of cell time in all (cells side by side with --jobs overlap, so the elapsed time is shorter)")


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
            "the code that rendered this). Worst-case "
            "privacy is the strongest inversion attack that reads the release; the method, the per-attack tables, "
            "signatures and full provenance are below.")


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
        parts.append(f"<p>Ceiling ({REFERENCE}, {e(str(table.utility))}): {e(fmt_estimate(table.ceiling))}.</p>")
        checks = no_privacy_checks(table, index, joined.pending)
        if checks:
            parts.append(f"<p class='note'>{e(CEILING_NOTE)}</p><table><thead><tr><th>defense</th><th>setting</th>"
                         f"<th>{e(str(table.utility))}</th><th>against {REFERENCE}</th></tr></thead><tbody>" + "".join(
                             f"<tr><th scope='row'>{e(c.defense)}</th><td>{e(c.setting)}</td><td class='num'>"
                             f"{e(fmt_estimate(c.utility) if c.utility else '–')}</td><td>{e(c.text(table.ceiling))}"
                             "</td></tr>" for c in checks) + "</tbody></table>")
        if (against := local_rows(table)):
            parts.append(f"<p class='note'>{e(LOCAL_NOTE)}</p><table><thead><tr>"
                         + "".join(f"<th>{e(h)}</th>" for h in LOCAL_HEAD) + "</tr></thead><tbody>" + "".join(
                             f"<tr><th scope='row'>{e(r[0])}</th>" + "".join(f"<td>{e(v)}</td>" for v in r[1:])
                             + "</tr>"
                             for r in against) + "</tbody></table>")
        parts += [f"<p class='note'>{e(line)}</p>" for line in sanity_lines(table)]
        attacks = _attacks(table)
        for f in FRACTIONS:
            head = "".join(f"<th>{e(a)}</th>" for a in attacks)
            defenses = [r.defense for r in table.readings[attacks[0]][f]] if attacks else []
            body = []
            for defense in defenses:
                cells = "".join(f"<td class='num'>{e(_reading_text(_find(table, a, f, defense)))}</td>"
                                for a in attacks)
                tag = " <span class='tag'>reference</span>" if defense == REFERENCE else ""
                body.append(f"<tr><th scope='row'>{e(defense)}{tag}</th>{cells}</tr>")
            best = "".join(f"<td>{e(table.verdicts[a][f])}</td>" for a in attacks)
            power = "".join(f"<td class='num'>{e(_detectable(table, a, f))}</td>" for a in attacks)
            parts.append(f"<h4>utility = {100 * f:.0f} % of the ceiling: {e(str(table.utility))} "
                         f"{e(fmt_estimate(table.targets[f]))}</h4><table><thead><tr><th>defense</th>{head}</tr>"
                         f"</thead><tbody>{''.join(body)}<tr><th scope='row'>best</th>{best}</tr>"
                         f"<tr><th scope='row'>{e(DETECTABLE)}</th>{power}</tr></tbody></table>")
    parts.append("</section>")
    return "\n".join(parts)


#: The row under each matched table that states its resolution (issue #38 item 5).
DETECTABLE = "detectable difference (80 % power)"


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
        lines += [f"Ceiling ({REFERENCE}, {t(table.utility)}): {fmt_estimate(table.ceiling)}.", ""]
        checks = no_privacy_checks(table, index, joined.pending)
        if checks:
            lines += [CEILING_NOTE, "", f"| defense | setting | {t(table.utility)} | against {REFERENCE} |",
                      "|---|---|---:|---|"]
            lines += [f"| {t(c.defense)} | {t(c.setting)} | {fmt_estimate(c.utility) if c.utility else '–'} | "
                      f"{t(c.text(table.ceiling))} |" for c in checks]
            lines.append("")
        if (against := local_rows(table)):
            lines += [LOCAL_NOTE, "", "| " + " | ".join(LOCAL_HEAD) + " |", "|---|---|---:|---:|---:|---|"]
            lines += ["| " + " | ".join(t(v) if i < 2 else v for i, v in enumerate(r)) + " |" for r in against] + [""]
        lines += [x for line in sanity_lines(table) for x in (t(line), "")]
        attacks = _attacks(table)
        for f in FRACTIONS:
            lines += [f"**Utility = {100 * f:.0f} % of the ceiling** ({t(table.utility)} "
                      f"{fmt_estimate(table.targets[f])}): empirical privacy ↑", "",
                      "| defense | " + " | ".join(t(a) for a in attacks) + " |",
                      "|---|" + "---:|" * len(attacks)]
            for reading in (table.readings[attacks[0]][f] if attacks else []):
                d = reading.defense
                lines.append(f"| {t(d)}{' (reference)' if d == REFERENCE else ''} | "
                             + " | ".join(_reading_text(_find(table, a, f, d)) for a in attacks) + " |")
            lines += ["| **best** | " + " | ".join(t(table.verdicts[a][f]) for a in attacks) + " |",
                      f"| {DETECTABLE} | " + " | ".join(_detectable(table, a, f) for a in attacks) + " |", ""]
    return "\n".join(lines)


def write_benchmark_report(folder: str | Path, *, out: str | Path | None = None,
                           leaderboard: str | Path | None = None,
                           title: str | None = None) -> tuple[Path, Path, Joined]:
    """Render a benchmark folder's report (HTML) and leaderboard (Markdown), and the seed papers' claims
    over its joined rows (``FOLDER/claims.md``, what ``rapt-audit claims`` prints for a set of runs).

    Args:
        folder: The output folder of ``rapt-audit benchmark run``.
        out: The HTML file (default ``FOLDER/index.html``; figures go to ``figures/`` beside it).
        leaderboard: The Markdown file (default ``FOLDER/leaderboard.md``).
        title: The heading (default ``benchmark NAME``).

    Raises:
        ResultError: when the folder holds no benchmark index or no finished cell of a task.
        UsageError: when an output is one of the files read, or two outputs are one file
            (:func:`rapt_audit.api.outputs.check_outputs`): nothing is written.
    """
    folder = Path(folder)
    joined = join(folder)
    index = joined.index
    out = Path(out) if out is not None else folder / "index.html"
    leaderboard = Path(leaderboard) if leaderboard is not None else folder / "leaderboard.md"
    # The output rule, before any rendering: no output is the index, a cell's result or another output.
    read = [("the index", folder / INDEX_FILE), ("the copy", folder / COPY_FILE), ("the sweep index",
             folder / SWEEP_INDEX)] + [("a cell's result", folder / c["name"] / RESULT_FILE) for c in index["cells"]]
    check_outputs([("--out", out), ("--leaderboard", leaderboard), ("the claims", folder / "claims.md")], read)
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
                                                      long=True))
    claims = format_markdown(evaluate(group_results(joined.collection.results)))
    write_text_atomic(folder / "claims.md", f"# The seed papers' claims on benchmark {markdown_text(index['name'])}\n\n"
                      f"{claims}")
    return out, leaderboard, joined


__all__ = ["CEILING_NOTE", "DETECTABLE", "LOCAL_NOTE", "MATCHED_NOTE", "SEEDS_NOTE", "local_rows", "matched_html",
           "matched_markdown", "sanity_lines", "write_benchmark_report"]
