"""``rapt-audit report``: one self-contained HTML file from stored results (nothing is re-run).

The page has no script and loads nothing: figures are PNG ``data:`` URIs, styles are inline, and a
Content-Security-Policy forbids every other source, so a reader can open it offline and a browser
makes no network request. Figures are also written as PNG and SVG files next to the report.
"""

from __future__ import annotations

import base64
import html
import json
import math
import os
import sys
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Sequence
from urllib.parse import quote

from rapt_audit.api.errors import ResultError
from rapt_audit.api.files import write_bytes_atomic, write_text_atomic
from rapt_audit.api.outputs import check_outputs, folder_exists, make_dir
from rapt_audit.api.plugins import ATTACKS, load
from rapt_audit.api.registry import describe
from rapt_audit.api.types import AttackFailure, Estimate, Skip
from rapt_audit.api.version import __version__
from rapt_audit.mechanisms.calibration import RAPT_TABLE_III
from rapt_audit.pipeline.results import SYNTHETIC_WARNING
from rapt_audit.reporting.audits import audit_docs_html
from rapt_audit.reporting.claims_html import claims_html
from rapt_audit.reporting.collect import Collection, collect, relative_path
from rapt_audit.reporting.figures import Figure, deniability_figure, group_figures, pick_utility, replacement_figure
from rapt_audit.reporting.sections import pretraining_note, provenance_html, selection_note, warnings_html
from rapt_audit.reporting.style import CSP, STYLE
from rapt_audit.reporting.summary import Group, group_results, is_estimator, safe_id
from rapt_audit.reporting.threats import threat_sections_html
from rapt_audit.scoring.metrics import METRICS
from rapt_audit.scoring.metrics import arrow as metric_arrow

e = html.escape


@dataclass
class Report:
    """What :func:`build_report` made: the HTML text and the figures it embeds."""

    html: str
    figures: list[Figure] = field(default_factory=list)
    groups: list[Group] = field(default_factory=list)


def _registries() -> tuple[Any, Any]:
    """The metric and attack registries with plugins loaded (plugins register their metrics)."""
    try:
        load()
    except Exception:  # noqa: BLE001 - a broken third-party plugin must not stop a report of stored files
        pass
    return METRICS, ATTACKS


def arrow(metric: str) -> str:
    """:func:`rapt_audit.scoring.metrics.arrow` once the plugins' metrics are declared."""
    _registries()
    return metric_arrow(metric)


def _est_cell(est: Any) -> str:
    if isinstance(est, AttackFailure):  # never a number: the attack raised or broke its contract
        return f'<td class="fail" title="{e(est.message)}">failed: <span class="why">{e(est.message)}</span></td>'
    if isinstance(est, Skip) or est is None:
        reason = est.reason if est is not None else "not run"
        return f'<td class="skip" title="{e(reason)}">skipped<span class="why">{e(reason)}</span></td>'
    how = f"{est.level:.0%} interval, {est.method or 'method not recorded'}, n = {est.n}"
    return (f'<td class="num" title="{e(how)}"><b>{est.value:.3f}</b> '
            f'<span class="ci">[{est.ci_low:.3f}, {est.ci_high:.3f}]</span><span class="n">n={est.n}'
            f'{" · " + e(est.method.replace("bootstrap-percentile", "bootstrap")) if est.method else ""}</span></td>')


def _summary_table(group: Group) -> str:
    util, attacks = group.utility_metrics, group.measured_attacks
    head = "".join(f"<th>{e(m)} {arrow(m)}</th>" for m in util)
    head += "".join(f'<th>{e(a)} {arrow(group.headline(a))}<span class="sub">{e(_measure_name(group, a))}</span></th>'
                    for a in attacks)
    verbatim = any(row.unchanged_share is not None for row in group.rows)
    head += ('<th>released unchanged<span class="sub">share of units sent as they were; named entities (spaCy) '
             'found verbatim</span></th>' if verbatim else "")
    body = []
    for row in group.rows:
        flags = ' <span class="tag">no privacy</span>' if row.no_privacy else ""
        flags += ' <span class="tag warn">synthetic</span>' if row.synthetic else ""
        cells = "".join(_est_cell(row.utility.get(m)) for m in util)
        cells += "".join(_est_cell(row.privacy.get(a)) for a in attacks)
        if verbatim:
            share, entities = row.unchanged_share, row.entities_verbatim
            named = "" if entities is None else f'<span class="sub">named entities {entities[0]} of {entities[1]}</span>'
            cells += f'<td class="num">{"—" if share is None else f"{100 * share:.1f} %"}{named}</td>'
        body.append(f'<tr id="{e(row.anchor)}"><th scope="row">{e(row.defense)}{flags}</th><td>{e(row.setting)}</td>'
                    f'<td>{", ".join(map(str, row.seeds))}</td>{cells}</tr>')
    return (f'<table class="summary"><thead><tr><th>defense</th><th>setting</th><th>seeds</th>{head}</tr></thead>'
            f'<tbody>{"".join(body)}</tbody></table>')


