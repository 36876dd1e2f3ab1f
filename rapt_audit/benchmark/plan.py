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
digests still match are reused); a pending cell is estimated by the one estimator
(:mod:`rapt_audit.pipeline.estimates`, issue #65) from the finished cells of the same defense on the same
dataset, else from ``costs.toml`` for the benchmark's service (:mod:`~rapt_audit.benchmark.costs`), else from
what the other defenses cost on that dataset, each estimate saying which (:func:`bench_evidence`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Iterable, Sequence

from rapt_audit.api.errors import ResultError
from rapt_audit.api.params import plugin_fields
from rapt_audit.api.plugins import ATTACKS, DEFENSES
from rapt_audit.benchmark.costs import read_costs
from rapt_audit.benchmark.spec import Benchmark
from rapt_audit.pipeline.cell_limit import count_cells as count_product
from rapt_audit.pipeline.config import build_config
from rapt_audit.pipeline.contracts import unreadable_release
from rapt_audit.pipeline.estimates import Estimator, Evidence, duration
from rapt_audit.pipeline.results import RESULT_FILE, RunResult, read_result, why_unreadable
from rapt_audit.pipeline.stage_reuse import cell_code, stored_stages
from rapt_audit.pipeline.sweep import Cell, cell_name
from rapt_audit.pipeline.time_budget import cell_seconds

#: The attack a task-only cell runs: a run needs one, and the attacker's prior costs nothing.
PLACEHOLDER_ATTACK = "random_guess"


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


def recorded(cell: BenchCell) -> RunResult | None:
    """The cell's stored result when its folder holds this exact run, with failed attacks or not (what the cell took
    is recorded either way); a broken or other run counts as none.

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
    return result if cell.cell.config.matches(result.config) else None


def finished(cell: BenchCell) -> RunResult | None:
    """The cell's result when its folder holds this exact run with no failed attack (else it is still to run).

    Raises:
        ResultError: as :func:`recorded`.
    """
    result = recorded(cell)
    return result if result is not None and not result.failed else None


@dataclass(frozen=True)
class CellCost:
    """What a cell costs: ``status`` (``complete``, ``stale`` or ``pending``), ``seconds`` (0 when complete), where
    the figure comes from, its kind of evidence (``basis``: :class:`~rapt_audit.pipeline.estimates.Estimate`'s, or
    ``reused``), and for a ``stale`` cell (one other code measured) its stale components (:func:`stale_components`)."""

    status: str
    seconds: float
    source: str
    stale: tuple[str, ...] = ()
    basis: str = "reused"


def stale_components(cell: BenchCell, result: RunResult) -> tuple[str, ...]:
    """The components of ``cell``'s stored ``result`` that the code here would compute differently, by name:
    ``core``, ``defense:NAME``, ``attack:NAME``, or for a cell signed with one digest of the whole package
    ``all (code:…, one digest for everything)`` (:meth:`~rapt_audit.api.components.Staleness.components`);
    empty when the cell is fresh."""
    stale = stored_stages(result, cell_code(cell.cell.config)).stale
    return tuple(f"defense:{cell.defense}" if name == "defense" else name for name in stale)


def _method(bench: Benchmark, defense: str) -> str | None:
    """The ``method`` a defense's cells of ``bench`` customize their service with (``None``: it takes none, or its
    table varies it), for a defense of the file or any other one the figures compare it with."""
    grid = next((d for d in bench.defenses if d.name == defense), None)
    if grid is None:  # another defense: the file's [service] method, where it takes one
        takes = defense in DEFENSES and "method" in plugin_fields(DEFENSES.get(defense))
        settings = dict(bench.service) if takes else {}
    else:
        settings = {} if any(k == "method" for k, _ in grid.grid) else {**dict(grid.service), **dict(grid.fixed)}
    return None if settings.get("method") is None else str(settings["method"])


def bench_evidence(bench: Benchmark, cells: Sequence[BenchCell], *, stored: dict[str, RunResult] | None = None,
                   indexed: Sequence[BenchCell] = (),
                   published: Iterable[tuple[str, str, str, RunResult]] = ()) -> Evidence:
    """What the estimator starts from for ``cells`` of ``bench``: ``costs.toml``'s figures for the benchmark's
    service model and each defense's method (:mod:`~rapt_audit.benchmark.costs`; those of every defense it has
    figures for, to compare a defense without one with), what every cell with a result took (``cells``, whose
    results ``stored`` may hold already read, and the file's other cells ``indexed``; ``published``: ``(name,
    defense, dataset, result)`` of a published benchmark's cells not copied here yet), each stale cell's stale
    stages, and the profile's flat guess."""
    stored = stored if stored is not None else _stored(cells)
    costs = read_costs(bench.profile)
    model = bench.service_model or bench.model
    names = sorted({d.name for d in bench.defenses} | costs.defenses())
    figures = tuple(f for d in names for x in bench.all_datasets
                    if (f := costs.figure(d, x, model=model, method=_method(bench, d))) is not None)
    # The published cells' results are in memory already: read no copy of them again.
    measured = {name: (name, defense, dataset, cell_seconds(result)) for name, defense, dataset, result in published}
    fixed = {}
    for cell in list(cells) + [c for c in indexed if c.name not in stored and c.name not in measured]:
        if (result := stored.get(cell.name) or recorded(cell)) is not None:
            measured[cell.name] = (cell.name, cell.defense, cell.dataset, cell_seconds(result))
    for cell in cells:
        result = stored.get(cell.name)
        reused = None if result is None or result.failed else stored_stages(result, cell_code(cell.cell.config))
        if reused is not None and reused.stale:
            # Only the stale stages run again: what the whole cell took, less the stored seconds of what it keeps.
            left = max(cell_seconds(result) - sum(reused.timings.values()), 0.0)
            fixed[cell.name] = (left, f"stale ({'; '.join(stale_components(cell, result))}): those stages run again, "
                                      f"about {duration(left)} of the {result.env.get('wall_time_s')} s it took")
    kinds = {d: ",".join(sorted(DEFENSES.get(d).exposes)) or "nothing" for d in names if d in DEFENSES}
    guess = None if costs.default is None else (
        costs.default, f"costs.toml's {bench.profile}-profile default, a flat guess (time one cell of it first with "
                       "--cell: the estimates learn from it)")
    return Evidence(figures=figures, measured=tuple(measured.values()), fixed=fixed, kinds=kinds, guess=guess,
                    no_figure=f"costs.toml has no {bench.profile}-profile figure for {{defense}} on {{dataset}} "
                              f"(service {costs.model_key(model)})")


