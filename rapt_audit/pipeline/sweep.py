"""Sweeps: one run per value of a parameter (``--sweep eta=25,75,inf``), resumable.

A sweep is a grid of ordinary runs. Each cell is the base configuration with one value per swept
key applied as a ``--set`` pair, so any key ``--set`` understands can be swept (``eta``,
``replacement``, ``defense.eta``, ``seed``, ``defense``, ``attacks.whitebox.topk``...). Several
``--sweep`` options form the Cartesian product. Cell ``c`` writes ``<out>/<c.name>/result.json``
with the runner's atomic write, and a cell whose directory already holds that exact run is reused,
so an interrupted sweep resumes where it stopped and loses nothing. ``<out>/sweep.json`` indexes
the cells and is rewritten (atomically) after every cell. One process at a time: the sweep holds
the lock of ``<out>`` and each running cell that of its own directory.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from rapt_audit.api.errors import UsageError
from rapt_audit.api.files import remove_stray_temps, write_json_atomic
from rapt_audit.api.locks import hold_out_dir
from rapt_audit.api.types import Skip
from rapt_audit.pipeline import runner as audit_runner
from rapt_audit.pipeline.config import RunConfig, build_config
from rapt_audit.pipeline.results import RESULT_FILE, RunResult

SWEEP_SCHEMA = "rapt-audit/sweep/1"
SWEEP_INDEX = "sweep.json"
Log = Callable[[str], None]


@dataclass(frozen=True)
class Axis:
    """One swept key and its values, in the order given."""

    key: str
    values: tuple[str, ...]


@dataclass(frozen=True)
class Cell:
    """One point of the sweep grid: its ``--set`` pairs, directory name and configuration."""

    assignments: tuple[tuple[str, str], ...]
    name: str
    config: RunConfig

    @property
    def label(self) -> str:
        """``eta=25, seed=1``: how the cell is named in messages."""
        return ", ".join(f"{k}={v}" for k, v in self.assignments)


def parse_axis(spec: str) -> Axis:
    """Parse one ``--sweep KEY=V1,V2,...`` option.

    Raises:
        UsageError: on a missing ``=``, an empty key, no values or a repeated value.
    """
    key, sep, values = spec.partition("=")
    key = key.strip()
    items = tuple(v.strip() for v in values.split(",") if v.strip())
    if not sep or not key or not items:
        raise UsageError(f"--sweep expects KEY=V1,V2,... (for example eta=25,75,inf), got {spec!r}")
    if key in {"out", "force", "device", "data_dir"}:
        raise UsageError(f"--sweep {key}=... does not change the result; sweep a parameter such as eta, "
                         "replacement, seed or defense")
    repeated = sorted({v for v in items if items.count(v) > 1})
    if repeated:
        raise UsageError(f"--sweep {key} lists {', '.join(repeated)} more than once")
    return Axis(key, items)


def parse_axes(specs: Sequence[str]) -> list[Axis]:
    """Parse every ``--sweep`` option; the same key may not be swept twice."""
    axes = [parse_axis(s) for s in specs]
    keys = [a.key for a in axes]
    twice = sorted({k for k in keys if keys.count(k) > 1})
    if twice:
        raise UsageError(f"--sweep {', '.join(twice)} is given more than once; list all its values in one option")
    return axes


_UNSAFE = re.compile(r"[^A-Za-z0-9.=+_-]+")


def cell_name(assignments: Sequence[tuple[str, str]]) -> str:
    """A stable directory name for a cell: ``eta=25`` or ``defense=t2t_eta=inf``.

    Characters that are unsafe in file names (a model path's ``/``, spaces) become ``-``; a short
    hash is appended whenever that happens, so two different values never share a directory.
    """
    raw = "_".join(f"{k}={v}" for k, v in assignments)
    safe = _UNSAFE.sub("-", raw).strip("-.") or "cell"
    if safe != raw:
        safe += "-" + hashlib.sha256(raw.encode("utf-8")).hexdigest()[:6]
    return safe


def default_sweep_dir(base: RunConfig, axes: Sequence[Axis]) -> Path:
    """``runs/sweep-<defense>-<keys>-<hash>`` for a sweep run without ``--out``."""
    digest = hashlib.sha256(json.dumps({"base": base.cell_id(), "axes": [[a.key, list(a.values)] for a in axes]},
                                       sort_keys=True).encode("utf-8")).hexdigest()[:8]
    return Path("runs") / f"sweep-{base.defense}-{'-'.join(a.key for a in axes)}-{digest}"


def expand(*, axes: Sequence[Axis], file: str | Path | None, cli: Mapping[str, Any], sets: Sequence[str],
           out: Path) -> list[Cell]:
    """The cells of the grid, in row-major order of the axes, each with a complete configuration.

    The swept pairs are applied after the user's ``--set`` pairs, so they win over them.
    """
    cli = {k: v for k, v in cli.items() if k != "out"}
    cells = []
    for combo in itertools.product(*(a.values for a in axes)):
        assignments = tuple(zip((a.key for a in axes), combo))
        config = build_config(file=file, cli=cli, sets=list(sets) + [f"{k}={v}" for k, v in assignments])
        name = cell_name(assignments)
        cells.append(Cell(assignments, name, replace(config, out=str(out / name))))
    return cells


def _write_index(out: Path, cells: Sequence[Cell], status: Mapping[str, str], axes: Sequence[Axis]) -> None:
    doc = {"schema": SWEEP_SCHEMA, "updated_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
           "axes": [{"key": a.key, "values": list(a.values)} for a in axes],
           "cells": [{"name": c.name, "assignments": dict(c.assignments), "dir": c.name,
                      "cell_id": c.config.cell_id(), "status": status[c.name]} for c in cells]}
    write_json_atomic(out / SWEEP_INDEX, doc)


def run_sweep(cells: Sequence[Cell], *, out: Path, axes: Sequence[Axis], log: Log | None = None,
              progress: bool = False,
              runner: Callable[..., RunResult] | None = None) -> list[tuple[Cell, RunResult]]:
    """Run every cell that is not complete yet and return each cell's result, in grid order.

    Every cell is validated before any work starts (plugin names and values, data, and that no
    cell directory holds a different run), so a bad value fails in seconds, not after hours. The
    sweep holds the lock of ``out`` throughout (:mod:`~rapt_audit.api.locks`), so a second sweep
    into the same directory fails at once. ``Ctrl-C`` (or SIGTERM, through the CLI) abandons the
    cell in progress without writing it; completed cells stay on disk and the next call reuses
    them. The interrupt is re-raised with a message saying how many finished cells were kept.

    Args:
        cells: From :func:`expand`.
        out: The sweep directory (cells live in its sub-directories).
        axes: The swept keys (for the index file).
        log: Where progress lines go.
        progress: Show progress bars inside each run.
        runner: The function that runs one configuration (default :func:`rapt_audit.pipeline.runner.run`).

    Raises:
        ResultError: when another process is using ``out`` or a cell directory holds another run.
    """
    with hold_out_dir(out):
        remove_stray_temps(out, SWEEP_INDEX)  # left by a killed sweep; never read, now removed
        try:
            return _run_cells(cells, out=out, axes=axes, log=log, progress=progress, runner=runner)
        except KeyboardInterrupt as stop:
            # Counted on disk: a cell whose result was written just before the interrupt is kept too.
            kept = sum((Path(c.config.out) / RESULT_FILE).is_file() for c in cells)
            stop.args = (f"{kept} of {len(cells)} finished cells kept in {out}; rerun the same command to resume",)
            raise


def _run_cells(cells: Sequence[Cell], *, out: Path, axes: Sequence[Axis], log: Log | None, progress: bool,
               runner: Callable[..., RunResult] | None) -> list[tuple[Cell, RunResult]]:
    say = log or (lambda _msg: None)
    runner = runner or audit_runner.run  # looked up at call time, so a patched runner is honoured
    status: dict[str, str] = {}
    for cell in cells:  # validate everything first: names, values, data, directories
        audit_runner.plan(cell.config)
        done = audit_runner.check_out_dir(Path(cell.config.out), cell.config)
        status[cell.name] = "complete" if done is not None and not cell.config.force else "pending"
    _write_index(out, cells, status, axes)
    todo = sum(s == "pending" for s in status.values())
    say(f"sweep of {len(cells)} cells in {out}: {len(cells) - todo} complete, {todo} to run")
    results = []
    for i, cell in enumerate(cells, 1):
        verb = "reusing" if status[cell.name] == "complete" else "running"
        say(f"cell {i}/{len(cells)} {cell.label}: {verb} {cell.config.out}")
        result = runner(cell.config, log=log, progress=progress)
        status[cell.name] = "complete"
        _write_index(out, cells, status, axes)
        results.append((cell, result))
    return results


def format_sweep(results: Sequence[tuple[Cell, RunResult]]) -> str:
    """A compact table: one line per cell, utility then each attack's empirical privacy (↑ = better)."""
    if not results:
        return "no cells"
    first = results[0][1]
    utility = list(dict.fromkeys(m for _, r in results for m in r.utility))
    attacks = list(dict.fromkeys(a for _, r in results for a in r.attacks))
    width = max(len(c.label) for c, _ in results)
    cols = [f"{m} ↑" for m in utility] + [f"{a} ↑" for a in attacks]
    lines = [f"sweep on {first.dataset.get('name')}  ({first.signature})"]
    lines += [f"WARNING: {w}" for w in dict.fromkeys(w for _, r in results for w in r.warnings)]
    lines.append(f"{'cell':<{width}}  " + "  ".join(f"{c:>{max(8, len(c))}}" for c in cols))
    for cell, result in results:
        values = [result.utility[m].value if m in result.utility else None for m in utility]
        for a in attacks:
            outcome = result.attacks.get(a)
            values.append(None if outcome is None or isinstance(outcome, Skip) else outcome.empirical_privacy.value)
        cells = ["skipped" if v is None else f"{v:.4f}" for v in values]
        lines.append(f"{cell.label:<{width}}  " + "  ".join(f"{s:>{max(8, len(c))}}" for s, c in zip(cells, cols)))
    if len({r.signature for _, r in results}) > 1:
        lines.append("note: the cells have different comparability signatures (the sweep changed data, "
                     "splits, model, profile or attack settings); compare them with care")
    return "\n".join(lines)


__all__ = ["Axis", "Cell", "SWEEP_INDEX", "SWEEP_SCHEMA", "cell_name", "default_sweep_dir", "expand",
           "format_sweep", "parse_axes", "parse_axis", "run_sweep"]