def _measure_name(group: Group, attack: str) -> str:
    """How an attack's headline column is named: ``empirical privacy``, or its own measure (``reconstruction_mse``)."""
    name = group.headline(attack)
    return ("empirical privacy" if name == "empirical_privacy" else name) + (" (estimator)" if is_estimator(attack)
                                                                             else "")


def _figure_html(fig: Figure, files_rel: str | None) -> str:
    data = base64.b64encode(fig.png).decode("ascii")
    links = ""
    if files_rel is not None:
        # A relative URL whatever the folder is called: quote() encodes ':', '#', '?' and spaces.
        base = files_rel.replace(os.sep, "/")
        links = (f' <a href="{e(quote(f"{base}/{fig.stem}.png"))}">PNG</a> · '
                 f'<a href="{e(quote(f"{base}/{fig.stem}.svg"))}">SVG</a>')
    return (f'<figure id="fig-{e(fig.stem)}"><img alt="{e(fig.caption)}" src="data:image/png;base64,{data}">'
            f'<figcaption>{e(fig.caption)}{links}</figcaption></figure>')


def _calibration_table(group: Group) -> str:
    rows = []
    for row in group.rows:
        meta = row.release_meta
        observed = meta.get("observed_replacement")
        if observed is None or meta.get("eta") is None:  # only a defense with η (dχ) is calibrated
            continue
        eta = meta.get("eta")
        eta_num = math.inf if str(eta) == "inf" else float(eta) if eta is not None else math.nan
        ref = RAPT_TABLE_III.get(eta_num)
        target = meta.get("target_replacement")
        forced = (meta.get("verbatim") or {}).get("units_forced_share_of_perturbed")  # absent before issue 28
        rows.append(f"<tr><th scope='row'>{e(row.defense)}</th><td>{e(row.setting)}</td>"
                    f"<td>{e(str(eta))}</td><td>{'' if target is None else f'{float(target):.3f}'}</td>"
                    f"<td class='num'>{float(observed):.4f}</td>"
                    f"<td class='num'>{'' if forced is None else f'{float(forced):.4f}'}</td>"
                    f"<td>{e(str(meta.get('units_perturbed', '')))}</td>"
                    f"<td>{'' if ref is None else f'{ref:.2f}'}</td></tr>")
    if not rows:
        return ""
    return ("<h3>Calibration: word-replacement probability</h3><p class='note'>Observed on the victim-test release "
            "of each run (the fraction of privatized units whose released word differs from the input). RAPT "
            "Table III was measured on BERT-base, a different embedding model, so equal η need not mean equal "
            "replacement. Forced: the share of privatized units no candidate equals (replaced at every finite η, a "
            "floor under the observed replacement; blank in results written before it was counted).</p><table><thead>"
            "<tr><th>defense</th><th>setting</th><th>η in force</th><th>target p</th><th>observed replacement</th>"
            "<th>forced</th><th>units</th><th>RAPT Tab. III (BERT-base)</th>"
            f"</tr></thead><tbody>{''.join(rows)}</tbody></table>")


def _details_text(details: Any) -> str:
    items = []
    for key, value in dict(details).items():
        text = json.dumps(value, default=str) if not isinstance(value, str) else value
        if len(text) > 160:
            text = text[:157] + "…"
        items.append(f"<li><code>{e(str(key))}</code>: {e(text)}</li>")
    # Collapsed by default (native <details>, no script): the facts are long and mostly for auditors.
    return (f"<details><summary>{len(items)} facts</summary><ul class='details'>{''.join(items)}</ul></details>"
            if items else "")


