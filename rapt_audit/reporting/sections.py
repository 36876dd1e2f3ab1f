"""Sections of a report group that state facts beside the numbers: warnings, caveats, pretraining, the
service's hyper-parameter selection, provenance.

A reader must see what the runs themselves flagged (a departure from a paper, a small sample, a
protocol note) and what is known about the data (its caveats), next to the numbers they qualify.
"""

from __future__ import annotations

import html
import math
from pathlib import Path
from typing import Any

from rapt_audit.pipeline.results import SYNTHETIC_WARNING
from rapt_audit.reporting.collect import relative_path
from rapt_audit.reporting.summary import Group
from rapt_audit.reporting.table import Cell, Code, Column, Foreign, Line, table
from rapt_audit.reporting.table_render import to_html

e = html.escape


def warnings_html(group: Group) -> str:
    """The warnings the group's results carry (each once, with the settings it came from) and the data's caveats.

    The synthetic-data warning is left out: the group's banner already states it.
    """
    sources: dict[str, list[str]] = {}
    for row in group.rows:
        for item in row.runs:
            for warning in item.result.warnings:
                if warning != SYNTHETIC_WARNING:
                    label = f"{row.defense} {row.setting}"
                    sources.setdefault(str(warning), [])
                    if label not in sources[warning]:
                        sources[warning].append(label)
    parts = []
    if sources:
        items = "".join(f"<li>{e(w)} <span class='note'>({e('; '.join(rows))})</span></li>"
                        for w, rows in sources.items())
        parts.append(f"<div class='warn'><h3>Warnings from these runs</h3><ul>{items}</ul></div>")
    notes = group.first.dataset.get("notes") or {}
    caveats = notes.get("caveats") if isinstance(notes, dict) else None
    if caveats:
        name = e(str(group.first.dataset.get("name")))
        parts.append(f"<p class='note'>About the data ({name}): {e(str(caveats))}</p>")
    return "".join(parts)


def provenance_html(group: Group, base: Path) -> str:
    """Which file, commit, versions, device, model and data each run of the group came from."""
    items = [(row, item) for row in group.rows for item in row.runs]
    lines = {_versions_line(item.result.env) for _, item in items}
    shared = len(lines) == 1  # the usual case: one environment, stated once instead of on every row
    columns = [Column("result file"), Column("setting"), Column("cell"), Column("seed"), Column("git sha")]
    columns += [] if shared else [Column("versions")]
    columns += [Column("device"), Column("model"), Column("data"), Column("started (UTC)"),
                Column("wall s", numeric=True)]
    rows = []
    for row, item in items:
        res, env = item.result, item.result.env
        model: tuple = (Foreign(env.get("model", "?")), " ", Code(str(env.get("model_fingerprint", ""))[:12]))
        if env.get("service_model"):
            model += ("; service ", Foreign(env["service_model"]), " ",
                      Code(str(env.get("service_model_fingerprint", ""))[:12]))
        cells = [Cell(Code(relative_path(item.path, base))), Cell((Foreign(row.defense), " ", Foreign(row.setting))),
                 Cell(Code(res.cell_id)), Cell(Foreign(env.get("seed", res.config.get("seed")))),
                 Cell(Code(str(env.get("git_sha"))))]
        cells += [] if shared else [Cell(Foreign(_versions_line(env)))]
        cells += [Cell(Foreign(env.get("device", "?"))), Cell(model),
                  Cell(Code(str(env.get("data_fingerprint", ""))[:12])),
                  Cell(Foreign(env.get("started_at", "?"))), Cell(Foreign(env.get("wall_time_s", "?")))]
        rows.append(Line(tuple(cells)))
    common = f"<p class='note'>Every run: {e(lines.pop())}.</p>" if shared else ""
    gpu = "".join(gpu_use_html(relative_path(item.path, base), item.result.env) for _, item in items)
    return "<h3>Provenance</h3>" + common + to_html(table(columns, rows, labels=0, kind="prov")) + gpu


def gpu_use_html(label: str, env: dict[str, Any]) -> str:
    """One run's GPU use per stage (``env.gpu``, :mod:`rapt_audit.pipeline.gpu_usage`), collapsed under a summary line.

    Each stage's wall time beside its samples' mean utilisation, busy share (samples above 0 %) and peak memory,
    then the whole run. Nothing for a CPU run or a result written before GPU use was recorded; a source that
    failed is named.
    """
    gpu = env.get("gpu")
    stages = gpu.get("stages") if isinstance(gpu, dict) else None
    if not isinstance(stages, dict) or not (stages or gpu.get("sampled") is True):
        return ""
    timings = env.get("timings_s") if isinstance(env.get("timings_s"), dict) else {}
    rows = [_gpu_row(e(str(name)), timings.get(name), stages.get(name)) for name in {**timings, **stages}]
    rows.append(_gpu_row("<b>whole run</b>", env.get("wall_time_s"), gpu))
    interval = _number(gpu.get("interval_s"))
    if gpu.get("sampled") is True and interval:
        use = (f" ({e(str(gpu.get('source')))} every {interval:g} s): mean utilisation "
               f"{_shown(gpu.get('utilization_mean_pct'), '.1f')} %, busy in {_shown(gpu.get('busy_share'), '.0%')} "
               "of samples")
    else:
        use = " (utilisation not sampled)"
    error = f" <span class='tag warn'>{e(str(gpu['error']))}</span>" if gpu.get("error") else ""
    return (f"<details><summary>GPU use of <code>{e(label)}</code>: {e(str(gpu.get('name') or '?'))}{use}{error}"
            "</summary><table class='prov'><thead><tr>"
            "<th>stage</th><th>wall s</th><th>samples</th><th>mean GPU utilisation %</th><th>busy share</th>"
            "<th>peak memory used MiB</th><th>torch peak allocated MiB</th></tr></thead>"
            f"<tbody>{''.join(rows)}</tbody></table></details>")


