"""``rapt-audit report``: one self-contained HTML file from stored results (nothing is re-run).

The page has no script and loads nothing: figures are PNG ``data:`` URIs, styles are inline, and a
Content-Security-Policy forbids every other source, so a reader can open it offline and a browser
makes no network request. Figures are also written as PNG and SVG files next to the report.
"""

from __future__ import annotations

import base64
import html
import math
import os
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
from rapt_audit.api.types import Estimate, Skip
from rapt_audit.api.version import __version__
from rapt_audit.pipeline.results import SYNTHETIC_WARNING
from rapt_audit.reporting.audits import audit_docs_html
from rapt_audit.reporting.claims_html import claims_html
from rapt_audit.reporting.collect import Collection, collect, relative_path
from rapt_audit.reporting.figures import Figure, deniability_figure, group_figures, pick_utility, replacement_figure
from rapt_audit.reporting.sections import pretraining_note, provenance_html, selection_note, warnings_html
from rapt_audit.reporting.style import CSP, STYLE
from rapt_audit.reporting.group_tables import calibration_table, detail_table, outcome_cell, summary_table
from rapt_audit.reporting.summary import Group, group_results, safe_id
from rapt_audit.reporting.table import Cell, Column, Foreign, Line, direction, table
from rapt_audit.reporting.table_render import to_html
from rapt_audit.reporting.threats import threat_sections_html
from rapt_audit.scoring.metrics import METRICS

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
    """:func:`rapt_audit.scoring.metrics.arrow` once the plugins' metrics are declared (the tables' one direction,
    :func:`rapt_audit.reporting.table.direction`)."""
    return direction(metric)


def _summary_table(group: Group) -> str:
    return to_html(summary_table(group, detailed=True))


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
    found = calibration_table(group)
    if found is None:
        return ""
    return ("<h3>Calibration: word-replacement probability</h3><p class='note'>Observed on the victim-test release "
            "of each run (the fraction of privatized units whose released word differs from the input). RAPT "
            "Table III was measured on BERT-base, a different embedding model, so equal η need not mean equal "
            "replacement. Forced: the share of privatized units no candidate equals (replaced at every finite η, a "
            "floor under the observed replacement; blank in results written before it was counted).</p>"
            + to_html(found))


def _attack_detail(group: Group, attack: str) -> str:
    _, attacks = _registries()
    about = f"<p class='note'>{e(describe(attacks.get(attack)))}</p>" if attack in attacks else ""
    return (f"<section class='attack' id='{group.anchor}-attack-{safe_id(attack)}'><h4>{e(attack)}</h4>{about}"
            f"{to_html(detail_table(group, attack))}</section>")


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
        rows = [Line((Cell(Foreign(str(r.get("eta")))), outcome_cell(_estimate(r.get("replacement")), detailed=True),
                      Cell(Foreign(str(r.get("units")))),
                      Cell(None if r.get("rapt_table_iii_bert_base") is None
                           else Foreign(str(r["rapt_table_iii_bert_base"])))))
                for r in doc.get("rows", [])]
        columns = [Column("η"), Column("replacement probability", numeric=True), Column("units"),
                   Column("RAPT Tab. III (BERT-base)")]
        parts.append(f"<h3>{e(str(doc.get('defense')))} on {e(str(doc.get('model')))} "
                     f"<small><code>{e(relative_path(path, base))}</code></small></h3>"
                     f"<p class='note'>corpus {e(str(doc.get('corpus')))} ({e(str(doc.get('corpus_sentences')))} "
                     f"sentences), seed {e(str(doc.get('seed')))}.</p>" + to_html(table(columns, rows)))
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


__all__ = ["Report", "arrow", "build_report", "write_report"]
