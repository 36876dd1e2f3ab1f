"""``rapt-audit leaderboard``: a Markdown leaderboard from stored results.

One table per comparability signature (results whose data, splits, model, profile or attack
settings differ never share a table), one row per defense setting (seeds combined), with utility
and each attack's empirical privacy with its 95 % interval, and a link to the HTML report row.
"""

from __future__ import annotations

import os
from datetime import datetime, timezone
from pathlib import Path
from typing import Sequence
from urllib.parse import quote

from rapt_audit.api.files import write_text_atomic
from rapt_audit.api.outputs import check_outputs
from rapt_audit.api.types import Estimate
from rapt_audit.reporting.collect import Collection, collect
from rapt_audit.reporting.group_tables import row_label, summary_table
from rapt_audit.reporting.markdown import markdown_text
from rapt_audit.reporting.summary import Group, group_results, is_estimator
from rapt_audit.reporting.table import Cell, Code, Column, Foreign, Line, Table, Tag, measure_cell, table
from rapt_audit.reporting.table_render import markdown_of, to_markdown


def _name(name: str) -> str:
    """A name or signature as code when it holds no markup, else as escaped text (a backtick would end the code)."""
    return markdown_of(Code(str(name)))


def git_states(shas: Sequence[str]) -> str:
    """The git states results ran from, short (``-dirty`` kept), each counted once: three named and the rest counted,
    since a grid run in slices over several sessions ran from dozens of commits. A caller that names them twice (a
    benchmark's header and its "ran" line) passes the same list to both, so the counts agree (issue #65)."""
    short = list(dict.fromkeys(s if s.startswith("not ") else s[:12] + ("-dirty" if s.endswith("-dirty") else "")
                               for s in sorted(set(shas))))
    return ", ".join(short[:3]) + (f" and {len(short) - 3} more" if len(short) > 3 else "")


def _link(report: str | None, anchor: str) -> str:
    # The anchor is a hash id; quote() keeps a report path with spaces or parentheses one link target.
    return f"[report]({quote(report)}#{anchor})" if report else ""


def _heading(group: Group, *, report: str | None) -> list[str]:
    """A group's heading and its signature line."""
    first = group.first
    ds = first.dataset
    splits = "/".join(markdown_text(ds.get("splits", {}).get(k, "?"))
                      for k in ("victim_train", "victim_test", "attacker_train", "attacker_valid"))
    return [f"## {markdown_text(ds.get('name'))} · profile {markdown_text(first.config.get('profile'))} · "
            f"model {markdown_text(first.config.get('model'))}",
            "",
            f"Signature {_name(group.signature)} · splits victim train/test, attacker train/valid = {splits}"
            + (f" · {_link(report, group.anchor)}" if report else ""), ""]


def _not_applicable(group: Group) -> list[str]:
    if not group.skipped_attacks:
        return []
    return ["", "Not applicable here: " + "; ".join(
        f"{_name(a)} ({markdown_text(reason)})" for a, reason in group.skipped_attacks.items()) + "."]


def group_table(group: Group, *, report: str | None) -> list[str]:
    """The Markdown lines of one signature group: heading, facts, the per-setting table
    (:func:`~rapt_audit.reporting.group_tables.summary_table`, the report's own), notes."""
    lines = _heading(group, report=report)
    if any(r.synthetic for r in group.rows):
        lines += ["> **WARNING: SYNTHETIC DEMO DATA.** These rows come from the generated demo corpus and say "
                  "nothing about real-world privacy.", ""]
    lines += to_markdown(summary_table(group, report=report))
    measures = {a: note for a in group.measured_attacks if (note := group.measure_note(a))}
    if measures:
        lines += ["", "Not 1 − attack success: " + "; ".join(
            f"{_name(a)} reports {markdown_text(note)}" for a, note in measures.items()) + "."]
    return lines + _not_applicable(group) + [""]


#: The columns of a long table: a line per setting and measure.
LONG_COLUMNS = (Column("defense"), Column("setting"), Column("seeds"), Column("measure"), Column("metric"),
                Column("value [95 %]", numeric=True))


def long_tables(group: Group) -> tuple[Table, Table | None]:
    """One signature group as long tables (issue #40 item 3): a line per defense setting and measure, then a
    defense's own diagnostics (utility variants such as SnD's ``accuracy.client_only``) apart (None without any)."""
    main: list[Line] = []
    own: list[Line] = []
    for row in group.rows:
        first = (row_label(row), Cell(Foreign(row.setting)), Cell(",".join(map(str, row.seeds))))
        for name, est in row.utility.items():
            (own if "." in name else main).append(Line((*first, Cell("utility"), measure_cell(name), Cell(est))))
        for attack in group.measured_attacks:
            outcome = row.privacy.get(attack)
            if isinstance(outcome, Estimate):
                which = Cell(Foreign(attack), tags=(Tag("estimator"),) if is_estimator(attack) else ())
                main.append(Line((*first, which, measure_cell(group.headline(attack)), Cell(outcome))))
    return table(LONG_COLUMNS, main, labels=3), table(LONG_COLUMNS, own, labels=3) if own else None