def _attack_detail(group: Group, attack: str) -> str:
    _, attacks = _registries()
    about = ""
    if attack in attacks:
        about = f"<p class='note'>{e(describe(attacks.get(attack)))}</p>"
    metric_names = list(dict.fromkeys(m for r in group.rows for m in r.metrics.get(attack, {})))
    head = "".join(f"<th>{e(m)} {arrow(m)}</th>" for m in metric_names)
    body = []
    for row in group.rows:
        outcome = row.privacy.get(attack)
        if isinstance(outcome, AttackFailure):
            body.append(f"<tr><th scope='row'>{e(row.defense)}</th><td>{e(row.setting)}</td>"
                        f"<td colspan='{len(metric_names) + 2}' class='fail'>failed: {e(outcome.message)}</td></tr>")
            continue
        if isinstance(outcome, Skip) or outcome is None:
            reason = outcome.reason if outcome is not None else "not run"
            body.append(f"<tr><th scope='row'>{e(row.defense)}</th><td>{e(row.setting)}</td>"
                        f"<td colspan='{len(metric_names) + 2}' class='skip'>skipped: {e(reason)}</td></tr>")
            continue
        first = row.runs[0].result.attacks.get(attack)
        details = _details_text(first.details) if first is not None and not isinstance(first, Skip) else ""
        cells = "".join(_est_cell(row.metrics[attack].get(m)) for m in metric_names)
        body.append(f"<tr><th scope='row'>{e(row.defense)}</th><td>{e(row.setting)}</td>{_est_cell(outcome)}"
                    f"{cells}<td>{details}</td></tr>")
    return (f"<section class='attack' id='{group.anchor}-attack-{safe_id(attack)}'><h4>{e(attack)}</h4>{about}"
            f"<table><thead><tr><th>defense</th><th>setting</th><th>{e(_measure_name(group, attack))} "
            f"{arrow(group.headline(attack))}</th>{head}"
            f"<th>details (first seed)</th></tr></thead><tbody>{''.join(body)}</tbody></table></section>")


def _group_html(group: Group, figs: dict[str, Figure], files_rel: str | None, base: Path) -> str:
    first = group.first
    ds = first.dataset
    splits = ", ".join(f"{k} {v}" for k, v in ds.get("splits", {}).items())
    parts = [f"<section class='group' id='{group.anchor}'>",
             f"<h2>{e(str(ds.get('name')))} · profile {e(str(first.config.get('profile')))} · "
             f"model {e(str(first.config.get('model')))}</h2>",
             f"<p class='sig'>signature <code>{e(group.signature)}</code></p>",
             f"<p class='note'>splits: {e(splits)}. Only results with this exact signature appear in this section; "
             "↑ means higher is better for the defender. Empirical privacy is 1 − attack success unless a note "
             "below names another measure (attribute inference: chance-normalised; MSE attacks: the reconstruction "
             "error); intervals are 95 %.</p>"]
    if any(r.synthetic for r in group.rows):
        parts.append(f"<p class='banner warn'><strong>{e(SYNTHETIC_WARNING)}</strong></p>")
    measures = {a: note for a in group.measured_attacks if (note := group.measure_note(a))}
    if measures:  # a column of another measure must not pass for 1 − attack success
        parts.append("<p class='note'><strong>Not 1 − attack success:</strong> " + "; ".join(
            f"<code>{e(a)}</code> reports {e(note)}" for a, note in measures.items()) + ".</p>")
    parts.append(warnings_html(group))
    parts += ["<h3>Summary</h3>", _summary_table(group), pretraining_note(group), selection_note(group)]
    if group.skipped_attacks:
        parts.append("<p class='note'>Not applicable here (skipped for every setting): " + "; ".join(
            f"<code>{e(a)}</code> ({e(reason)})" for a, reason in group.skipped_attacks.items()) + ".</p>")
    if figs:
        parts += ["<h3>Privacy–utility Pareto plots</h3>", "<div class='figs'>",
                  *(_figure_html(f, files_rel) for f in figs.values()), "</div>"]
    else:
        parts.append("<p class='note'>No Pareto plot: no row has both a utility measure and a measured attack.</p>")
    parts.append(_calibration_table(group))
    parts.append("<h3>Per-attack detail, by threat model</h3>")
    parts += threat_sections_html(group, group.measured_attacks, lambda a: _attack_detail(group, a))
    parts.append(provenance_html(group, base))
    parts.append("</section>")
    return "\n".join(parts)


