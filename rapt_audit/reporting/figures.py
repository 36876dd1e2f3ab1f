"""Figures of a report: Pareto plots, replacement probability per η, plausible deniability.

matplotlib with the Agg backend only (no display, no network). Each figure is returned as a
:class:`Figure` holding PNG and SVG bytes: the HTML report embeds the PNG as a ``data:`` URI and
the files are also written next to the report. SVGs carry no creation date, so re-rendering the
same results gives the same files.

Names in a figure come from result files, which anyone can write. matplotlib escapes text for SVG
itself; on top of that, math text is off (a ``$`` in a name would otherwise be parsed as TeX and a
malformed one would stop the whole report), characters XML cannot hold are replaced, labels are
cut to a length a plot can show, and file stems keep only ``[A-Za-z0-9_-]`` (:func:`safe_id`).
"""

from __future__ import annotations

import functools
import io
import math
import unicodedata
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from rapt_audit.api.plugins import capabilities_of
from rapt_audit.api.types import Estimate
from rapt_audit.reporting.pareto import Point, pareto_front
from rapt_audit.reporting.summary import Group, Row, is_local_baseline, safe_id

#: Colour-blind-safe palette (Okabe–Ito) without its yellow, which does not read on white.
PALETTE = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000")
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
#: How many of the 56 places (colour × marker) plugins hash into, counted down from the last.
PLUGIN_PLACES = 32
#: Figures are drawn for print and zoom: 200 dpi (110 before; the PNGs looked blurred at twice the size).
DPI = 200
_LABEL_CHARS = 60  # longer names are cut: a 10,000-character name would make the image too wide to render
_F = TypeVar("_F", bound=Callable[..., Any])


