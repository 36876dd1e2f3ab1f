"""Which baseline cells a change can have moved: the regression gate per component (issue #62 item 4).

A result records the digest of each component that computed it (``env.code``: the core, its defense, each
attack; :mod:`rapt_audit.api.components`). Each baseline cell's digests are compared with those the code
here gives the same cell (:meth:`CellCode.stale <rapt_audit.api.components.CellCode.stale>`):

* **fresh** (the same core, defense and attacks): nothing the change touched runs in that cell, so its
  numbers are *unchanged by construction* and it needs no new run. A new run of it, when given anyway, is
  compared as usual (and should be identical);
* **stale defense or core**: every measure of the cell can have moved; a new run must be given and every
  measure is compared;
* **only some attacks stale**: only their measures and the worst case (which takes the lowest over the
  attacks) can have moved; those are compared and the others are reported unchanged by construction.

A stale baseline cell without a new run is an error naming the cell and the command that runs it. A cell
signed before per-component digests is one component (``all``): stale as soon as the package's digest moved,
which is the gate's behaviour before issue #62 (every cell re-run and compared).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Sequence

from rapt_audit.api.components import CellCode, Staleness, current_code
from rapt_audit.api.plugins import WORST_CASE, load_named
from rapt_audit.api.types import AttackResult
from rapt_audit.pipeline.config import settings_id
from rapt_audit.pipeline.results import RunResult
from rapt_audit.pipeline.stage_reuse import cell_attacks, stored_code
from rapt_audit.reporting.baseline import run_label

#: How many cells or components a summary names before it says "…".
_SHOWN = 6


@dataclass(frozen=True)
class CellPlan:
    """One baseline cell: its new run (if given) and what of it the code here can have moved."""

    base: RunResult
    new: RunResult | None
    stale: Staleness
    here: CellCode

    @property
    def label(self) -> str:
        return run_label(self.base)

    @property
    def defense(self) -> str:
        return str(self.base.defense.get("name") or self.base.config.get("defense"))

    def components(self) -> list[str]:
        """The stale components, by name (``defense:NAME``, ``attack:NAME``, ``core``, ``all (…)``); a stale
        defense is named alone (its attacks, which read its release, are stale with it)."""
        if self.stale.defense and not self.stale.core and not self.stale.legacy:
            return [f"defense:{self.defense}"]
        return self.stale.components()

    def compared(self) -> frozenset[str] | None:
        """The attacks whose measures are compared (None: every one). A fresh cell's new run, given anyway, is
        compared whole; a stale defense or core moves everything; stale attacks move themselves and the
        worst case."""
        if self.new is None:
            return frozenset()
        if not self.stale or self.stale.defense:
            return None
        return self.stale.attacks | {WORST_CASE}

    def unchanged(self) -> list[str]:
        """The baseline's measured attacks that are not compared: unchanged by construction."""
        compared = self.compared()
        if compared is None:
            return []
        return [n for n, o in self.base.attacks.items() if isinstance(o, AttackResult) and n not in compared]


def rerun_command(config: Mapping[str, Any]) -> str:
    """The ``rapt-audit run`` command that measures the cell of a stored ``config`` again."""
    argv = ["rapt-audit", "run", "--defense", str(config.get("defense")),
            "--attacks", str(config.get("attacks") or "all")]
    for flag, key in (("--dataset", "dataset"), ("--model", "model"), ("--profile", "profile"),
                      ("--seed", "seed"), ("--data-dir", "data_dir")):
        if config.get(key) is not None:
            argv += [flag, str(config[key])]
    argv += [x for k, v in sorted(dict(config.get("defense_args") or {}).items()) for x in ("--set", f"{k}={v}")]
    for attack, args in sorted(dict(config.get("attack_args") or {}).items()):
        argv += [x for k, v in sorted(dict(args or {}).items()) for x in ("--set", f"attacks.{attack}.{k}={v}")]
    argv += [x for k, v in sorted(dict(config.get("data_args") or {}).items()) for x in ("--set", f"data.{k}={v}")]
    if config.get("out"):
        argv += ["--out", str(config["out"])]
    return shlex.join(argv)


