"""A benchmark's cells (defense × grid point × seed × dataset), and what running them would cost.

Each cell is an ordinary sweep cell (:class:`rapt_audit.pipeline.sweep.Cell`): the run that
``rapt-audit run --defense D --dataset DS --seed S --attacks A --set KEY=VALUE ...`` makes, with the
attacks of the families that read that dataset. Its folder is named by its settings and the first
digits of its ``cell_id``, so a cell is found again only by its exact configuration: an interrupted
benchmark run again reuses every finished cell, and editing the file never makes a folder hold a
different run.

Cost: a cell already finished by the code here costs nothing (it is reused) and says what it took
(``env.wall_time_s``); a *stale* cell, one that other code measured (issue #62: a digest per component,
:mod:`rapt_audit.api.components`), is to run, and costs what its stale stages took (the stages whose
digests still match are reused); a pending cell is estimated from the finished cells of the same defense on
the same dataset, else from the per-profile table ``costs.toml`` next to this module.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Iterable, Sequence

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: the same parser from PyPI
    import tomli as tomllib

from rapt_audit.api.errors import ResultError
from rapt_audit.api.plugins import ATTACKS, DEFENSES
from rapt_audit.benchmark.spec import Benchmark
from rapt_audit.pipeline.cell_driver import duration
from rapt_audit.pipeline.cell_limit import count_cells as count_product
from rapt_audit.pipeline.config import build_config
from rapt_audit.pipeline.contracts import unreadable_release
from rapt_audit.pipeline.results import RESULT_FILE, RunResult, read_result, why_unreadable
from rapt_audit.pipeline.stage_reuse import cell_code, stored_stages
from rapt_audit.pipeline.sweep import Cell, cell_name
from rapt_audit.pipeline.time_budget import cell_seconds

#: The attack a task-only cell runs: a run needs one, and the attacker's prior costs nothing.
PLACEHOLDER_ATTACK = "random_guess"
COSTS_FILE = Path(__file__).with_name("costs.toml")


@dataclass(frozen=True)
class BenchCell:
    """One cell of a benchmark: the sweep cell and what it stands for.

    Attributes:
        cell: The sweep cell (its configuration, folder name and ``--set`` pairs).
        defense: The defense.
        setting: The grid point as ``--set`` pairs (service, fixed and grid values).
        varying: The pairs the defense's grid varies (how rows are labelled).
        seed: The run seed.
        dataset: The dataset the cell reads.
        attacks: The attacks it runs.
    """

    cell: Cell
    defense: str
    setting: tuple[tuple[str, str], ...]
    varying: tuple[tuple[str, str], ...]
    seed: int
    dataset: str
    attacks: tuple[str, ...]

    @property
    def name(self) -> str:
        """The cell's folder name inside the benchmark's output folder."""
        return self.cell.name

    def to_index(self) -> dict[str, Any]:
        """The cell as the benchmark's index records it."""
        return {"name": self.name, "defense": self.defense, "setting": dict(self.setting),
                "varying": dict(self.varying), "seed": self.seed, "dataset": self.dataset,
                "attacks": list(self.attacks), "cell_id": self.cell.config.cell_id()}


def plan_cells(bench: Benchmark, *, out: Path, data_dir: str | None = None,
               device: str | None = None) -> list[BenchCell]:
    """Every cell of ``bench``, ordered seed, dataset (the tasks first), defense (file order), grid point.

    Seed first: a run stopped by its time budget leaves every defense with the same number of
    finished seeds (not the first defenses complete and the last ones absent), and ``identity``'s
    cells of a seed run before the other defenses' no-privacy cells, which read its stored service
    and attack models wherever their releases are the same texts. Dataset before defense: the cells
    of one setting and seed on different datasets share what the first of them trains and stores
    (SnD's denoiser, about 300 s at the cpu profile), and with ``--jobs 2`` cells next to each other
    run at the same time, so adjacent cells of one setting each trained it (measured: both of SnD's
    cells of a setting trained the denoiser). With the task's cells first, a setting's other cells
    start long after its task cell stored what they read. A dataset that only a family
    without selected attacks reads has no cell, nor has one none of whose attacks can read the
    defense's release (the joined row says why, :func:`not_applicable_reason`); a task with no attack
    of its own runs :data:`PLACEHOLDER_ATTACK` (a run needs one attack).
    """
    cells = []
    datasets = {defense.name: datasets_of(bench, defense.name) for defense in bench.defenses}
    order = [(seed, dataset, defense, point) for seed in bench.seeds for dataset in bench.all_datasets
             for defense in bench.defenses if dataset in datasets[defense.name] for point in defense.points()]
    for seed, dataset, defense, point in order:
        attacks = bench.attacks_for(dataset) or (PLACEHOLDER_ATTACK,)
        cli: dict[str, Any] = {"defense": defense.name, "dataset": dataset, "profile": bench.profile,
                               "model": bench.model, "seed": seed, "attacks": ",".join(attacks),
                               **({"service_model": bench.service_model} if bench.service_model else {})}
        cli.update({k: v for k, v in (("data_dir", data_dir), ("device", device)) if v is not None})
        sets = [f"defense.{k}={v}" for k, v in point] + [f"data.{k}={v}" for k, v in bench.splits]
        config = build_config(cli=cli, sets=sets)
        varying = defense.varying(point)
        assignments = (("defense", defense.name), *varying, ("seed", str(seed)), ("dataset", dataset))
        # Labelled by the settings as the file spells them, not by the canonical cell_id: the folders of every
        # published benchmark were named so and are found again as they are (a benchmark's values are already one
        # spelling each, set_text, and its grids refuse a setting twice, so the label is one per setting).
        name = f"{cell_name(assignments)}-{config.spelling_id()[:6]}"
        cell = Cell(assignments, name, replace(config, out=str(out / name)))
        cells.append(BenchCell(cell, defense.name, point, varying, seed, dataset, attacks))
    return cells