def defense_style(defense: str) -> tuple[str, str]:
    """The colour and marker ``defense`` has in every figure: by the place a built-in declares (its capabilities'
    ``figure_place``: a new built-in takes the next, so the others keep theirs), a plugin's by a hash of its name into
    the places counted down from the last (the same in every report, whatever built-ins are added). Every place is
    another pair of colour and marker: place ``i`` takes colour ``i mod 7`` and marker ``(i // 7 + i mod 7) mod 8``,
    56 pairs in all."""
    places = len(PALETTE) * len(MARKERS)
    place = capabilities_of(defense).figure_place
    if place is None:  # the 32 last places: the built-ins may grow to 24 before they meet
        place = places - 1 - zlib.crc32(defense.encode("utf-8")) % PLUGIN_PLACES
    colour = place % len(PALETTE)
    return PALETTE[colour], MARKERS[(place // len(PALETTE) + colour) % len(MARKERS)]


@dataclass(frozen=True)
class Figure:
    """A rendered figure: a file-name stem, a caption and its PNG and SVG bytes."""

    stem: str
    caption: str
    png: bytes
    svg: bytes


def _pyplot():  # noqa: ANN202 - matplotlib module
    import matplotlib  # lazy (matplotlib)

    matplotlib.use("Agg", force=True)  # never a display: reports are rendered headless
    import matplotlib.pyplot as plt  # lazy (matplotlib)

    return plt


def _plain_text(draw: _F) -> _F:
    """Run a figure function with math text off, so every label is drawn as the literal string."""

    @functools.wraps(draw)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with _pyplot().rc_context({"text.parse_math": False}):
            return draw(*args, **kwargs)

    return wrapper  # type: ignore[return-value]


def _label(value: object) -> str:
    """``value`` as text a figure can hold: control, format and unpaired-surrogate characters (invalid in
    SVG's XML, or bidi overrides that would reorder the label) become U+FFFD; long text is cut."""
    text = "".join("\ufffd" if unicodedata.category(ch).startswith("C") else ch for ch in str(value))
    return text if len(text) <= _LABEL_CHARS else text[:_LABEL_CHARS - 1] + "…"


def _render(fig: Any, stem: str, caption: str) -> Figure:
    png, svg = io.BytesIO(), io.BytesIO()
    fig.savefig(png, format="png", dpi=DPI, bbox_inches="tight", metadata={"Software": None})
    # A fixed salt makes the SVG's clip-path ids the same on every render: re-rendering a committed report
    # from the same results changes no figure file (matplotlib draws them from random bytes otherwise).
    with _pyplot().rc_context({"svg.hashsalt": "rapt-audit"}):
        fig.savefig(svg, format="svg", bbox_inches="tight", metadata={"Date": None, "Creator": None})
    _pyplot().close(fig)
    return Figure(stem, caption, png.getvalue(), svg.getvalue())


def pareto_points(group: Group, attack: str, utility: str) -> list[Point]:
    """One point per row that has both ``utility`` and a measured empirical privacy for ``attack``."""
    points = []
    for row in group.rows:
        est = row.privacy.get(attack)
        if not isinstance(est, Estimate) or utility not in row.utility:  # skipped, failed or not run
            continue
        points.append(Point(row.utility[utility].value, est.value, row.setting, row))
    return points


@_plain_text
def pareto_figure(group: Group, attack: str, utility: str, *, stem: str) -> Figure | None:
    """Empirical privacy against utility for one attack: every defense setting with its 95 % CIs,
    the frontier highlighted, points labelled by their privacy parameter, and the no-privacy
    result as dashed lines (as in RAPT Figs. 4, 7 and 10). ``None`` when nothing was measured.
    """
    points = pareto_points(group, attack, utility)
    if not points:
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.6))
    front = set(pareto_front(points))
    defenses = list(dict.fromkeys(p.key.defense for p in points))
    for defense in defenses:
        mine = [(i, p) for i, p in enumerate(points) if p.key.defense == defense and not p.key.no_privacy]
        if not mine:
            continue
        mine.sort(key=lambda ip: _level(ip[1].key))
        colour, marker = defense_style(defense)
        xs = [p.utility for _, p in mine]
        ys = [p.privacy for _, p in mine]
        xerr = [[p.utility - p.key.utility[utility].ci_low for _, p in mine],
                [p.key.utility[utility].ci_high - p.utility for _, p in mine]]
        yerr = [[p.privacy - p.key.privacy[attack].ci_low for _, p in mine],
                [p.key.privacy[attack].ci_high - p.privacy for _, p in mine]]
        ax.errorbar(xs, ys, xerr=xerr, yerr=yerr, color=colour, marker=marker, linestyle="-", linewidth=1,
                    markersize=6, capsize=2, alpha=0.9, label=_label(defense))
        for _, p in mine:
            ax.annotate(_label(p.label), (p.utility, p.privacy), textcoords="offset points", xytext=(5, 4),
                        fontsize=7, color=colour)
    # The no-privacy result (identity, or η = ∞) is a reference level, drawn as a dashed line as in the
    # RAPT figures; several such rows at the same level (t2t and pct2t at η = ∞) share one line.
    levels: dict[float, list[Point]] = {}
    for p in (p for p in points if p.key.no_privacy):
        levels.setdefault(round(p.privacy, 9), []).append(p)
    for level, same in levels.items():
        names = ", ".join(f"{_label(p.key.defense)} {_label(p.label)}" for p in same)
        ax.axhline(level, color="0.35", linestyle="--", linewidth=1.1, label=f"no privacy ({names}): {level:.3f}")
        for p in same:
            ax.axvline(p.utility, color="0.6", linestyle=":", linewidth=1)
    # Sending nothing (the local-only baselines): a vertical line at each client's utility; a setting left of it
    # gives up privacy for less than the client has alone.
    for row in (r for r in group.rows if is_local_baseline(r.defense) and utility in r.utility):
        ax.axvline(row.utility[utility].value, color=defense_style(row.defense)[0], linestyle="-.", linewidth=1.1,
                   label=f"sending nothing ({_label(row.setting)}): {row.utility[utility].value:.3f}")
    fpts = sorted((points[i] for i in front), key=lambda p: p.utility)
    ax.plot([p.utility for p in fpts], [p.privacy for p in fpts], color="black", linewidth=2.2, alpha=0.35,
            zorder=0, drawstyle="steps-pre" if len(fpts) > 1 else "default")
    ax.scatter([p.utility for p in fpts], [p.privacy for p in fpts], s=150, facecolors="none",
               edgecolors="black", linewidths=1.6, zorder=5, label="Pareto frontier")
    ax.set_xlabel(f"utility: {_label(utility)} ↑")
    measure = group.headline(attack)
    ax.set_ylabel("empirical privacy ↑ (1 − attack success)" if measure == "empirical_privacy"
                  else f"{_label(measure)} (not 1 − attack success)")
    ax.set_title(f"{_label(attack)}: privacy vs utility", fontsize=11)
    ax.grid(True, alpha=0.3)
    # Beside the axes, never over the data: matplotlib's "best" place hid points and the y label.
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0, framealpha=0.85)
    seeds = sorted({len(p.key.seeds) for p in points})
    methods = sorted({e.method for p in points for e in (p.key.utility[utility], p.key.privacy[attack])})
    caption = (f"{attack}: empirical privacy (higher = more private) against {utility} (higher = more useful); "
               f"{'/'.join(map(str, seeds))} seed(s) a setting, 95 % intervals ({', '.join(methods)}); ringed "
               "points are Pareto-optimal; the dashed line is the no-privacy result"
               + ("; dash-dotted lines are the local-only baselines (the client alone, sending nothing)."
                  if any(is_local_baseline(r.defense) for r in group.rows) else "."))
    return _render(fig, stem, caption)


