"""The report's "Seed claims" section: :mod:`rapt_audit.reporting.claims`' verdicts rendered as HTML.

Nothing is judged here: the verdicts, their statuses and their differences come from
:func:`rapt_audit.reporting.claims.evaluate`, the same function behind ``rapt-audit claims``, so
the page and the command always agree. Every string is escaped (results come from other people).
"""

from __future__ import annotations

import html
from typing import Sequence

from rapt_audit.api.errors import UsageError
from rapt_audit.reporting.claims import EQUIVALENCE_MARGIN, NON_INFERIORITY_MARGIN, Difference, Verdict, evaluate
from rapt_audit.reporting.summary import Group

e = html.escape


def status_html(status: str) -> str:
    """The status as the report's tag badge, coloured by its class (``status supported``, ``status not-supported``…)."""
    return f"<span class='tag status {e(status.replace(' ', '-'))}'>{e(status)}</span>"


def _difference_row(d: Difference) -> str:
    return (f"<tr><td>{e(d.label)}</td><td class='num'><b>{d.value:+.3f}</b></td>"
            f"<td class='num'>[{d.low:+.3f}, {d.high:+.3f}]</td><td>{e(d.method)}</td></tr>")


def _verdict_html(verdict: Verdict) -> str:
    parts = [f"<h3>{e(verdict.claim)} {status_html(verdict.status)}</h3>", f"<p>{e(verdict.summary)}.</p>"]
    if verdict.differences:
        parts.append("<table class='claim'><thead><tr><th>comparison (a − b)</th><th>difference</th>"
                     "<th>95 % interval</th><th>method</th></tr></thead><tbody>"
                     + "".join(map(_difference_row, verdict.differences)) + "</tbody></table>")
    if verdict.points:
        parts.append("<ul class='points'>" + "".join(f"<li>{e(p)}</li>" for p in verdict.points) + "</ul>")
    return "".join(parts)


def claims_html(groups: Sequence[Group]) -> str:
    """The section judging the seed papers' claims on ``groups`` (each comparison within one group); '' for none.

    Claims with a comparison get a heading with their status, the summary that states the rule and count
    behind it, and each difference with its interval and whether it was paired; claims that are not
    evaluable get one line each, saying why.
    """
    if not groups:
        return ""
    try:
        verdicts = evaluate(groups)
    except UsageError as exc:  # a broken third-party plugin must not stop a report of stored files
        return (f"<section class='claims' id='claims'><h2>Seed claims</h2><p class='note'>Not judged: "
                f"{e(str(exc))}</p></section>")
    judged = [v for v in verdicts if v.status != "not evaluable"]
    missing = [v for v in verdicts if v.status == "not evaluable"]
    parts = ["<section class='claims' id='claims'><h2>Seed claims</h2>",
             "<p class='note'>Whether the seed papers' claims hold in these results (as <code>rapt-audit claims"
             "</code> prints them). Each comparison is a difference a − b of two settings of one comparable "
             "group with its 95 % interval: paired over the same records where both are single runs of one "
             "seed that kept per-record outcomes, otherwise unpaired (from the two intervals). A claim is "
             "<b>supported</b> when every comparison goes its way beyond its interval, <b>not supported</b> when "
             "one goes significantly the other way, <b>inconclusive</b> otherwise. Equal privacy means an interval "
             "inside "
             f"±{EQUIVALENCE_MARGIN:g}; not lower in utility, an interval above −{NON_INFERIORITY_MARGIN:g}; "
             "Pareto dominance compares point estimates. The last claim is this suite's own, about its attacks: "
             "the contextual Bayesian attack at least as strong as the MLP inversion at every private setting "
             f"both read (content privacy higher by at most {NON_INFERIORITY_MARGIN:g}, paired over seeds and "
             "records; against it where significantly higher), or the table shows where not.</p>"]
    parts += map(_verdict_html, judged)
    if missing:
        parts.append("<h3>Not evaluable on these results</h3><ul class='not-evaluable'>" + "".join(
            f"<li>{e(v.claim)} {status_html(v.status)}: {e(v.summary)}</li>" for v in missing) + "</ul>")
    parts.append("</section>")
    return "".join(parts)


__all__ = ["claims_html"]
