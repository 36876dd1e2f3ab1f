"""The benchmark's overview figures (issue #40): the headline figure, the defense × attack grid and the per-attack
small multiples. Each defense keeps the colour and marker :func:`~rapt_audit.reporting.figures.defense_style` gives it
in every figure; the legend sits beside the axes; PNG at the report's resolution, SVG beside it.
"""

from __future__ import annotations

from typing import Sequence

from rapt_audit.api.types import Estimate
from rapt_audit.reporting.figures import Figure, _label, _plain_text, _pyplot, _render, defense_style
from rapt_audit.reporting.summary import Group, Row, is_local_baseline


#: What each panel of the headline figure holds, by the release kind a defense exposes.
PANELS = (("texts", "releases text"), ("token_embeddings", "releases token vectors"),
          ("sequence_embeddings", "releases sentence vectors"))


@_plain_text
def headline_figure(group: Group, utility: str, ceiling: float, fractions: Sequence[float], measure: str, *,
                    stem: str) -> Figure | None:
    """The benchmark's one headline figure (issue #40 item 2): ``measure`` (the worst-case privacy) against utility
    as a share of the ceiling, one panel per release kind; each defense a line through its private settings with
    its privacy interval as a band, the targets as dotted lines and the local-only baselines as dash-dotted ones.
    ``None`` when no private setting measured ``measure``."""
    by_panel: dict[str, list[Row]] = {}
    for row in group.rows:
        if row.no_privacy or utility not in row.utility or not isinstance(row.privacy.get(measure), Estimate):
            continue
        exposes = row.runs[0].result.defense.get("exposes") or []
        panel = next((name for kind, name in PANELS if kind in exposes), None)
        if panel is not None:
            by_panel.setdefault(panel, []).append(row)
    if not by_panel or ceiling <= 0:
        return None
    plt = _pyplot()
    panels = [name for _, name in PANELS if name in by_panel]
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.8), sharey=True, squeeze=False)
    local = [r for r in group.rows if is_local_baseline(r.defense) and utility in r.utility]
    for ax, panel in zip(axes[0], panels):
        for defense in dict.fromkeys(r.defense for r in by_panel[panel]):
            mine = sorted((r for r in by_panel[panel] if r.defense == defense), key=lambda r: r.utility[utility].value)
            colour, marker = defense_style(defense)
            xs = [r.utility[utility].value / ceiling for r in mine]
            est = [r.privacy[measure] for r in mine]
            ax.plot(xs, [e.value for e in est], color=colour, marker=marker, linewidth=1.2, label=_label(defense))
            ax.fill_between(xs, [e.ci_low for e in est], [e.ci_high for e in est], color=colour, alpha=0.15,
                            linewidth=0)
        for f in fractions:
            ax.axvline(f, color="0.3", linestyle=":", linewidth=1, label=f"target {100 * f:.0f} %")
        for row in local:
            ax.axvline(row.utility[utility].value / ceiling, color=defense_style(row.defense)[0], linestyle="-.",
                       linewidth=1, label=f"sending nothing ({_label(row.setting)})")
        ax.set_title(panel, fontsize=10)
        ax.set_xlabel(f"utility: {_label(utility)} / the no-privacy ceiling ↑")
        ax.grid(True, alpha=0.3)
    axes[0][0].set_ylabel("worst-case privacy ↑")
    handles = {}
    for ax in axes[0]:
        for handle, name in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(name, handle)
    axes[0][-1].legend(list(handles.values()), list(handles), fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0),
                       borderaxespad=0.0, framealpha=0.85)
    seeds = sorted({len(r.seeds) for rows in by_panel.values() for r in rows})
    methods = sorted({r.privacy[measure].method  # type: ignore[union-attr]
                      for rows in by_panel.values() for r in rows})
    caption = (f"Worst-case privacy (the strongest inversion attack that reads the release; higher = more private) "
               f"against {utility} as a share of the no-privacy ceiling, one panel per release kind; each defense's "
               f"private settings with its 95 % privacy interval as a band ({', '.join(methods)}; "
               f"{'/'.join(map(str, seeds))} seed(s) a setting). Dotted: the targets "
               f"({', '.join(f'{100 * f:.0f} %' for f in fractions)}); dash-dotted: the local-only baselines "
               "(the client alone, sending nothing).")
    return _render(fig, stem, caption)


#: How a heatmap cell without a number is drawn and labelled: an attack that cannot read the defense's release is
#: hatched ("does not apply"), one whose cell has not run yet is grey ("pending"), any other is light ("not run").
class AtLeast(float):
    """A heatmap value that bounds from below (the grid stops before the target: ``≥`` in the cell)."""


CELL_STATES = {"does not apply": ("white", "///"), "pending": ("0.85", ""), "not run": ("0.93", ""),
               "not reached": ("0.75", "..")}