def _calibration_docs_html(coll: Collection, figs: list[tuple[Any, list[Figure]]], files_rel: str | None,
                           base: Path) -> str:
    if not coll.calibrations:
        return ""
    parts = ["<section class='group' id='calibration'><h2>Calibration documents</h2>"]
    for (path, doc), (_, doc_figs) in zip(coll.calibrations, figs):
        rows = "".join(
            f"<tr><td>{e(str(r.get('eta')))}</td>{_est_cell(_estimate(r.get('replacement')))}<td>{e(str(r.get('units')))}</td>"
            f"<td>{'' if r.get('rapt_table_iii_bert_base') is None else e(str(r['rapt_table_iii_bert_base']))}"
            "</td></tr>"
            for r in doc.get("rows", []))
        parts.append(f"<h3>{e(str(doc.get('defense')))} on {e(str(doc.get('model')))} "
                     f"<small><code>{e(relative_path(path, base))}</code></small></h3>"
                     f"<p class='note'>corpus {e(str(doc.get('corpus')))} ({e(str(doc.get('corpus_sentences')))} "
                     f"sentences), seed {e(str(doc.get('seed')))}.</p>"
                     "<table><thead><tr><th>η</th><th>replacement probability</th><th>units</th>"
                     f"<th>RAPT Tab. III (BERT-base)</th></tr></thead><tbody>{rows}</tbody></table>")
        if "target" in doc:
            t = doc["target"]
            parts.append(f"<p>target replacement {e(str(t.get('replacement')))}: η = {float(t.get('eta', math.nan)):.2f}</p>")
        if doc_figs:
            parts += ["<div class='figs'>", *(_figure_html(f, files_rel) for f in doc_figs), "</div>"]
    parts.append("</section>")
    return "\n".join(parts)


def _estimate(data: Any) -> Estimate | Skip:
    try:
        return Estimate.from_dict(data)
    except (KeyError, TypeError, ValueError):
        return Skip("unreadable in the calibration file")


def build_report(coll: Collection, *, title: str = "rapt-audit report", base: Path = Path("."),
                 files_rel: str | None = None, headline: str = "", headline_figures: Sequence[Figure] = (),
                 detail: str = "") -> Report:
    """Render the HTML of ``coll`` (results already read; nothing is run).

    Args:
        coll: From :func:`rapt_audit.reporting.collect.collect`.
        title: Page title.
        base: The directory the report will be written to (paths in it are relative to this).
        files_rel: Where the PNG/SVG files will be, relative to ``base`` (``None``: no file links).
        headline: HTML placed before the groups (a benchmark's matched-utility section).
        headline_figures: Figures shown right after ``headline`` (a benchmark's headline figure), written with the
            others.
        detail: HTML placed after those and before the groups (a benchmark's per-attack tables).
    """
    groups = group_results(coll.results)
    figures: list[Figure] = list(headline_figures)
    if headline_figures:
        headline += "<div class='figs'>" + "".join(_figure_html(f, files_rel) for f in headline_figures) + "</div>"
    headline += detail
    sections = []
    for g_i, group in enumerate(groups, 1):
        figs = group_figures(group, pick_utility(group), prefix=f"g{g_i}-")
        figures += figs.values()
        sections.append(_group_html(group, figs, files_rel, base))
    cal_figs = []
    for c_i, (_, doc) in enumerate(coll.calibrations, 1):
        made = [f for f in (replacement_figure(doc, stem=f"cal{c_i}-replacement"),
                            deniability_figure(doc, stem=f"cal{c_i}-deniability")) if f is not None]
        figures += made
        cal_figs.append((doc, made))
    cal_html = _calibration_docs_html(coll, cal_figs, files_rel, base)
    banners = []
    if any(item.result.synthetic for item in coll.results):
        banners.append("<p class='banner warn' role='alert'><strong>WARNING: some results in this report come from "
                       f"synthetic demo data.</strong> {e(SYNTHETIC_WARNING)}</p>")
    if coll.problems:
        items = "".join(f"<li><code>{e(str(p.path))}</code> ({e(p.kind)}): {e(p.message)}</li>" for p in coll.problems)
        schema = coll.schema_summary()
        banners.append("<div class='banner problem' role='alert'><strong>Some inputs were not used.</strong>"
                       f"{'<p>' + e(schema) + '</p>' if schema else ''}<ul>{items}</ul></div>")
    toc = "".join(f"<li><a href='#{g.anchor}'>{e(str(g.first.dataset.get('name')))} · "
                  f"{e(str(g.first.config.get('profile')))} · {len(g.rows)} settings</a></li>" for g in groups)
    if groups:
        toc += "<li><a href='#claims'>seed claims</a></li>"
    if coll.calibrations:
        toc += "<li><a href='#calibration'>calibration documents</a></li>"
    if coll.audits:
        toc += "<li><a href='#audits'>privacy audits</a></li>"
    profiles = sorted({str(item.result.config.get("profile")) for item in coll.results})
    now = datetime.now(timezone.utc).isoformat(timespec="seconds")
    body = (f"<header><h1>{e(title)}</h1><p>{len(coll.results)} result file(s) in {len(groups)} comparable "
            f"group(s) · profile {e(', '.join(profiles))} · rendered {e(now)} by rapt-audit {e(__version__)} "
            "from stored result files (nothing was re-run)</p></header>"
            f"{''.join(banners)}<nav><ol>{toc}</ol></nav>{headline}{''.join(sections)}{claims_html(groups)}{cal_html}"
            f"{audit_docs_html(coll, base)}"
            "<footer>Generated by <code>rapt-audit report</code>. Results are comparable only within a "
            "section (same signature).</footer>")
    page = ("<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
            f"<meta http-equiv='Content-Security-Policy' content=\"{CSP}\">"
            "<meta name='viewport' content='width=device-width, initial-scale=1'>"
            f"<title>{e(title)}</title><style>{STYLE}</style></head><body>{body}</body></html>\n")
    return Report(page, figures, groups)