def _gpu_row(stage_html: str, wall: Any, figures: Any) -> str:
    figures = figures if isinstance(figures, dict) else {}
    cells = [(wall, ".3f"), (figures.get("samples"), "d"), (figures.get("utilization_mean_pct"), ".1f"),
             (figures.get("busy_share"), ".0%"), (figures.get("memory_used_peak_mib"), ".0f"),
             (figures.get("torch_peak_allocated_mib"), ".0f")]
    return f"<tr><td>{stage_html}</td>" + "".join(f"<td class='num'>{_shown(v, f)}</td>" for v, f in cells) + "</tr>"


def _shown(value: Any, spec: str) -> str:
    """A number from a result file as ``spec`` formats it, or – where it is missing or not a number."""
    number = _number(value)
    if number is None:
        return "–"
    return format(int(number) if spec == "d" else number, spec)


def pretraining_note(group: Group) -> str:
    """Which rows' services pretrained their encoder on privatized public text, and what that does not change."""
    adapted = [f"{e(row.defense)} {e(row.setting)}: {e(row.pretraining)}" for row in group.rows if row.pretraining]
    if not adapted:
        return ""
    return ("<p class='note'>Privacy-adaptive pretraining (Qu et al., CIKM 2021) — " + "; ".join(adapted) +
            ". It changes the service's model only, not what users release: every attack sees the same release "
            "as without pretraining, so only utility can differ.</p>")


def selection_note(group: Group) -> str:
    """How each row's service chose its learning rate and epoch on validation data (first seed of the row).

    One line per row with a customization: the validation split, each learning rate of the grid with its
    validation-accuracy curve (best epoch in bold; ``diverged`` where the loss became NaN or infinite) and
    the choice. Results written before selection existed (fixed epochs) show nothing.
    """
    lines = []
    for row in group.rows:
        customization = row.release_meta.get("customization")
        selection = customization.get("selection") if isinstance(customization, dict) else None
        if not isinstance(selection, dict):
            continue
        candidates = [c for c in _list(selection.get("candidates")) if isinstance(c, dict)]
        chosen = selection.get("chosen") if isinstance(selection.get("chosen"), dict) else {}
        entries = "; ".join(_candidate_html(c, chosen) for c in candidates) or "none recorded"
        lr, epoch, accuracy = (_number(chosen.get(k)) for k in ("lr", "epoch", "valid_accuracy"))
        most = e(str(selection.get("max_epochs", "?")))
        choice = (f"lr {lr:g}, epoch {epoch:g} of at most {most}, validation accuracy {accuracy:.3f}"
                  if lr is not None and epoch is not None and accuracy is not None else "no choice recorded")
        if selection.get("pinned") is True:
            choice += " (lr pinned by the user; only the epoch was chosen)"
        size = e(str(selection.get("validation_examples", "?")))
        lines.append(f"<li>{e(row.defense)} {e(row.setting)}: {size} validation texts; {entries}. <strong>Chosen: "
                     f"{choice}</strong></li>")
    if not lines:
        return ""
    return ("<p class='note'>Hyper-parameters of the service's customization, chosen on a validation split carved from "
            "the privatized training texts, never on the test split (validation accuracy per epoch; best epoch in "
            "bold; first seed of each row):</p><ul class='note'>" + "".join(lines) + "</ul>")


def _number(value: Any) -> float | None:
    """A finite real number from a result file, else None (a hand-edited or hostile file renders, never fails)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _candidate_html(candidate: dict[str, Any], chosen: dict[str, Any]) -> str:
    lr = _number(candidate.get("lr"))
    label = "lr ?" if lr is None else f"lr {lr:g}"
    if lr is not None and lr == _number(chosen.get("lr")):
        label = f"<u>{label}</u>"
    best = _number(candidate.get("best_epoch"))
    points = []
    for point in _list(candidate.get("curve")):
        if not isinstance(point, dict) or point.get("diverged") is True:  # said once, after the curve
            continue
        accuracy = _number(point.get("valid_accuracy"))
        text = "?" if accuracy is None else f"{accuracy:.2f}"
        points.append(f"<b>{text}</b>" if best is not None and _number(point.get("epoch")) == best else text)
    if candidate.get("diverged") is True:
        points.append(f"<span class='tag warn'>diverged in epoch {e(str(candidate.get('diverged_epoch', '?')))}</span>")
    return f"{label}: " + (" → ".join(points) or "no epoch")


def _versions_line(env: dict[str, Any]) -> str:
    versions = ", ".join(f"{k} {v}" for k, v in dict(env.get("versions", {})).items())
    return f"{versions}; Python {env.get('python', '?')} on {env.get('platform', '?')}"


__all__ = ["gpu_use_html", "pretraining_note", "provenance_html", "selection_note", "warnings_html"]