def datasets_of(bench: Benchmark, defense: str) -> list[str]:
    """The datasets a cell of ``defense`` runs on: every task, and each other dataset where some selected attack
    can read the defense's release (else a run of it would only skip every attack: SnD on CoNLL, minutes for
    nothing)."""
    return [d for d in bench.all_datasets
            if d in bench.tasks or not all(not_applicable_reason(defense, a) for a in bench.attacks_for(d))]


def count_cells(bench: Benchmark) -> tuple[int, str]:
    """How many cells :func:`plan_cells` makes, from the lengths of the axes alone (no grid point is built), and
    the product it comes from (``1 seed(s) × (t2t 100 × 100 × 100 point(s) × 1 dataset(s))``)."""
    per_defense = [(count_product(len(v) for _, v in d.grid), len(datasets_of(bench, d.name))) for d in bench.defenses]
    total = len(bench.seeds) * sum(points * datasets for points, datasets in per_defense)
    terms = " + ".join(f"{d.name} {' × '.join(str(len(v)) for _, v in d.grid) or '1'} point(s) × {n} dataset(s)"
                       for d, (_, n) in zip(bench.defenses, per_defense))
    return total, f"{len(bench.seeds)} seed(s) × ({terms})"


def not_applicable_reason(defense: str, attack: str) -> str | None:
    """Why ``attack`` cannot read what ``defense`` declares it releases (the runner's skip reason), or ``None``
    when it can (or when either is not installed here: then the run itself decides)."""
    if attack not in ATTACKS or defense not in DEFENSES:
        return None
    return unreadable_release(ATTACKS.get(attack).requires, DEFENSES.get(defense).exposes, defense)


def finished(cell: BenchCell) -> RunResult | None:
    """The cell's result when its folder holds this exact run (a broken or other run counts as not finished).

    Raises:
        ResultError: for a ``result.json`` that is a loop of links, a link to nothing or not a file, naming it
            (the run would refuse the folder: a dry run says so rather than list the cell as pending).
    """
    path = Path(str(cell.cell.config.out)) / RESULT_FILE
    if not path.is_file():
        if path.is_symlink() or path.exists():
            raise ResultError(f"{path} is not a readable result file ({why_unreadable(path)}); remove it")
        return None
    try:
        result = read_result(path)
    except ResultError:
        return None
    return result if cell.cell.config.matches(result.config) and not result.failed else None


def profile_costs(profile: str) -> dict[str, float]:
    """Seconds per cell for ``profile``, from ``costs.toml``: by ``defense.dataset``, by defense, and ``default``."""
    table = tomllib.loads(COSTS_FILE.read_text(encoding="utf-8"))
    return {k: float(v) for k, v in table.get(profile, {}).items()}


@dataclass(frozen=True)
class CellCost:
    """What a cell costs: ``seconds`` (0 when finished), where the figure comes from, and for a ``stale`` cell
    (one other code measured) its stale components (:func:`stale_components`)."""

    status: str
    seconds: float
    source: str
    stale: tuple[str, ...] = ()


def stale_components(cell: BenchCell, result: RunResult) -> tuple[str, ...]:
    """The components of ``cell``'s stored ``result`` that the code here would compute differently, by name:
    ``core``, ``defense:NAME``, ``attack:NAME``, or for a cell signed with one digest of the whole package
    ``all (code:…, one digest for everything)`` (:meth:`~rapt_audit.api.components.Staleness.components`);
    empty when the cell is fresh."""
    stale = stored_stages(result, cell_code(cell.cell.config)).stale
    return tuple(f"defense:{cell.defense}" if name == "defense" else name for name in stale)