def _stored(cells: Sequence[BenchCell]) -> dict[str, RunResult]:
    """Each cell's :func:`recorded` result, by cell name, read once."""
    return {c.name: r for c in cells if (r := recorded(c)) is not None}


def estimate_costs(cells: Sequence[BenchCell], bench: Benchmark, *, indexed: Sequence[BenchCell] = (),
                   published: Iterable[tuple[str, str, str, RunResult]] = ()) -> tuple[list[CellCost], Evidence]:
    """Each cell's cost, from the one estimator (:class:`~rapt_audit.pipeline.estimates.Estimator`) on
    :func:`bench_evidence` (also returned: a run stores it for its loops): a finished cell is reused (what it took
    shown), a stale one costs its stale stages, a pending one its estimate, each saying where it comes from."""
    stored = _stored(cells)
    evidence = bench_evidence(bench, cells, stored=stored, indexed=indexed, published=published)
    estimator = Estimator(evidence)
    costs = []
    for cell in cells:
        estimate, result = estimator.estimate(cell.cell), stored.get(cell.name)
        if estimate.basis == "fixed":
            costs.append(CellCost("stale", float(estimate.seconds or 0.0), estimate.source,
                                  stale_components(cell, result), "fixed"))
        elif result is not None and not result.failed:
            costs.append(CellCost("complete", 0.0, f"reused (took {result.env.get('wall_time_s')} s)"))
        else:
            costs.append(CellCost("pending", float(estimate.seconds or 0.0), estimate.source, (), estimate.basis))
    return costs, evidence


def stale_summary(stale: Iterable[Sequence[str]]) -> str:
    """``attack:bayes_inversion 755, defense:custext 20``: how many cells each component makes stale, from each
    stale cell's components (:attr:`CellCost.stale`); a cell counts under every component of it that is stale."""
    counts: dict[str, int] = {}
    for components in stale:
        for component in components:
            counts[component] = counts.get(component, 0) + 1
    return ", ".join(f"{name} {n}" for name, n in sorted(counts.items(), key=lambda item: (-item[1], item[0])))


__all__ = ["BenchCell", "CellCost", "PLACEHOLDER_ATTACK", "bench_evidence", "count_cells", "datasets_of",
           "estimate_costs", "finished", "not_applicable_reason", "plan_cells", "recorded", "stale_components",
           "stale_summary"]
