"""Issue #63 item 4, RAPT §V-D: does a smaller local embedding model cost the user utility or privacy?

RAPT (v3, Sec. V-D) lets the user's side map its text with a smaller embedding model than the service's. Here the
service is mpnet under the chosen protocol (LoRA, ``reports/regime/service.md``) and T2T privatizes at a fixed η
with either the MiniLM client's table (``--model minilm``: the smaller local model) or the service's own table
(``--model mpnet``); every attack that reads SST-2 then attacks the release, with the client's public model and
table as the attacker's (the roles of ARCHITECTURE.md). Pilot seeds 100 and 101, ``cpu`` profile.

Reproduce (one run at a time under ``flock /tmp/rapt-heavy.lock``; finished runs under --out are reused)::

    scripts/bootstrap --mpnet
    RAPT_AUDIT_DATA=/path/to/shared/data .venv/bin/python scripts/local_embedding_study.py --out /tmp/local-embedding

``--table-only`` runs nothing and tabulates what the folder holds.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from regime_study import CLI, LOCK, REPO, accuracy, paired_band, study_main  # noqa: E402 - the study it extends

SEEDS = (100, 101)
ETAS = (75, 100)
CLIENTS = ("minilm", "mpnet")
SERVICE = ("mpnet", "lora")


def run_dir(out: Path, client: str, eta: int, seed: int) -> Path:
    return out / f"t2t-eta{eta}-client-{client}" / f"seed={seed}"


def command(client: str, eta: int, seed: int, where: Path) -> list[str]:
    return ["flock", LOCK, str(CLI), "run", "--defense", "t2t", "--set", f"eta={eta}", "--set",
            f"method={SERVICE[1]}", "--model", client, "--service-model", SERVICE[0], "--attacks", "all",
            "--dataset", "sst2", "--profile", "cpu", "--seed", str(seed), "--out", str(where), "--quiet"]


def run_all(out: Path) -> None:
    for eta in ETAS:
        for seed in SEEDS:
            for client in CLIENTS:
                where = run_dir(out, client, eta, seed)
                if (where / "result.json").exists():
                    continue
                where.mkdir(parents=True, exist_ok=True)
                start = time.time()
                print(f"[{time.strftime('%H:%M:%S')}] t2t eta={eta} client {client} seed {seed}", flush=True)
                done = subprocess.run(command(client, eta, seed, where), cwd=REPO)
                print(f"    rc={done.returncode} {time.time() - start:.0f} s", flush=True)


def rows(out: Path) -> dict[tuple[str, int], object]:
    """(client, η) -> its report row over the finished seeds (one result at a time: see service_regime)."""
    from dataclasses import replace

    from rapt_audit.reporting.collect import collect
    from rapt_audit.reporting.summary import group_results

    found: dict[tuple[str, int], object] = {}
    for client in CLIENTS:
        for eta in ETAS:
            for seed in SEEDS:
                path = run_dir(out, client, eta, seed) / "result.json"
                if not path.exists():
                    continue
                for group in group_results(collect([str(path)], calibrations=False).results):
                    for row in group.rows:
                        key = (client, eta)
                        found[key] = replace(row, runs=found[key].runs + row.runs) if key in found else row
    return found


def table(out: Path) -> str:
    from rapt_audit.api.plugins import WORST_CASE
    from rapt_audit.reporting.paired_rows import privacy_measures, utility_measures

    found = rows(out)
    lines = ["| η | client's table | seeds | accuracy (per seed) | words replaced | worst-case privacy (per seed) | "
             "strongest attack | wall time per cell, s |", "|---|---|---|---|---|---|---|---|"]
    for eta in ETAS:
        for client in CLIENTS:
            row = found.get((client, eta))
            if row is None:
                lines.append(f"| {eta} | {client} | — | not run | | | | |")
                continue
            results = sorted((r.result for r in row.runs), key=lambda r: r.config["seed"])
            worst = [r.attacks.get(WORST_CASE) for r in results]
            replaced = [r.defense["release_meta"].get("observed_replacement") for r in results]
            strongest = sorted({str(w.details.get("strongest_attack")) for w in worst if hasattr(w, "details")})
            mean, per_seed = accuracy(row)
            privacy = [w.empirical_privacy.value for w in worst if hasattr(w, "empirical_privacy")]
            lines.append(
                f"| {eta} | {client} | {', '.join(map(str, row.seeds))} | {mean:.3f} ({per_seed}) | "
                f"{' / '.join(f'{v:.3f}' if isinstance(v, (int, float)) else str(v) for v in replaced)} | "
                f"{sum(privacy) / max(len(privacy), 1):.3f} ({' / '.join(f'{v:.3f}' for v in privacy)}) | "
                f"{', '.join(strongest)} | {' / '.join(format(r.env['wall_time_s'], '.0f') for r in results)} |")
    lines += ["", "| η | MiniLM's table minus the service's own | difference [95 % hierarchical paired bootstrap] | "
              "per seed |", "|---|---|---|---|"]
    for eta in ETAS:
        small, own = found.get(("minilm", eta)), found.get(("mpnet", eta))
        if small is None or own is None:
            continue
        for label, measures in (("accuracy", lambda r: utility_measures(r, "accuracy")),
                                ("worst-case privacy", lambda r: privacy_measures(r, WORST_CASE, "content_privacy"))):
            a, b = measures(small) or {}, measures(own) or {}
            shared = sorted(set(a) & set(b))
            if not shared:
                lines.append(f"| {eta} | {label} | no paired parts | |")
                continue
            boot, by_seed, _ = paired_band({s: a[s] for s in shared}, {s: b[s] for s in shared})
            lines.append(f"| {eta} | {label} | **{boot.value:+.3f}** [{boot.ci_low:+.3f}, {boot.ci_high:+.3f}] | "
                         f"{' / '.join(f'{d:+.3f}' for d in by_seed)} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    return study_main(argv, __doc__.splitlines()[0], run_all, table)


if __name__ == "__main__":
    sys.exit(main())