def plan_cells(baseline: Sequence[RunResult], runs: Sequence[RunResult], *,
               code_here: Callable[[str, list[str]], CellCode] = current_code) -> list[CellPlan]:
    """Each baseline cell with its new run (the first of ``runs`` of its settings, by the hash of the stored
    configuration, so a baseline recorded before ids were canonical still pairs) and its staleness against
    the code here (``code_here(defense, attacks)``; the plugins the cell names are loaded first)."""
    by_cell: dict[str, RunResult] = {}
    for r in runs:
        by_cell.setdefault(settings_id(r.config), r)
    cache: dict[tuple[str, tuple[str, ...]], CellCode] = {}
    plans = []
    for b in baseline:
        defense, attacks = str(b.defense.get("name") or b.config.get("defense")), cell_attacks(b)
        key = (defense, tuple(attacks))
        if key not in cache:
            load_named(defense, attacks)
            cache[key] = code_here(defense, attacks)
        here = cache[key]
        plans.append(CellPlan(b, by_cell.get(settings_id(b.config)), stored_code(b).stale(here), here))
    return plans


def missing_message(plans: Sequence[CellPlan], baseline_name: str) -> str | None:
    """The error for stale baseline cells without a new run (None: every one has its run)."""
    missing = [p for p in plans if p.stale and p.new is None]
    if not missing:
        return None
    fresh = sum(1 for p in plans if not p.stale)
    cells = "; ".join(f"{p.label} (cell {p.base.cell_id}; stale here: {', '.join(p.components())}): run "
                      f"`{rerun_command(p.base.config)}`" for p in missing)
    return (f"no new run matches baseline run(s) {cells}. The code here can have moved these cells, so the gate "
            f"needs their new runs (the configurations are those recorded in {baseline_name}); pass their "
            f"directories" + (f" ({fresh} other baseline cell(s) are unchanged by construction and need none)"
                              if fresh else ""))


def _names(items: Iterable[str]) -> str:
    items = list(dict.fromkeys(items))
    return ", ".join(items[:_SHOWN]) + (f", … ({len(items) - _SHOWN} more)" if len(items) > _SHOWN else "")


def summary_line(plans: Sequence[CellPlan]) -> str:
    """``12 baseline cells: 9 unchanged by construction (code identical), 3 re-run and compared
    (defense:custext)``: the gate's first line."""
    fresh = [p for p in plans if not p.stale]
    again = sum(1 for p in fresh if p.new is not None)
    stale = [p for p in plans if p.stale]
    partly = sum(1 for p in stale if p.unchanged())
    first = f"{len(fresh)} unchanged by construction (code identical" + (
        f"; {again} given anyway and compared" if again else "") + ")"
    second = f"{len(stale)} re-run and compared" + (
        f" ({_names(c for p in stale for c in p.components())})" if stale else "")
    if partly:
        second += f", {partly} of them in part (their other attacks' code identical)"
    return f"{len(plans)} baseline cell{'s' if len(plans) != 1 else ''}: {first}, {second}"


def format_plan(plans: Sequence[CellPlan]) -> str:
    """One line per stale cell (what is compared, what is unchanged by construction), one for the fresh ones."""
    lines = []
    for p in plans:
        if not p.stale:
            continue
        line = f"  re-run and compared: {p.label} (stale: {', '.join(p.components())})"
        unchanged = p.unchanged()
        if unchanged:
            compared = sorted(n for n in p.base.attacks if n in (p.compared() or ()))
            line += (f": compared {', '.join(compared)}; unchanged by construction (code identical): "
                     f"{', '.join(sorted(unchanged))}")
        lines.append(line)
    fresh = [p for p in plans if not p.stale]
    alone = [p.label for p in fresh if p.new is None]
    again = [p.label for p in fresh if p.new is not None]
    if alone:
        lines.append(f"  unchanged by construction, no new run needed: {_names(alone)}")
    if again:
        lines.append(f"  unchanged by construction, given anyway and compared: {_names(again)}")
    return "\n".join(lines)


def new_run_warning(plan: CellPlan) -> str | None:
    """A warning when a matched new run was measured by other code than this checkout's for what the baseline
    cell needs compared: it then measures that code, not the change here."""
    if plan.new is None:
        return None
    stale = stored_code(plan.new).stale(plan.here)
    compared = plan.compared()
    if not stale or (compared is not None and not stale.defense and not (stale.attacks & compared)):
        return None
    moved = CellPlan(plan.new, None, stale, plan.here).components()
    return (f"{plan.label}: its new run was measured by other code than this checkout's ({', '.join(moved)}), so "
            f"it gates that code, not this one; run it here: `{rerun_command(plan.new.config)}`")


__all__ = ["CellPlan", "format_plan", "missing_message", "new_run_warning", "plan_cells",
           "rerun_command", "summary_line"]
