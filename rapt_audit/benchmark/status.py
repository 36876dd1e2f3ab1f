"""``rapt-audit benchmark status``: which cells of a benchmark folder the code here would measure again, by
component (issue #62). It reads the folder and runs nothing.

A cell is *fresh* when the code here would compute none of it differently (every component's digest still
matches: :meth:`~rapt_audit.api.components.CellCode.stale`), *stale* when some component's code has changed
since it ran, and *pending* when it has no finished result (none yet, or failed attacks). A stale cell is to
run, as a pending one is, but ``benchmark run`` re-runs only its stale stages and reuses the others (the
runner's rule, :mod:`rapt_audit.pipeline.stage_reuse`). The components are named as the dry run names them:
``core`` (every stage), ``defense:NAME`` (its utility, its release and every attack on it),
``attack:NAME`` (that attack), or, for a cell signed with one digest of the whole package before per-component
digests, the one component ``all (code:…, one digest for everything)``, stale as a whole.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from rapt_audit.benchmark.plan import BenchCell, finished, stale_components, stale_summary
from rapt_audit.benchmark.run import COPY_FILE, INDEX_FILE
from rapt_audit.benchmark.spec import Benchmark
from rapt_audit.pipeline.results import RunResult
from rapt_audit.pipeline.stage_reuse import recorded_here, stored_code

FRESH, STALE, PENDING = "fresh", "stale", "pending"


@dataclass(frozen=True)
class CellState:
    """One cell against the code here: ``state`` (:data:`FRESH`, :data:`STALE` or :data:`PENDING`) and, when
    stale, its stale components (:func:`~rapt_audit.benchmark.plan.stale_components`)."""

    cell: BenchCell
    state: str
    stale: tuple[str, ...] = ()


def cell_states(cells: Sequence[BenchCell]) -> list[CellState]:
    """Each of ``cells`` (planned into their folder) read back and compared with the code here (plugins loaded,
    as planning loads them)."""
    states = []
    for cell in cells:
        result = finished(cell)
        if result is None:
            states.append(CellState(cell, PENDING))
            continue
        stale = stale_components(cell, result)
        states.append(CellState(cell, STALE if stale else FRESH, stale))
    return states


def by_component(states: Sequence[CellState]) -> list[tuple[str, int]]:
    """``[("attack:bayes_inversion", 755), ("defense:custext", 20)]``: how many stale cells each component makes
    stale, most first (a cell counts under each of its stale components)."""
    counts: dict[str, int] = {}
    for state in states:
        for component in state.stale:
            counts[component] = counts.get(component, 0) + 1
    return sorted(counts.items(), key=lambda item: (-item[1], item[0]))


def source_of(given: str) -> tuple[str, Path | None]:
    """The benchmark ``benchmark status GIVEN`` reads, and the folder it implies: a benchmark folder (holding
    ``benchmark.json``) is read by its own copy of its file (``benchmark.toml``) and is the folder; a NAME or
    FILE implies none (``--out``, else the benchmark's default folder)."""
    folder = Path(given).expanduser()
    if (folder / INDEX_FILE).is_file() and (folder / COPY_FILE).is_file():
        return str(folder / COPY_FILE), folder
    return given, None


def status_text(bench: Benchmark, states: Sequence[CellState], *, out: Path, source: str,
                listing: bool = False) -> str:
    """The status: the counts of fresh, stale and pending cells, the stale cells by component, the command that
    runs what is to run, and with ``listing`` every cell that is not fresh with its state and components."""
    count = {s: sum(1 for c in states if c.state == s) for s in (FRESH, STALE, PENDING)}
    lines = [f"benchmark {bench.name} ({bench.path}, sha256 {bench.sha256[:12]}) in {out}: {len(states)} cells, "
             f"{count[FRESH]} fresh, {count[STALE]} stale, {count[PENDING]} pending (no finished result)"]
    components = by_component(states)
    if components:
        width = max(len(name) for name, _ in components)
        lines.append("stale against the code here, by component (a cell counts under each of its stale components):")
        lines += [f"  {name:<{width}}  {n} cell(s)" for name, n in components]
    if listing:
        width = max((len(c.cell.name) for c in states), default=4)
        lines += [f"  {c.cell.name:<{width}}  {c.state:<7}  {'; '.join(c.stale)}".rstrip()
                  for c in states if c.state != FRESH]
    todo = count[STALE] + count[PENDING]
    if todo:
        lines.append(f"{todo} cell(s) to run: rapt-audit benchmark run {source} --out {out} (a stale cell has only "
                     "its stale stages run again, the others reused; add --dry-run for each cell's estimated cost)")
    else:
        lines.append("every cell is fresh: nothing to run")
    return "\n".join(lines)


def result_components(result: RunResult) -> tuple[str, ...]:
    """The stale components of a stored cell's ``result`` against the code here, by code alone (a failed attack is
    not counted: this is about what code measured the numbers), named as :func:`stale_components` names them."""
    defense = str(result.defense.get("name"))
    stale = stored_code(result).stale(recorded_here(result)).components()
    return tuple(f"defense:{defense}" if name == "defense" else name for name in stale)


def code_summary(results: Sequence[RunResult]) -> str:
    """What code measured ``results`` (a benchmark's finished cells), component by component, and how many are
    fresh against the code that renders this: the cells signed with one digest of the whole package (one
    component, ``all``), the per-component cells' cores and table codes (core and attacks: the signature's
    ``code:``; each defense has its own digest, per row), then the fresh and stale counts, stale by component."""
    codes = [stored_code(r) for r in results]
    parts = []
    legacy = sorted({c.legacy[:8] for c in codes if c.legacy})
    if legacy:
        n = sum(1 for c in codes if c.legacy)
        parts.append(f"{n} signed with one digest of the whole package, code:{', code:'.join(legacy)} (one component, "
                     "all)")
    per = [c for c in codes if not c.legacy]
    if per:
        cores = sorted({c.core[:8] for c in per})
        tables = sorted({c.shared() for c in per})
        parts.append(f"{len(per)} with a digest per component: core {', '.join(cores)}, table code:"
                     f"{', code:'.join(tables)} (core and attacks, in the signatures), a digest per defense")
    stale = [s for s in (result_components(r) for r in results) if s]
    fresh = len(results) - len(stale)
    text = f"{len(results)} cells: {'; '.join(parts)}; against the code that rendered this, {fresh} fresh"
    text += f", {len(stale)} stale ({stale_summary(stale)})" if stale else ", none stale"
    return text


def fresh_counts(results: Sequence[RunResult]) -> tuple[int, int]:
    """How many of ``results`` are fresh and how many stale against the code here (:func:`result_components`)."""
    stale = sum(1 for r in results if result_components(r))
    return len(results) - stale, stale


__all__ = ["CellState", "FRESH", "PENDING", "STALE", "by_component", "cell_states", "code_summary", "fresh_counts",
           "result_components", "source_of", "status_text"]