@_plain_text
def heatmap_figure(defenses: Sequence[str], attacks: Sequence[str], values: Sequence[Sequence[float | str]],
                   title: str, caption: str, *, stem: str) -> Figure | None:
    """A defense × attack grid (issue #40 item 3): a number in [0, 1] coloured on one scale, or a state of
    :data:`CELL_STATES` drawn and labelled as such (so "does not apply" never looks like "not run")."""
    if not defenses or not attacks:
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(1.1 * len(attacks) + 2.5, 0.42 * len(defenses) + 1.6))
    cmap = plt.get_cmap("viridis")
    for i, row in enumerate(values):
        for j, value in enumerate(row):
            if isinstance(value, str):
                face, hatch = CELL_STATES.get(value, ("0.93", ""))
                ax.add_patch(plt.Rectangle((j - 0.5, i - 0.5), 1, 1, facecolor=face, hatch=hatch, edgecolor="0.6",
                                           linewidth=0.5))
                ax.text(j, i, value, ha="center", va="center", fontsize=6, color="0.25")
            else:
                ax.add_patch(plt.Rectangle((j - 0.5, i - 0.5), 1, 1, facecolor=cmap(min(max(value, 0.0), 1.0)),
                                           edgecolor="white", linewidth=0.5))
                ax.text(j, i, f"{'≥' if isinstance(value, AtLeast) else ''}{value:.2f}", ha="center", va="center",
                        fontsize=7, color="white" if value < 0.6 else "black")
    ax.set_xlim(-0.5, len(attacks) - 0.5)
    ax.set_ylim(len(defenses) - 0.5, -0.5)
    ax.set_xticks(range(len(attacks)), [_label(a) for a in attacks], rotation=35, ha="right", fontsize=8)
    ax.set_yticks(range(len(defenses)), [_label(d) for d in defenses], fontsize=8)
    ax.set_title(_label(title), fontsize=10)
    bar = fig.colorbar(plt.cm.ScalarMappable(norm=plt.Normalize(0, 1), cmap=cmap), ax=ax, fraction=0.04, pad=0.02)
    bar.set_label("privacy ↑", fontsize=8)
    return _render(fig, stem, caption)


@_plain_text
def small_multiples_figure(group: Group, utility: str, attacks: Sequence[str], *, stem: str) -> Figure | None:
    """One small panel per attack, every panel on the same axes (privacy in [0, 1] against utility): each defense's
    private settings as a line, so a defense that is strong under one attack and weak under another shows at a
    glance. Attacks whose headline is not bounded in [0, 1] are left out (they would not share the axis)."""
    from rapt_audit.scoring.metrics import declared  # lazy (the metrics registry is filled by the attacks)

    shown = [a for a in attacks if (spec := declared(group.headline(a))) is not None and spec.bounded
             and any(isinstance(r.privacy.get(a), Estimate) and not r.no_privacy for r in group.rows)]
    if not shown:
        return None
    plt = _pyplot()
    columns = min(4, len(shown))
    rows_n = -(-len(shown) // columns)
    fig, axes = plt.subplots(rows_n, columns, figsize=(3.0 * columns, 2.6 * rows_n), sharex=True, sharey=True,
                             squeeze=False)
    for ax, attack in zip(axes.flat, shown):
        for defense in dict.fromkeys(r.defense for r in group.rows):
            mine = sorted((r for r in group.rows if r.defense == defense and not r.no_privacy
                           and utility in r.utility and isinstance(r.privacy.get(attack), Estimate)),
                          key=lambda r: r.utility[utility].value)
            if mine:
                colour, marker = defense_style(defense)
                ax.plot([r.utility[utility].value for r in mine], [r.privacy[attack].value for r in mine],
                        color=colour, marker=marker, markersize=4, linewidth=1, label=_label(defense))
        ax.set_title(_label(attack), fontsize=9)
        ax.set_ylim(-0.02, 1.02)
        ax.grid(True, alpha=0.3)
    for ax in axes.flat[len(shown):]:
        ax.set_visible(False)
    for ax in axes[-1]:
        ax.set_xlabel(f"{_label(utility)} ↑", fontsize=8)
    for ax in axes[:, 0]:
        ax.set_ylabel("privacy ↑", fontsize=8)
    handles: dict[str, object] = {}
    for ax in axes.flat:
        for handle, name in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(name, handle)
    axes[0][-1].legend(list(handles.values()), list(handles), fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0),
                       borderaxespad=0.0)
    seeds = sorted({len(r.seeds) for r in group.rows})
    caption = (f"Each attack's privacy (higher = more private) against {utility}, one panel per attack on shared "
               f"axes; each defense's private settings ({'/'.join(map(str, seeds))} seed(s) a setting; the point "
               "estimates: the per-attack Pareto figures below carry the intervals).")
    return _render(fig, stem, caption)


__all__ = ["AtLeast", "CELL_STATES", "PANELS", "headline_figure", "heatmap_figure", "small_multiples_figure"]