def estimate_costs(cells: Sequence[BenchCell], profile: str) -> list[CellCost]:
    """Each cell's cost: finished cells are reused (their ``env.wall_time_s`` shown), others estimated."""
    results = [finished(c) for c in cells]
    similar: dict[tuple[str, str], list[float]] = {}
    for cell, result in zip(cells, results):
        if result is not None and isinstance(result.env.get("wall_time_s"), (int, float)):  # the whole cell's cost
            similar.setdefault((cell.defense, cell.dataset), []).append(cell_seconds(result))
    table = profile_costs(profile)
    costs = []
    for cell, result in zip(cells, results):
        if result is not None:
            wall = result.env.get("wall_time_s")
            reused = stored_stages(result, cell_code(cell.cell.config))
            if not reused.stale:
                costs.append(CellCost("complete", 0.0, f"reused (took {wall} s)"))
                continue
            # Only the stale stages run again: what the whole cell took, less the stored seconds of what it keeps.
            left = max(cell_seconds(result) - sum(reused.timings.values()), 0.0)
            stale = stale_components(cell, result)
            costs.append(CellCost("stale", left, f"stale ({'; '.join(stale)}): those stages run again, "
                                                 f"about {duration(left)} of the {wall} s it took", stale))
            continue
        seen = similar.get((cell.defense, cell.dataset))
        if seen:
            costs.append(CellCost("pending", sum(seen) / len(seen),
                                  f"mean of {len(seen)} finished {cell.defense} cell(s) on {cell.dataset}"))
        else:
            # The attack families cost differently (a task cell trains the service, an attribute or NER cell
            # does not): a figure for the defense on this dataset wins over the defense's, then the default.
            key = next((k for k in (f"{cell.defense}.{cell.dataset}", cell.defense) if k in table), "default")
            seconds = table.get(key, 60.0)
            if key == "default":  # a plugin's (or an unlisted) defense: a guess, and the listing must say so
                source = (f"costs.toml has no {profile}-profile figure for {cell.defense}: its default, a guess "
                          "(time one cell first with --cell)")
            else:
                source = f"{profile}-profile estimate for {key} (costs.toml)"
            costs.append(CellCost("pending", seconds, source))
    return costs


def stale_summary(stale: Iterable[Sequence[str]]) -> str:
    """``attack:bayes_inversion 755, defense:custext 20``: how many cells each component makes stale, from each
    stale cell's components (:attr:`CellCost.stale`); a cell counts under every component of it that is stale."""
    counts: dict[str, int] = {}
    for components in stale:
        for component in components:
            counts[component] = counts.get(component, 0) + 1
    return ", ".join(f"{name} {n}" for name, n in sorted(counts.items(), key=lambda item: (-item[1], item[0])))


def dry_run_text(bench: Benchmark, cells: Sequence[BenchCell], *, out: Path, jobs: int = 1,
                 problems: Sequence[str] = (), notes: Sequence[str] = ()) -> str:
    """The dry run's listing: the benchmark, every cell with its status and estimated cost, the total, then
    ``notes`` (what the run would say here) and ``problems`` (what stops it)."""
    costs = estimate_costs(cells, bench.profile)
    lines = [f"benchmark {bench.name} ({bench.path}, sha256 {bench.sha256[:12]}): profile {bench.profile}, "
             f"model {bench.model}, seeds {', '.join(map(str, bench.seeds))}, service {bench.service_text}",
             "datasets: " + "; ".join([f"utility {', '.join(bench.tasks)}"] +
                                      [f"{f} {d} ({', '.join(bench.family_attacks.get(f, ())) or 'no attack'})"
                                       for f, d in bench.datasets.items()])]
    lines += [f"not run: {f} attacks ({', '.join(a)}): [datasets] names no {f} dataset"
              for f, a in bench.not_run.items()]
    width = max((len(c.name) for c in cells), default=4)
    lines += [f"{len(cells)} cells in {out}:", f"  {'cell':<{width}}  {'status':<8}  {'cost':>7}  estimated from"]
    for cell, cost in zip(cells, costs):
        lines.append(f"  {cell.name:<{width}}  {cost.status:<8}  {duration(cost.seconds):>7}  {cost.source}")
    todo = [c for c in costs if c.status in ("pending", "stale")]
    total = sum(c.seconds for c in todo)
    share = f"; with --jobs {jobs}, about {duration(total / jobs)}" if jobs > 1 else ""
    stale = [c for c in costs if c.status == "stale"]
    lines.append(f"total: {len(cells)} cells, {len(cells) - len(todo)} finished, {len(todo)} to run "
                 f"({len(stale)} of them stale: other code measured them), about "
                 f"{duration(total)} one after another{share}")
    if stale:
        lines.append("stale by component: " + stale_summary(c.stale for c in stale))
    lines += [f"note: {n}" for n in notes] + [f"problem: {p}" for p in problems]
    lines.append("dry run: nothing was run or written" + (" (fix the problems above first)" if problems else
                                                           " (drop --dry-run to run it)"))
    return "\n".join(lines)


__all__ = ["BenchCell", "COSTS_FILE", "CellCost", "PLACEHOLDER_ATTACK", "count_cells", "datasets_of", "dry_run_text",
           "estimate_costs", "finished", "not_applicable_reason", "plan_cells", "profile_costs", "stale_components",
           "stale_summary"]
