"""``rapt-audit leaderboard``: a Markdown leaderboard from stored results.

One table per comparability signature (results whose data, splits, model, profile or attack
settings differ never share a table), one row per defense setting (seeds combined), with utility
and each attack's empirical privacy with its 95 % interval, and a link to the HTML report row.
"""

from __future__ import annotations

import argparse
import os
import re
from datetime import datetime, timezone
from pathlib import Path
from typing import Sequence
from urllib.parse import quote

from rapt_audit.api.errors import UsageError
from rapt_audit.api.files import write_text_atomic
from rapt_audit.api.outputs import check_outputs
from rapt_audit.api.types import Estimate
from rapt_audit.reporting.collect import Collection, collect
from rapt_audit.reporting.markdown import markdown_text
from rapt_audit.reporting.summary import Group, fmt_estimate, fmt_outcome, group_results, is_estimator
from rapt_audit.scoring.metrics import arrow


def _name(name: str) -> str:
    """A name or signature as code when it holds no markup, else as escaped text (a backtick would end the code)."""
    return f"`{name}`" if re.fullmatch(r"[\w.:@/=,+|%()-]+", str(name)) else markdown_text(name)


def git_states(shas: Sequence[str]) -> str:
    """The git states results ran from, short (``-dirty`` kept): three named and the rest counted, since a grid run
    in slices over several sessions ran from dozens of commits."""
    short = [s if s.startswith("not ") else s[:12] + ("-dirty" if s.endswith("-dirty") else "") for s in shas]
    return ", ".join(short[:3]) + (f" and {len(short) - 3} more" if len(short) > 3 else "")


def _link(report: str | None, anchor: str) -> str:
    # The anchor is a hash id; quote() keeps a report path with spaces or parentheses one link target.
    return f"[report]({quote(report)}#{anchor})" if report else ""


def group_table(group: Group, *, report: str | None) -> list[str]:
    """The Markdown lines of one signature group: heading, facts, table, notes."""
    first = group.first
    ds = first.dataset
    measured = group.measured_attacks
    splits = "/".join(markdown_text(ds.get("splits", {}).get(k, "?"))
                      for k in ("victim_train", "victim_test", "attacker_train", "attacker_valid"))
    lines = [f"## {markdown_text(ds.get('name'))} · profile {markdown_text(first.config.get('profile'))} · "
             f"model {markdown_text(first.config.get('model'))}",
             "",
             f"Signature {_name(group.signature)} · splits victim train/test, attacker train/valid = {splits}"
             + (f" · {_link(report, group.anchor)}" if report else ""), ""]
    if any(r.synthetic for r in group.rows):
        lines += ["> **WARNING: SYNTHETIC DEMO DATA.** These rows come from the generated demo corpus and say "
                  "nothing about real-world privacy.", ""]
    util = group.utility_metrics
    # Each utility's declared direction (an error such as embedding_mse is lower-is-better), as the console says.
    head = ["defense", "setting", "seeds"] + [f"{markdown_text(m)} {arrow(m)}".rstrip() for m in util]
    # An attack whose headline is its own measure (ae_inversion's reconstruction MSE) says so in its column.
    # An audit estimator (mutual_info) is no adversary: marked, after the attacks.
    head += [f"{markdown_text(a)} ↑"
             + ("" if group.measure_note(a) is None else f" ({markdown_text(group.headline(a))})")
             + (" (estimator)" if is_estimator(a) else "") for a in measured]
    head += ["report"] if report else []
    lines += ["| " + " | ".join(head) + " |", "|" + "|".join(["---"] * 3 + ["---:"] * (len(head) - 3 - bool(report))
                                                             + (["---"] if report else [])) + "|"]
    for row in group.rows:
        cells = [row.defense + (" (no privacy)" if row.no_privacy else ""), row.setting,
                 ",".join(map(str, row.seeds))]
        cells += [fmt_estimate(row.utility[m]) if m in row.utility else "—" for m in util]
        # A failure's message comes from a plugin: escaped like every other text from a result file.
        cells += [fmt_estimate(o) if isinstance(o := row.privacy.get(a), Estimate) else markdown_text(fmt_outcome(o))
                  for a in measured]
        if report:
            cells.append(_link(report, row.anchor))
        cells[:2] = [markdown_text(c) for c in cells[:2]]  # the defense and setting come from the result file
        lines.append("| " + " | ".join(cells) + " |")
    measures = {a: note for a in measured if (note := group.measure_note(a))}
    if measures:
        lines += ["", "Not 1 − attack success: " + "; ".join(
            f"{_name(a)} reports {markdown_text(note)}" for a, note in measures.items()) + "."]
    if group.skipped_attacks:
        lines += ["", "Not applicable here: " + "; ".join(
            f"{_name(a)} ({markdown_text(reason)})" for a, reason in group.skipped_attacks.items()) + "."]
    return lines + [""]