def long_table(group: Group, *, report: str | None) -> list[str]:
    """One signature group as a long table (issue #40 item 3): a line per defense setting and measure — ``defense |
    setting | seeds | measure | metric | value [95 %]`` — in place of a column per measure (27 columns, most of them
    one defense's, on the CPU benchmark). A defense's own diagnostics follow in a table of their own."""
    main, own = long_tables(group)
    lines = _heading(group, report=report) + to_markdown(main)
    if own is not None:
        lines += ["", "A defense's own diagnostics (variants of its utility it reports beside the service's):", "",
                  *to_markdown(own)]
    return lines + _not_applicable(group) + [""]


def render_leaderboard(coll: Collection, *, report: str | None = None, title: str = "rapt-audit leaderboard",
                       preamble: str = "", headline: str = "", long: bool = False,
                       shas: Sequence[str] | None = None) -> str:
    """The Markdown text of the leaderboard for the results in ``coll``; ``headline`` (a benchmark's first screen)
    comes right under the title, before any provenance or method; ``long`` writes each group as :func:`long_table`;
    ``shas``: the git states the results ran from, where the caller knows them better than each result's
    ``env.git_sha`` (a benchmark's joined row records its task cell's only; default: the results')."""
    groups = group_results(coll.results)
    profiles = sorted({markdown_text(i.result.config.get("profile")) for i in coll.results})
    if shas is None:
        shas = [str(i.result.env.get("git_sha") or "not a git checkout") for i in coll.results]
    now = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [f"# {markdown_text(title)}", ""] + ([headline.rstrip(), ""] if headline else []) + [
             f"**Profile: {', '.join(profiles)}.** {len(coll.results)} result file(s) in {len(groups)} comparable "
             f"group(s); rendered {now} by `rapt-audit leaderboard` from stored results (git "
             f"{markdown_text(git_states(shas))}). Do not edit by hand.", "",
             "Each table holds only results with one comparability signature (data, splits, model, profile, attack "
             "settings). Numbers are value [95 % interval]; ↑ means higher is better for the defender. Empirical "
             "privacy is 1 − attack success unless a note names another measure (attribute inference: "
             "chance-normalised; MSE attacks: the reconstruction error).", ""]
    if preamble:
        lines += [preamble.rstrip(), ""]
    if any(i.result.synthetic for i in coll.results):
        lines += ["> **WARNING: some rows come from SYNTHETIC DEMO DATA** and say nothing about real-world privacy.", ""]
    if coll.problems:
        lines += ["Inputs left out:", ""]
        lines += [f"- {_name(str(p.path))}: {markdown_text(p.message)}" for p in coll.problems] + [""]
    for group in groups:
        lines += (long_table if long else group_table)(group, report=report)
    return "\n".join(lines).rstrip() + "\n"


def write_leaderboard(paths: Sequence[str | Path], *, out: str | Path, report: str | Path | None = None,
                      title: str = "rapt-audit leaderboard", preamble: str = "",
                      preamble_file: str | Path | None = None) -> tuple[Path, Collection]:
    """Read the results under ``paths`` and write the Markdown leaderboard to ``out``.

    Args:
        paths: Run directories, sweep directories or result files.
        out: The Markdown file to write.
        report: The HTML report of the same results; links are written relative to ``out``.
        title: The heading.
        preamble: Markdown placed under the heading (how the runs were made).
        preamble_file: The file ``preamble`` was read from (``out`` may not be it).

    Raises:
        ResultError: when no input is usable.
        UsageError: when ``out`` is one of the inputs, or not a file (:mod:`rapt_audit.api.outputs`).
    """
    out = Path(out)
    coll = collect(paths, calibrations=False)
    coll.require_results("the leaderboard")
    check_outputs([("--out", out)], coll.inputs() + ([("--preamble", preamble_file)] if preamble_file else []))
    link = None
    if report is not None:
        link = os.path.relpath(Path(report).resolve(), out.parent.resolve()).replace(os.sep, "/")
    write_text_atomic(out, render_leaderboard(coll, report=link, title=title, preamble=preamble))
    return out, coll


__all__ = ["LONG_COLUMNS", "git_states", "group_table", "long_table", "long_tables", "markdown_text",
           "render_leaderboard", "write_leaderboard"]
