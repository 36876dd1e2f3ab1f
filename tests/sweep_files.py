"""What sweep tests read back from a sweep directory, and the tiny grid they run (shared by the executors' tests)."""

from __future__ import annotations

import json
from pathlib import Path

from rapt_audit.pipeline import sweep

#: Split sizes small enough for a cell of seconds.
TINY = ["--set", "data.victim_train=60", "--set", "data.victim_test=40", "--set", "data.attacker_train=60",
        "--set", "data.attacker_valid=30"]


def docs(out: Path) -> dict[str, dict]:
    """Cell directory name → its ``result.json``."""
    return {p.parent.name: json.loads(p.read_text()) for p in sorted(out.glob("*/result.json"))}


def numbers(doc: dict) -> dict:
    """Everything but provenance (timings, pid-dependent env, threads) and the output path."""
    return {k: v for k, v in doc.items() if k not in {"env", "config"}} | {
        "config": {k: v for k, v in doc["config"].items() if k != "out"}}


def statuses(out: Path) -> list[str]:
    """Each cell's status in ``sweep.json``, in grid order."""
    return [c["status"] for c in json.loads((out / "sweep.json").read_text())["cells"]]


def interrupt_after_first_cell(line: str) -> None:
    """A sweep's log that stops it (as Ctrl-C would) when the first cell is done."""
    if ": done in" in line:
        raise KeyboardInterrupt


def seed_cells(out: Path, values: str = "0,1,2") -> tuple[list[sweep.Cell], list[sweep.Axis]]:
    """The identity/random_guess smoke grid over ``seed=values``, on the synthetic corpus at :data:`TINY` sizes."""
    axes = sweep.parse_axes([f"seed={values}"])
    cli = {"defense": "identity", "attacks": "random_guess", "profile": "smoke", "dataset": "synthetic"}
    return sweep.expand(axes=axes, file=None, cli=cli, sets=[a for a in TINY if a != "--set"], out=out), axes
