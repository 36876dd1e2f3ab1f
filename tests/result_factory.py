"""Hand-made result files for report, leaderboard and gate tests (no run needed, milliseconds).

The numbers are invented; the structure is exactly what the runner writes (RunResult.to_dict).
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import replace
from pathlib import Path
from typing import Mapping

from rapt_audit.api.files import write_json_atomic
from rapt_audit.api.types import AttackResult, Estimate, Skip
from rapt_audit.benchmark.plan import plan_cells
from rapt_audit.benchmark.run import INDEX_FILE, index_document
from rapt_audit.benchmark.spec import shipped_dir
from rapt_audit.benchmark.validate import load_benchmark
from rapt_audit.pipeline.results import SYNTHETIC_WARNING, RunResult, write_result

SIG_A = "data:sst2@aaaaaaaa|splits:200/100/200/100|model:minilm@53aa5117|profile:smoke|attacks:11111111|v:0.1"
SIG_B = "data:sst2@aaaaaaaa|splits:200/100/200/100|model:minilm@53aa5117|profile:smoke|attacks:22222222|v:0.1"


def est(value: float, half: float = 0.02, n: int = 100) -> Estimate:
    """An estimate with a symmetric interval clipped to [0, 1]."""
    return Estimate(value, max(0.0, value - half), min(1.0, value + half), n, "bootstrap-percentile")


def fake_result(*, defense: str = "t2t", eta: float | None = 50.0, accuracy: float = 0.8,
                privacy: Mapping[str, float | str] | None = None, signature: str = SIG_A, seed: int = 0,
                synthetic: bool = False, dataset: str = "sst2", half: float = 0.02) -> RunResult:
    """A complete result: utility, one AttackResult (or a Skip, given as its reason) per attack, provenance."""
    privacy = {"whitebox": 0.3, "random_guess": 0.95} if privacy is None else privacy
    defense_args = {} if eta is None else {"eta": "inf" if math.isinf(eta) else str(eta)}
    config = {"defense": defense, "attacks": ",".join(privacy), "dataset": dataset, "model": "minilm",
              "profile": "smoke", "seed": seed, "device": "cpu", "out": None, "data_dir": None,
              "defense_args": defense_args, "attack_args": {}, "data_args": {}, "force": False}
    cell = hashlib.sha256(json.dumps({k: v for k, v in config.items() if k != "out"},
                                     sort_keys=True).encode()).hexdigest()[:12]
    attacks: dict[str, AttackResult | Skip] = {}
    for name, value in privacy.items():
        if isinstance(value, str):
            attacks[name] = Skip(value)
        else:
            attacks[name] = AttackResult(est(value, half), {"token_accuracy": est(1 - value, half)},
                                         {"records": 100})
    params = {} if eta is None else {"eta": "inf" if math.isinf(eta) else eta, "replacement": None}
    meta = {} if eta is None else {"mechanism": defense, "eta": params["eta"],
                                   "observed_replacement": 0.0 if math.isinf(eta) else min(1.0, 40 / eta),
                                   "units_perturbed": 3000, "units_dropped": 0}
    return RunResult(
        signature=signature, cell_id=cell, config=config,
        dataset={"name": dataset, "task": "sentiment", "synthetic": synthetic, "source": "test",
                 "splits": {"victim_train": 200, "victim_test": 100, "attacker_train": 200, "attacker_valid": 100},
                 "label_names": ["neg", "pos"], "notes": {}},
        defense={"name": defense, "params": params, "exposes": ["texts"], "release_meta": meta},
        utility={"accuracy": est(accuracy, half)}, attacks=attacks,
        env={"versions": {"rapt-audit": "0.1.0", "torch": "2.13.0+cpu"}, "python": "3.11.7", "git_sha": "f" * 40,
             "seed": seed, "device": "cpu", "model": "minilm", "model_fingerprint": "53aa5117" + "0" * 56,
             "data_fingerprint": "aaaaaaaa" + "0" * 56, "started_at": "2026-11-22T00:00:00+00:00",
             "wall_time_s": 1.5, "timings_s": {}},
        warnings=[SYNTHETIC_WARNING] if synthetic else [])


def write_sweep(root: Path, results: Mapping[str, RunResult]) -> Path:
    """Write each result to ``root/<name>/result.json`` (a sweep directory) and return ``root``."""
    for name, result in results.items():
        write_result(result, root / name)
    return root


def t2t_sweep(root: Path, **kw: object) -> Path:
    """A small η sweep of t2t with the no-privacy cell (η = ∞)."""
    cells = {"eta=25": fake_result(eta=25, accuracy=0.55, privacy={"whitebox": 0.8, "random_guess": 0.97}, **kw),
             "eta=75": fake_result(eta=75, accuracy=0.70, privacy={"whitebox": 0.5, "random_guess": 0.96}, **kw),
             "eta=125": fake_result(eta=125, accuracy=0.66, privacy={"whitebox": 0.45, "random_guess": 0.95}, **kw),
             "eta=inf": fake_result(eta=math.inf, accuracy=0.85, privacy={"whitebox": 0.0, "random_guess": 0.95},
                                    **kw)}
    return write_sweep(root, cells)


def benchmark_folder(root: Path, name: str = "smoke") -> Path:
    """The output folder of a shipped benchmark with every cell finished (invented numbers, no run).

    Each defense's utility falls and its privacy rises as its privacy level falls; identity keeps
    accuracy 0.85 and no privacy. Cells, index and signatures are those ``benchmark run`` writes.
    """
    bench = load_benchmark(name, check_data=False)
    cells = plan_cells(bench, out=root)
    for i, cell in enumerate(cells):
        level = {k: float(v) for k, v in cell.setting if k in ("eta", "epsilon")}
        noise = 0.0 if not level else 1.0 / (1.0 + next(iter(level.values())) / 25.0)  # 0 at inf, larger at less
        rank = sorted({c.defense for c in cells}).index(cell.defense) / 20  # defenses differ a little
        privacy = {a: min(0.99, 0.1 + noise * (1.2 - rank) + 0.01 * cell.seed) for a in cell.attacks}
        result = fake_result(defense=cell.defense, eta=level.get("eta"), seed=cell.seed,
                             accuracy=0.85 - 0.4 * noise * (0.5 + rank) + 0.005 * cell.seed, privacy=privacy,
                             dataset=cell.dataset, synthetic=cell.dataset == "synthetic",
                             signature=SIG_A.replace("sst2", cell.dataset))
        result.defense["params"] = {k: _typed(v) for k, v in cell.setting}  # what the cell ran with, resolved
        write_result(replace(result, cell_id=cell.cell.config.cell_id(), config=cell.cell.config.to_dict()),
                     cell.cell.config.out)
    write_json_atomic(root / INDEX_FILE, index_document(bench, cells))
    return root


def submission_folder(root: Path, name: str = "smoke") -> Path:
    """A contributor's folder for ``benchmark verify``: the shipped benchmark's folder (:func:`benchmark_folder`) with
    one more setting of t2t added (η = 50), measured as the published cells were (invented numbers, their signature).
    Its file is written beside it (``ROOT.toml``), as a contributor's copy of the shipped one."""
    text = (shipped_dir() / f"{name}.toml").read_text(encoding="utf-8")
    start = text.index("[defenses.t2t]")
    grid = text.index("eta = [", start)
    file = root.with_name(f"{root.name}.toml")
    file.parent.mkdir(parents=True, exist_ok=True)
    file.write_text(text[:grid] + "eta = [50, " + text[grid + len("eta = ["):], encoding="utf-8")
    return benchmark_folder(root, str(file))


def _typed(text: str) -> object:
    """A ``--set`` value as a result records it: a number (infinity as ``"inf"``), else the text."""
    try:
        value = float(text)
    except ValueError:
        return text
    return "inf" if math.isinf(value) else value
