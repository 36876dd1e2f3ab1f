"""What of a stored cell the code here may reuse, stage by stage (issue #62).

A result records the digest of each component that computed it (``env.code``:
:class:`~rapt_audit.api.components.CellCode`). Run again into the same folder, a cell keeps every stage whose
components the code here still hashes alike and re-runs the others: the core is under every stage, the
defense under its utility, its release and every attack on it, an attack only under itself. The same rule
finishes an interrupted cell (its attacks that finished are kept) and re-measures a stale one.

What is reused is a :class:`StoredStages`: plain JSON data as ``result.json`` holds it (a stored result's
outcomes are frozen in mapping proxies, which do not pickle), so that a sweep's worker (another process, or a
Ray node whose disk differs) is handed it with the cell's configuration and never reads the output folder.
The defense's ``fit`` always runs: its release and the attackers' adaptive releases need the fitted defense
(the release cache serves them when it holds them).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

from rapt_audit.api.components import CellCode, Staleness, current_code
from rapt_audit.api.plugins import ATTACKS
from rapt_audit.api.types import AttackFailure, Estimate, Outcome
from rapt_audit.pipeline.config import RunConfig
from rapt_audit.pipeline.results import (
    RESULT_FILE,
    RunResult,
    outcome_from_dict,
    outcome_to_dict,
    read_result,
    signature_fields,
    utility_from_dict,
    utility_to_dict,
)
from rapt_audit.scoring.worst_case import WORST_CASE


@dataclass(frozen=True)
class StoredStages:
    """The stages of a stored run of a cell that this run takes as they are.

    Attributes:
        utility: The stored utility as ``result.json`` holds it, when the defense and the core are unchanged
            (None: measure it).
        release_meta: The stored release's facts, kept with the utility (its customization facts are set while
            utility runs, so a release made after ``fit`` alone lacks them).
        attacks: Attack name → stored outcome as ``result.json`` holds it, for the attacks whose digests match
            and that finished.
        timings: The stored seconds of the reused stages (``env.timings_s``), so that cost estimates stay true.
        stale: The stale components by name (``Staleness.components``), for the progress line.
    """

    utility: Mapping[str, Any] | None = None
    release_meta: Mapping[str, Any] | None = None
    attacks: Mapping[str, Any] = field(default_factory=dict)
    timings: Mapping[str, float] = field(default_factory=dict)
    stale: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return self.utility is not None or bool(self.attacks)

    def utility_estimates(self) -> dict[str, Estimate] | None:
        """The reused utility as estimates (None: none is reused)."""
        return None if self.utility is None else utility_from_dict(self.utility)

    def outcomes(self) -> dict[str, Outcome]:
        """The reused attacks' outcomes."""
        return {name: outcome_from_dict(doc) for name, doc in self.attacks.items()}

    def names(self) -> list[str]:
        """The reused stages, as ``env.reused_stages`` lists them (``utility``, ``attack.NAME``)."""
        return (["utility"] if self.utility is not None else []) + [f"attack.{n}" for n in sorted(self.attacks)]

    def record(self, env: dict[str, Any], timings: dict[str, float]) -> None:
        """Say in ``env`` what this run of the cell reused: ``reused_stages``; the reused stages' stored seconds in
        ``timings``; and ``cold_time_s``, this run's ``wall_time_s`` plus those seconds, what the whole cell costs
        cold, which cost estimates read (this run's own wall time is shorter by what it did not run again)."""
        kept = {k: v for k, v in self.timings.items() if k not in timings}
        env["reused_stages"] = self.names()
        env["cold_time_s"] = round(float(env["wall_time_s"]) + sum(kept.values()), 3)
        timings.update(kept)


def here_code(config: RunConfig, attacks: Iterable[str]) -> CellCode:
    """The digests the code here gives the cell of ``config`` running ``attacks`` (plugins already loaded)."""
    return current_code(config.defense, list(attacks))


def cell_code(config: RunConfig) -> CellCode:
    """:func:`here_code` for the attacks ``config`` selects (a sweep's cells were planned: its plugins are loaded)."""
    return here_code(config, ATTACKS.select(config.attacks))


def stored_code(result: RunResult) -> CellCode:
    """The digests a stored result records (one component, ``all``, when it was signed before issue #62)."""
    return CellCode.stored(signature_fields(result.signature).get("code", ""), result.env)


def cell_attacks(result: RunResult) -> list[str]:
    """The attacks a result's cell runs (the worst case is not an attack: it is computed from them)."""
    return [name for name in result.attacks if name != WORST_CASE]


def recorded_here(result: RunResult) -> CellCode:
    """The code here for the components ``result`` records: its defense and the attacks of its ``env.code`` (all
    its attacks, for a result of one digest)."""
    code = stored_code(result)
    attacks = list(code.attacks) if not code.legacy else cell_attacks(result)
    return current_code(str(result.defense.get("name")), attacks)


def staleness(result: RunResult, here: CellCode) -> Staleness:
    """What of the stored ``result`` the code ``here`` would compute differently; a failed or interrupted
    attack counts as stale (it has no number to keep)."""
    stale = stored_code(result).stale(here)
    failed = frozenset(n for n, o in result.attacks.items()
                       if n != WORST_CASE and n in here.attacks and isinstance(o, AttackFailure))
    missing = frozenset(n for n in here.attacks if n not in result.attacks)
    if failed | missing and not stale.attacks >= failed | missing:
        stale = Staleness(core=stale.core, defense=stale.defense, attacks=stale.attacks | failed | missing)
    return stale


def stored_stages(result: RunResult, here: CellCode) -> StoredStages:
    """What of the stored ``result`` (of this cell's settings) a run with the code ``here`` reuses."""
    stale = staleness(result, here)
    if stale.defense:
        return StoredStages(stale=tuple(stale.components()))
    attacks = {n: outcome_to_dict(o) for n, o in result.attacks.items()
               if n != WORST_CASE and n in here.attacks and n not in stale.attacks}
    timings = result.env.get("timings_s", {})
    kept = {k: float(v) for k, v in timings.items()
            if k == "defense.utility" or any(k in (f"attack.{n}", f"attack.{n}.fit") for n in attacks)}
    # Through JSON: plain dicts and lists all the way down, whatever froze them on reading.
    meta = json.loads(json.dumps(dict(result.defense.get("release_meta", {}))))
    # A dataset without labels has no utility to keep (an empty one): none is listed as reused.
    return StoredStages(utility=utility_to_dict(result.utility) if result.utility else None, release_meta=meta,
                        attacks=attacks, timings=kept, stale=tuple(stale.components()))


def reusable_in(out: Path, config: RunConfig, here: CellCode) -> StoredStages:
    """The stages a result in ``out`` holds for this cell that the code ``here`` reuses (none: ``--force``,
    no result, or a result of other settings)."""
    path = out / RESULT_FILE
    if config.force or not path.is_file():
        return StoredStages()
    existing = read_result(path)
    if not config.matches(existing.config):
        return StoredStages()
    return stored_stages(existing, here)


__all__ = ["StoredStages", "cell_attacks", "cell_code", "here_code", "recorded_here", "reusable_in", "staleness", "stored_code", "stored_stages"]
