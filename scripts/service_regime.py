"""Issue #63 item 3: the service's regime with all-mpnet-base-v2 as the service, chosen on pilot seeds.

For each service protocol with mpnet as the service — the frozen encoder plus a head (SnD's
embedding-as-a-service; on clean text its ceiling is ``local client=encoder --model mpnet``), prompt
tuning (RAPT), LoRA and full fine-tuning (``identity --service-model mpnet --set method=...``) — this
measures, at the ``cpu`` profile on SST-2 and the pilot seeds 100, 101 and 102 (the benchmark uses 0 - 4;
nothing here reads their test split):

* the ceiling (identity's accuracy under the protocol),
* the band over each local-only client the MiniLM client has (``local client=table|bow|encoder``), with
  its 95 % interval paired over seeds and records (``regime_study.paired_band``), and over the reference
  row "if the client could run the service's model" (``local client=encoder --model mpnet``; a reference
  only: RAPT's premise is that it cannot),
* the cost per cell (``env.wall_time_s``).

Reproduce (one run at a time under ``flock /tmp/rapt-heavy.lock``; finished runs under --out are reused)::

    scripts/bootstrap --mpnet
    RAPT_AUDIT_DATA=/path/to/shared/data .venv/bin/python scripts/service_regime.py --out /tmp/service-regime

``--table-only`` runs nothing and tabulates what the folder holds; the table goes to stdout and
``--out/table.md``.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from regime_study import CLI, LOCK, REPO, accuracy, paired_band, study_main, seconds  # noqa: E402 - the study it extends

PILOT_SEEDS = (100, 101, 102)
SERVICE = "mpnet"
#: (label, defense, setting, client model, service model), in the order they run: the cheap clients first, the
#: protocols by cost, so that a time limit drops the dearest.
RUNS = (
    ("local client=table (MiniLM)", "local", "table", "minilm", None),
    ("local client=bow", "local", "bow", "minilm", None),
    ("local client=encoder (MiniLM)", "local", "encoder", "minilm", None),
    ("frozen mpnet + head: local client=encoder --model mpnet", "local", "encoder", SERVICE, None),
    ("identity method=lora, service mpnet", "identity", "lora", "minilm", SERVICE),
    ("identity method=full, service mpnet", "identity", "full", "minilm", SERVICE),
    ("identity method=prompt, service mpnet", "identity", "prompt", "minilm", SERVICE),
)
CLIENTS = RUNS[:3]  # the MiniLM client's local-only baselines: what sending nothing achieves
REFERENCE = RUNS[3]  # the client running the service's model: the frozen protocol's ceiling, and a reference row
PROTOCOLS = (("frozen encoder + head (EaaS)", REFERENCE), *((run[0].split(",")[0].split("=")[1], run)
                                                           for run in RUNS[4:]))


def run_dir(out: Path, run: tuple, seed: int) -> Path:
    _, defense, setting, model, service = run
    name = f"{defense}-{setting}-{model}" + (f"-service-{service}" if service else "")
    return out / name / f"seed={seed}"


def command(run: tuple, seed: int, where: Path) -> list[str]:
    _, defense, setting, model, service = run
    key = "method" if defense == "identity" else "client"
    cmd = ["flock", LOCK, str(CLI), "run", "--defense", defense, "--set", f"{key}={setting}", "--model", model,
           "--attacks", "random_guess", "--dataset", "sst2", "--profile", "cpu", "--seed", str(seed),
           "--out", str(where), "--quiet"]
    return cmd + (["--service-model", service] if service else [])


def run_all(out: Path) -> None:
    """Every run not yet finished, protocol by protocol, each at every pilot seed."""
    for run in RUNS:
        for seed in PILOT_SEEDS:
            where = run_dir(out, run, seed)
            if (where / "result.json").exists():
                continue
            where.mkdir(parents=True, exist_ok=True)
            start = time.time()
            print(f"[{time.strftime('%H:%M:%S')}] {run[0]} seed {seed}", flush=True)
            done = subprocess.run(command(run, seed, where), cwd=REPO)
            print(f"    rc={done.returncode} {time.time() - start:.0f} s", flush=True)


def load_rows(out: Path) -> dict[str, object]:
    """run label -> its report row (seeds joined) for every run with a finished result."""
    from dataclasses import replace

    from rapt_audit.reporting.collect import collect
    from rapt_audit.reporting.summary import group_results

    rows: dict[str, object] = {}
    for run in RUNS:
        for seed in PILOT_SEEDS:
            path = run_dir(out, run, seed) / "result.json"
            if not path.exists():
                continue
            # One result at a time: a table keeps one code per component (reporting.freshness), and commits that
            # landed while the study ran moved digests without changing what these runs compute.
            for group in group_results(collect([str(path)], calibrations=False).results):
                for row in group.rows:
                    rows[run[0]] = replace(row, runs=rows[run[0]].runs + row.runs) if run[0] in rows else row
    return rows


def table(out: Path) -> str:
    """The Markdown tables: every run's accuracy and cost, then each protocol's ceiling and bands."""
    from rapt_audit.reporting.paired_rows import utility_measures

    rows = load_rows(out)
    lines = [f"### Every run (SST-2, cpu profile, pilot seeds {', '.join(map(str, PILOT_SEEDS))})", "",
             "| run | seeds | accuracy (mean) | accuracy per seed | wall time per cell, s (per seed) |",
             "|---|---|---|---|---|"]
    for run in RUNS:
        row = rows.get(run[0])
        if row is None:
            lines.append(f"| {run[0]} | — | not run | | |")
            continue
        mean, per_seed = accuracy(row)
        lines.append(f"| {run[0]} | {', '.join(map(str, row.seeds))} | {mean:.3f} | {per_seed} | {seconds(row)} |")
    lines += ["", "### Each protocol's band over sending nothing", "",
              "| service protocol (mpnet) | ceiling | against | band [95 % hierarchical paired bootstrap] | "
              "band per seed | with the seed-t widening |", "|---|---|---|---|---|---|"]
    for protocol, run in PROTOCOLS:
        ceiling = rows.get(run[0])
        a = utility_measures(ceiling, "accuracy") if ceiling is not None else None
        if not a:
            lines.append(f"| {protocol} | not run | | | | |")
            continue
        for other in (*CLIENTS, REFERENCE):
            if other is run or rows.get(other[0]) is None:
                continue
            b = utility_measures(rows[other[0]], "accuracy") or {}
            if not set(b) >= set(a):
                continue
            boot, by_seed, full = paired_band(a, {s: b[s] for s in a})
            widened = ("same" if (full.ci_low, full.ci_high) == (boot.ci_low, boot.ci_high)
                       else f"[{full.ci_low:+.3f}, {full.ci_high:+.3f}]")
            label = other[0] + (" (reference only)" if other is REFERENCE else "")
            lines.append(f"| {protocol} | {accuracy(ceiling)[0]:.3f} | {label} | **{boot.value:+.3f}** "
                         f"[{boot.ci_low:+.3f}, {boot.ci_high:+.3f}] | {' / '.join(f'{d:+.3f}' for d in by_seed)} "
                         f"| {widened} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    return study_main(argv, __doc__.splitlines()[0], run_all, table)


if __name__ == "__main__":
    sys.exit(main())
