"""Joining a benchmark's cells into one result per task × defense setting × seed.

A setting and seed runs one cell per dataset (the task's, and the one each attack family reads:
Trustpilot for attribute inference, CoNLL-2003 for the trained NER attacks). The joined result takes
its utility from the task's cell and each attack from the cell of its family's dataset, so the
existing report, leaderboard and seed combination (:func:`rapt_audit.reporting.summary.group_results`)
read it as one row. Its signature names the benchmark, the task, the service protocol and the
signature of every dataset's cells, so rows join only when each of those is the same.

Attacks that did not run say why, as skipped attacks do in a report: a family whose dataset the file
does not name ("not run: ..."), or a cell that has not finished yet ("pending: ...").
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rapt_audit.api.errors import ResultError
from rapt_audit.api.plugins import WORST_CASE, reference_defense
from rapt_audit.api.types import Outcome, Skip
from rapt_audit.benchmark.plan import not_applicable_reason
from rapt_audit.benchmark.run import read_index
from rapt_audit.pipeline.results import RESULT_FILE, RunResult, read_result, why_unreadable
from rapt_audit.reporting.collect import Collection, Loaded, Problem
from rapt_audit.reporting.freshness import reference, table_key


@dataclass
class Joined:
    """A benchmark folder read back: the joined results and what is missing.

    Attributes:
        index: The folder's ``benchmark.json``.
        collection: One joined result per task × setting × seed (its path: the task cell's file).
        pending: The index's cells whose result is not there yet.
        cells: Cell name → its own result (the cells that finished).
    """

    index: dict[str, Any]
    collection: Collection
    pending: list[dict[str, Any]] = field(default_factory=list)
    cells: dict[str, RunResult] = field(default_factory=dict)


def _key(cell: dict[str, Any], dataset: str | None = None) -> str:
    return json.dumps([cell["defense"], cell["setting"], cell["seed"], dataset or cell["dataset"]], sort_keys=True)


def _read_cells(out: Path, index: dict[str, Any], coll: Collection) -> tuple[dict[str, RunResult], list[dict]]:
    """Each indexed cell's result when its folder holds exactly that run; the others are pending or problems."""
    found, pending = {}, []
    for cell in index["cells"]:
        path = out / cell["name"] / RESULT_FILE
        if not path.is_file():
            if path.is_symlink() or path.exists():  # a loop of links, a link to nothing, a folder: not just pending
                coll.problems.append(Problem(path, "corrupt", f"{path} is not a readable result file "
                                             f"({why_unreadable(path)}); remove it and run the benchmark again"))
            pending.append(cell)
            continue
        try:
            result = read_result(path)
        except ResultError as exc:
            coll.problems.append(Problem(path, "corrupt", str(exc)))
            pending.append(cell)
            continue
        if result.cell_id != cell["cell_id"]:
            coll.problems.append(Problem(path, "corrupt", f"{path} holds cell {result.cell_id}, not the indexed "
                                         f"cell {cell['cell_id']}; run the benchmark again"))
            pending.append(cell)
            continue
        found[cell["name"]] = result
    return found, pending


def _dataset_signatures(index: dict[str, Any], found: dict[str, RunResult]) -> dict[str, str | None]:
    """Dataset → the signature its finished cells share, for the rows that have no cell of it (none of its attacks
    applies to their defense): where the cells differ only in ``code:`` (some measured by other code), the
    reference code's (:func:`~rapt_audit.reporting.freshness.reference`: the code here, else the newest), so such a
    row stays in the table the report draws; ``None`` when they differ otherwise (each row keeps its own)."""
    seen: dict[str, list[RunResult]] = {}
    for cell in index["cells"]:
        if cell["name"] in found:
            seen.setdefault(cell["dataset"], []).append(found[cell["name"]])
    shared: dict[str, str | None] = {}
    for dataset, results in seen.items():
        signatures = {r.signature for r in results}
        if len(signatures) > 1 and len({table_key(s) for s in signatures}) == 1:
            signatures = reference(results, lambda r: r.signature)
        shared[dataset] = next(iter(signatures)) if len(signatures) == 1 else None
    return shared


def protocol_label(index: dict[str, Any], found: dict[str, RunResult]) -> str:
    """The utility protocol as the reference's service ran it, readably: ``prompt/vt20/e2/lr0.01/v10%``
    (method, virtual tokens or LoRA rank, maximum epochs, the learning-rate grid, the share of the
    privatized training data held out to choose the epoch and rate, then ``/bias`` where the decision rule
    was set on that validation split too, :mod:`rapt_audit.utility.decision`); the file's ``[service]`` keys when
    no task cell of the reference (:func:`~rapt_audit.api.plugins.reference_defense`) has finished (or it used the
    probe, which trains nothing to describe)."""
    ceiling_defense = reference_defense()
    for cell in index["cells"]:
        result = found.get(cell["name"])
        if cell["defense"] != ceiling_defense or cell["dataset"] not in index["tasks"] or result is None:
            continue
        record = result.defense.get("release_meta", {}).get("customization") or {}
        settings, selection = record.get("settings") or {}, record.get("selection") or {}
        if not settings:
            break
        size = f"vt{settings.get('virtual_tokens')}" if settings.get("method") in ("prompt", "prefix") else (
            f"r{settings.get('lora_r')}" if settings.get("method") == "lora" else "")
        grid = "+".join(f"{lr:g}" for lr in selection.get("lr_grid") or [settings.get("lr")])
        held = f"v{100 * float(selection.get('validation_fraction', 0)):g}%"
        rule = "bias" if selection.get("decision") else ""
        return "/".join(p for p in (settings.get("method"), size, f"e{settings.get('epochs')}", f"lr{grid}", held, rule)
                        if p)
    return str(index.get("service_text", "default"))


def join(out: str | Path) -> Joined:
    """Read a benchmark folder and join its cells (see the module docstring).

    Raises:
        ResultError: when the folder holds no benchmark index.
    """
    out = Path(out)
    index = read_index(out)
    coll = Collection()
    found, pending = _read_cells(out, index, coll)
    names = {_key(c): c["name"] for c in index["cells"]}
    signatures = _dataset_signatures(index, found)
    index = {**index, "protocol": protocol_label(index, found)}
    for task in index["tasks"]:
        for cell in index["cells"]:
            if cell["dataset"] != task or cell["name"] not in found:
                continue
            parts = {task: cell["name"]}
            parts.update({ds: names.get(_key(cell, ds)) for ds in index["datasets"].values()})
            merged = _merge(index, task, {ds: found.get(n) for ds, n in parts.items() if n}, parts, signatures)
            coll.results.append(Loaded(out / cell["name"] / RESULT_FILE, merged))
    return Joined(index, coll, pending, found)


def _joined_code(index: dict[str, Any], parts: dict[str, RunResult]) -> dict[str, Any] | None:
    """The joined row's ``env.code``: the digests of the code behind each number it holds (issue #62), so a
    report compares the row with the code here component by component. Its core and defense are its cells' (two
    digests joined by ``+`` where its cells differ, which matches no code: the row is stale), each attack's digest
    that of the cell of its family's dataset. None when some cell records no per-component digests (signed
    before them): the row is then one component, its signature's ``code:``."""
    codes = {ds: r.env.get("code") for ds, r in parts.items()}
    if not codes or not all(isinstance(c, dict) for c in codes.values()):
        return None
    attacks: dict[str, str] = {}
    for family, dataset in index["datasets"].items():
        digests = (codes.get(dataset) or {}).get("attacks", {})
        attacks.update({a: digests[a] for a in index["family_attacks"].get(family, []) if a in digests})
    return {"core": "+".join(sorted({str(c.get("core", "")) for c in codes.values()})),
            "defense": "+".join(sorted({str(c.get("defense", "")) for c in codes.values()})),
            "attacks": dict(sorted(attacks.items()))}


def _merge(index: dict[str, Any], task: str, results: dict[str, RunResult | None], names: dict[str, str | None],
           signatures: dict[str, str | None]) -> RunResult:
    """One joined result: the task cell's utility, each family's attacks from its dataset's cell."""
    base = results[task]
    assert base is not None
    attacks: dict[str, Outcome] = {}
    threat: dict[str, Any] = {}
    for family, dataset in index["datasets"].items():
        got = results.get(dataset)
        for attack in index["family_attacks"].get(family, []):
            if got is None and names.get(dataset) is None:  # no cell planned: the attack cannot read the release
                reason = not_applicable_reason(base.defense["name"], attack)
                attacks[attack] = Skip(reason or f"no cell of {dataset} for this setting in the benchmark's index")
                continue
            if got is None:
                attacks[attack] = Skip(f"pending: cell {names.get(dataset)} ({dataset}) has not finished; run the "
                                       "benchmark again")
                continue
            attacks[attack] = got.attacks.get(attack, Skip(f"not in the result of cell {names.get(dataset)}"))
            if attack in (got.env.get("threat_models") or {}):
                threat[attack] = got.env["threat_models"][attack]
        if got is not None and WORST_CASE in got.attacks:  # taken over this family's attacks, in its cell
            attacks[WORST_CASE] = got.attacks[WORST_CASE]
            if WORST_CASE in (got.env.get("threat_models") or {}):
                threat[WORST_CASE] = got.env["threat_models"][WORST_CASE]
    for family, names_not_run in index.get("not_run", {}).items():
        for attack in names_not_run:
            attacks[attack] = Skip(f"not run: the benchmark names no {family} dataset ([datasets] {family})")
    parts = {ds: r for ds, r in results.items() if r is not None}
    # Every dataset's shared signature, in the index's order, so a row without a cell of some family
    # (none of its attacks applies to the defense) still joins the others' group.
    components = dict.fromkeys(s for ds in dict.fromkeys([task, *index["datasets"].values()])
                               if (s := parts[ds].signature if ds in parts else signatures.get(ds)))
    signature = (f"benchmark:{index['name']}|task:{task}|utility:{index['protocol']}|"
                 + "+".join(components))  # one token (no spaces): shown as code
    cell_id = hashlib.sha256(" ".join(sorted(r.cell_id for r in parts.values())).encode("utf-8")).hexdigest()[:12]
    env = {**{k: v for k, v in base.env.items() if k != "code"},
           **({"code": code} if (code := _joined_code(index, parts)) else {}),
           "threat_models": {**(base.env.get("threat_models") or {}), **threat},
           # The row's cost: every cell it joins.
           "wall_time_s": round(sum(float(r.env.get("wall_time_s") or 0.0) for r in parts.values()), 3),
           "benchmark": {"name": index["name"], "file_sha256": index.get("file_sha256"),
                         "service": index.get("service_text"), "protocol": index["protocol"],
                         "cells": {ds: {"name": names.get(ds), "cell_id": r.cell_id} for ds, r in parts.items()}}}
    # A cell of an attack family's dataset without task labels warns that it measured no utility; the
    # joined row's utility comes from the task's cell, so that warning would be untrue here.
    no_task = {f"dataset {r.dataset.get('name')} has no task labels, so utility was not measured"
               for ds, r in parts.items() if ds != task}
    warnings = [w for w in dict.fromkeys(w for r in parts.values() for w in r.warnings) if w not in no_task]
    return RunResult(signature=signature, cell_id=cell_id, config=dict(base.config),
                     dataset={**base.dataset, "name": task}, defense=dict(base.defense), utility=dict(base.utility),
                     attacks=attacks, env=env, warnings=warnings)


__all__ = ["Joined", "join", "protocol_label"]