def _figures_dir(out: Path) -> Path:
    return out.parent / ("figures" if out.stem == "index" else f"{out.stem}-figures")


def write_report(paths: Sequence[str | Path], *, out: str | Path, title: str = "rapt-audit report",
                 figures_dir: str | Path | None = None, strict: bool = False, collection: Collection | None = None,
                 headline: str = "", headline_figures: Sequence[Figure] = (),
                 detail: str = "") -> tuple[Path, Collection]:
    """Read the results under ``paths`` and write the HTML report and its figure files.

    Args:
        paths: Run directories, sweep directories or result files.
        out: The HTML file to write.
        title: Page title.
        figures_dir: Where PNG and SVG files go (default: ``<out dir>/<out stem>-figures``, or
            ``figures`` for an ``index.html``).
        strict: Refuse to write anything when any input is unusable.
        collection: Results already read (a benchmark's joined rows) instead of reading ``paths``.
        headline, headline_figures, detail: As for :func:`build_report`.

    Returns:
        The HTML path and what was read (its ``problems`` list what was left out).

    Raises:
        ResultError: when no input is usable, or when ``strict`` and any input is unusable.
        UsageError: when ``out`` is one of the inputs, or not a file (:mod:`rapt_audit.api.outputs`).
    """
    out = Path(out)
    coll = collection if collection is not None else collect(paths)
    if not (coll.calibrations or coll.audits):  # a report of calibration or audit documents alone is fine
        coll.require_results("the report")
    if strict and coll.problems:
        raise ResultError("unusable inputs (--strict): " + "; ".join(p.message for p in coll.problems))
    fig_dir = Path(figures_dir) if figures_dir is not None else _figures_dir(out)
    check_outputs([("--out", out)], coll.inputs())  # the output rule: never an input, a folder or a device
    folder_exists(fig_dir, name="the figures folder")  # a file or a loop of links there: refused, before any figure

    rel = os.path.relpath(fig_dir.resolve(), out.parent.resolve())
    report = build_report(coll, title=title, base=out.parent, files_rel=rel, headline=headline,
                          headline_figures=headline_figures, detail=detail)
    make_dir(fig_dir)  # a read-only folder: one line naming it
    for fig in report.figures:
        write_bytes_atomic(fig_dir / f"{fig.stem}.png", fig.png)
        write_bytes_atomic(fig_dir / f"{fig.stem}.svg", fig.svg)
    write_text_atomic(out, report.html)
    return out, coll


def add_parser(sub: Any) -> None:
    """Register the ``report`` sub-command."""
    p = sub.add_parser("report", help="self-contained HTML report (Pareto plots, tables, provenance) of stored runs")
    p.add_argument("runs", nargs="+", metavar="RUN_DIR", help="run or sweep directories, result or calibration files")
    p.add_argument("--out", default="report.html", help="HTML file to write (default report.html)")
    p.add_argument("--figures", default=None, metavar="DIR",
                   help="where PNG and SVG copies of the figures go (default: next to the report)")
    p.add_argument("--title", default="rapt-audit report")
    p.add_argument("--strict", action="store_true", help="write nothing when any input is unusable")


def cmd_report(args: Any) -> int:
    """Entry of ``rapt-audit report``: exit 0 when written (unusable inputs are listed), 2 when nothing usable."""
    out, coll = write_report(args.runs, out=args.out, title=args.title, figures_dir=args.figures, strict=args.strict)
    coll.warn_problems()
    schema = coll.schema_summary()
    if schema:
        print(f"rapt-audit: warning: {schema}", file=sys.stderr)
    print(f"wrote {out} ({len(coll.results)} result(s), {len(coll.problems)} input(s) left out)")
    return 0


__all__ = ["Report", "add_parser", "arrow", "build_report", "cmd_report", "write_report"]