def _level(row: Row) -> float:
    value = row.privacy_level
    return math.inf if math.isnan(value) else value


@_plain_text
def replacement_figure(doc: dict[str, Any], *, stem: str) -> Figure | None:
    """Word-replacement probability per η from a calibration document, with RAPT Table III for reference."""
    rows = [r for r in doc.get("rows", []) if str(r.get("eta")) != "inf"]
    if not rows:
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(5.6, 3.8))
    etas = [float(r["eta"]) for r in rows]
    vals = [r["replacement"]["value"] for r in rows]
    err = [[v - r["replacement"]["ci_low"] for v, r in zip(vals, rows)],
           [r["replacement"]["ci_high"] - v for v, r in zip(vals, rows)]]
    ax.errorbar(etas, vals, yerr=err, marker="o", capsize=3,
                label=f"{_label(doc.get('defense'))} on {_label(doc.get('model'))}")
    ref = [(float(r["eta"]), r["rapt_table_iii_bert_base"]) for r in rows if r.get("rapt_table_iii_bert_base")]
    if ref:
        ax.plot(*zip(*ref), marker="x", linestyle="--", color="0.4", label="RAPT Table III (BERT-base)")
    ax.set_xlabel("η")
    ax.set_ylabel("word-replacement probability")
    ax.set_ylim(-0.02, 1.02)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    return _render(fig, stem, f"Word-replacement probability per η ({doc.get('defense')}, {doc.get('corpus')}), "
                              "95 % Wilson intervals.")


@_plain_text
def deniability_figure(doc: dict[str, Any], *, stem: str) -> Figure | None:
    """Histograms of N_w and S_w per η (plausible deniability, Qu et al. 2021 Sec. 5.3)."""
    items = [d for d in doc.get("deniability", []) if d.get("n_w") and d.get("s_w")]
    if not items:
        return None
    plt = _pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(9.0, 3.6))
    for i, d in enumerate(items):
        colour = PALETTE[i % len(PALETTE)]
        label = f"η={_label(d['eta'])}"
        axes[0].hist(d["n_w"], bins=20, range=(0, d["repeats"]), alpha=0.5, color=colour, label=label)
        axes[1].hist(d["s_w"], bins=20, range=(0, d["repeats"]), alpha=0.5, color=colour, label=label)
    axes[0].set_xlabel(f"N_w: outputs equal to the input word (of {items[0]['repeats']})")
    axes[1].set_xlabel(f"S_w: distinct outputs (of {items[0]['repeats']})")
    for ax in axes:
        ax.set_ylabel("tokens")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    return _render(fig, stem, "Plausible deniability: distribution over sampled tokens of N_w (how often the "
                              "word is kept) and S_w (how many distinct words it becomes).")


def group_figures(group: Group, utility: str | None, *, prefix: str) -> dict[str, Figure]:
    """Pareto figure per attack of a group (attack name → figure), for attacks with measured points."""
    if utility is None:
        return {}
    out = {}
    for attack in group.attacks:
        # The attack name comes from the result file: safe_id keeps the stem a plain file name and HTML id.
        fig = pareto_figure(group, attack, utility, stem=f"{prefix}pareto-{safe_id(attack)}")
        if fig is not None:
            out[attack] = fig
    return out


def pick_utility(group: Group, preferred: Sequence[str] = ("accuracy",)) -> str | None:
    """The utility metric for the x axis: the first preferred one present, else the first present."""
    names = group.utility_metrics
    for name in preferred:
        if name in names:
            return name
    return names[0] if names else None


__all__ = ["DPI", "Figure", "defense_style", "deniability_figure", "group_figures", "pareto_figure",
           "pareto_points", "pick_utility", "replacement_figure"]