def long_table(group: Group, *, report: str | None) -> list[str]:
    """One signature group as a long table (issue #40 item 3): a line per defense setting and measure — ``defense |
    setting | seeds | measure | metric | value [95 %]`` — in place of a column per measure (27 columns, most of them
    one defense's, on the CPU benchmark). A defense's own diagnostics (utility variants such as SnD's
    ``accuracy.client_only``) follow in a section of their own."""
    lines = group_table(group, report=report)[:2 + 2]  # the heading and the signature line
    lines += ["| defense | setting | seeds | measure | metric | value [95 %] |", "|---|---|---|---|---|---:|"]
    own: list[str] = []
    for row in group.rows:
        first = [markdown_text(row.defense + (" (no privacy)" if row.no_privacy else "")), markdown_text(row.setting),
                 ",".join(map(str, row.seeds))]
        for name, est in row.utility.items():
            line = "| " + " | ".join(first + ["utility", f"{markdown_text(name)} {arrow(name)}".rstrip(),
                                              fmt_estimate(est)]) + " |"
            (own if "." in name else lines).append(line)
        for attack in group.measured_attacks:
            outcome = row.privacy.get(attack)
            if isinstance(outcome, Estimate):
                metric = group.headline(attack)
                lines.append("| " + " | ".join(first + [markdown_text(attack) + (" (estimator)" if is_estimator(attack)
                                                                                 else ""),
                                                        f"{markdown_text(metric)} {arrow(metric)}".rstrip(),
                                                        fmt_estimate(outcome)]) + " |")
    if own:
        lines += ["", "A defense's own diagnostics (variants of its utility it reports beside the service's):", "",
                  "| defense | setting | seeds | measure | metric | value [95 %] |", "|---|---|---|---|---|---:|", *own]
    if group.skipped_attacks:
        lines += ["", "Not applicable here: " + "; ".join(
            f"{_name(a)} ({markdown_text(reason)})" for a, reason in group.skipped_attacks.items()) + "."]
    return lines + [""]


def render_leaderboard(coll: Collection, *, report: str | None = None, title: str = "rapt-audit leaderboard",
                       preamble: str = "", headline: str = "", long: bool = False) -> str:
    """The Markdown text of the leaderboard for the results in ``coll``; ``headline`` (a benchmark's first screen)
    comes right under the title, before any provenance or method; ``long`` writes each group as :func:`long_table`."""
    groups = group_results(coll.results)
    profiles = sorted({markdown_text(i.result.config.get("profile")) for i in coll.results})
    shas = sorted({str(i.result.env.get("git_sha") or "not a git checkout") for i in coll.results})
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


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register the ``leaderboard`` sub-command."""
    p = sub.add_parser("leaderboard", help="Markdown leaderboard of stored results, one table per signature")
    p.add_argument("runs", nargs="+", metavar="RUN_DIR", help="run or sweep directories (or result files)")
    p.add_argument("-o", "--out", default="leaderboard.md", help="Markdown file to write (default leaderboard.md)")
    p.add_argument("--report", default=None, help="HTML report of the same runs, for the row links")
    p.add_argument("--title", default="rapt-audit leaderboard")
    p.add_argument("--preamble", default=None, metavar="FILE", help="Markdown file placed under the heading")


def cmd_leaderboard(args: argparse.Namespace) -> int:
    """Entry of ``rapt-audit leaderboard``."""
    preamble = ""
    if args.preamble:
        try:
            preamble = Path(args.preamble).read_text(encoding="utf-8")
        except OSError as exc:
            raise UsageError(f"--preamble {args.preamble} cannot be read: {exc.strerror or exc}") from None
    out, coll = write_leaderboard(args.runs, out=args.out, report=args.report, title=args.title, preamble=preamble,
                                  preamble_file=args.preamble)
    coll.warn_problems()
    print(f"wrote {out} ({len(coll.results)} result(s))")
    return 0


__all__ = ["add_parser", "cmd_leaderboard", "git_states", "group_table", "markdown_text", "render_leaderboard",
           "write_leaderboard"]
