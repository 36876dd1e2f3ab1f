"""Issue #38 item 2, "a regime worth measuring": identity's ceiling against the best local-only baseline.

For each candidate regime (task x service protocol x victim-train size) this runs, at the ``cpu`` profile
and on the pilot seeds 100 and 101 (the benchmarks use 0, 1, 2; nothing here looks at their test split),

* the service ceiling: ``identity`` with ``method=prompt|full|lora``, and
* the local-only baselines: ``local`` with ``client=table|bow|encoder``,
* on QQP also two pair-aware encoder clients (:data:`PAIR_CLIENTS`), because the built-in ``table`` and
  ``encoder`` clients read the first question of a pair only,

then writes the table of reports/regime/README.md: identity's accuracy, the best local baseline (the
client with the highest mean accuracy over the pilot seeds), the band = identity - best local with its
95 % interval paired over seeds and records (``rapt_audit.scoring.hierarchical.paired_difference`` on
``rapt_audit.reporting.paired_rows.utility_measures``), and each run's wall time (``env.wall_time_s``)
as its cost.

Reproduce (the runs go one at a time in :data:`STAGES` order; finished runs under --out are reused)::

    RAPT_AUDIT_DATA=/path/to/shared/data .venv/bin/python scripts/regime_study.py --out /tmp/regime

Every run takes ``flock /tmp/rapt-heavy.lock`` (one torch process at a time on a small machine).
``--table-only`` runs nothing and tabulates whatever results the folder holds. The table is printed and
written to ``--out/table.md``; ``--out/overlap.json`` holds how many victim-test records of each pilot seed
each benchmark seed (0, 1, 2) also draws, into its victim test or victim train.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CLI = REPO / ".venv" / "bin" / "rapt-audit"
PILOT_SEEDS = (100, 101)
BENCHMARK_SEEDS = (0, 1, 2)
LOCK = "/tmp/rapt-heavy.lock"


@dataclass(frozen=True)
class Regime:
    """One task at one victim-train size (None: the cpu profile's default)."""

    dataset: str
    victim_train: int | None = None
    methods: tuple[str, ...] = ("prompt", "full", "lora")
    clients: tuple[str, ...] = ("table", "bow", "encoder")

    @property
    def tag(self) -> str:
        return self.dataset + ("" if self.victim_train is None else f"-vt{self.victim_train}")


REGIMES = (
    Regime("sst2"),
    Regime("qqp"),
    Regime("sst2", victim_train=8000, methods=("full",)),
)
BY_TAG = {regime.tag: regime for regime in REGIMES}

#: The order the runs go in, most informative first, so that a time limit drops the least informative:
#: (regime, local clients, identity methods, then QQP's pair clients?). Within a stage, seed 100 before 101.
STAGES = (
    ("sst2", ("table", "bow", "encoder"), ("full", "lora"), False),
    ("qqp", ("table", "bow", "encoder"), ("full",), True),
    ("sst2-vt8000", ("table", "bow", "encoder"), ("full",), False),
    ("qqp", (), ("lora",), False),
    ("sst2", (), ("prompt",), False),  # the current protocol, slowest on CPU: its seed 0 is known (issue #38)
    ("qqp", (), ("prompt",), False),
)


def run_dir(out: Path, regime: Regime, defense: str, setting: str, seed: int) -> Path:
    return out / regime.tag / f"{defense}-{setting}" / f"seed={seed}"


def command(regime: Regime, defense: str, setting: str, seed: int, where: Path) -> list[str]:
    key = "method" if defense == "identity" else "client"
    # identity releases texts, so some attack must be selected: random_guess is the cheapest (no training).
    # local releases nothing and every attack is skipped.
    cmd = ["flock", LOCK, str(CLI), "run", "--defense", defense, "--set", f"{key}={setting}",
           "--attacks", "random_guess", "--dataset", regime.dataset, "--profile", "cpu",
           "--seed", str(seed), "--out", str(where), "--quiet"]
    if regime.victim_train is not None:
        cmd += ["--set", f"data.victim_train={regime.victim_train}"]
    return cmd


def plan(out: Path) -> list[tuple[Regime, str, str, int, Path] | tuple[str, int]]:
    """Every run in :data:`STAGES` order; ``("pairs", seed)`` stands for QQP's pair clients at ``seed``."""
    cells: list = []
    for tag, clients, methods, pairs in STAGES:
        regime = BY_TAG[tag]
        for seed in PILOT_SEEDS:
            for client in clients:
                cells.append((regime, "local", client, seed, run_dir(out, regime, "local", client, seed)))
            for method in methods:
                cells.append((regime, "identity", method, seed, run_dir(out, regime, "identity", method, seed)))
        if pairs:
            cells += [("pairs", seed) for seed in PILOT_SEEDS]
    return cells


def run_all(out: Path) -> None:
    """Run every cell of :func:`plan` not yet finished, one at a time."""
    for cell in plan(out):
        if cell[0] == "pairs":
            pair_client_results(out, cell[1])
            continue
        regime, defense, setting, seed, where = cell
        if (where / "result.json").exists():
            continue
        where.mkdir(parents=True, exist_ok=True)
        start = time.time()
        print(f"[{time.strftime('%H:%M:%S')}] {regime.tag} {defense} {setting} seed {seed}", flush=True)
        done = subprocess.run(command(regime, defense, setting, seed, where), cwd=REPO)
        print(f"    rc={done.returncode} {time.time() - start:.0f} s", flush=True)


# ---- pair-aware encoder clients for QQP (the built-in table and encoder clients read the first question) ----
# Since this study, the built-in clients read a pair as ``encoder-siamese`` does (defenses/local.py, features);
# the copy below is kept so that the study runs as it ran, and its ``encoder-first`` check now describes the
# clients of the commits the study ran on (11d984d - 82e6e79), not today's.

#: The pair clients measured beside ``local``: ``encoder-siamese`` reads both questions' clean pooled MiniLM
#: vectors as [u, v, |u - v|, u * v] (how all-MiniLM-L6-v2 compares sentence pairs, the features of
#: Sentence-BERT's classification objective); ``encoder-joined`` pools the one sequence "q1 ||| q2" that
#: identity's service reads. Both use the ``local`` encoder client's frozen encoder and MLP head unchanged.
PAIR_CLIENTS = ("encoder-siamese", "encoder-joined")


def pair_client_results(out: Path, seed: int) -> Path:
    """Measure :data:`PAIR_CLIENTS` on QQP at ``seed`` (cpu profile splits, the runner's split seed) under the
    heavy lock; write ``out/qqp-pairs/seed=N.json`` (accuracy, per-record outcomes, seconds) and return it."""
    import fcntl

    import numpy as np

    from rapt_audit.api.params import make_plugin
    from rapt_audit.api.plugins import DEFENSES, load as load_plugins
    from rapt_audit.api.types import pair_text
    from rapt_audit.data import load_dataset
    from rapt_audit.data.base import SplitSizes, make_splits
    from rapt_audit.encoder.encode import encode_pooled
    from rapt_audit.encoder.precision import resolve_precision
    from rapt_audit.pipeline.config import profile_split_sizes
    from rapt_audit.pipeline.context import RunContext, derive_seed
    from rapt_audit.scoring.classification import classification_utility

    where = out / "qqp-pairs" / f"seed={seed}.json"
    if where.exists():
        return where
    where.parent.mkdir(parents=True, exist_ok=True)
    with open(LOCK, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        load_plugins()
        dataset = load_dataset("qqp")
        sizes = SplitSizes(**profile_split_sizes("cpu", len(dataset.records), {}))
        splits = make_splits(dataset, sizes, seed=derive_seed(seed, "splits"))
        ctx = RunContext(seed=seed, profile="cpu", device="cpu", precision=resolve_precision("auto", "cpu"),
                         data_dir=os.environ.get("RAPT_AUDIT_DATA"))
        head = make_plugin(DEFENSES, "local", {"client": "encoder"})
        y_train = np.array([r.label for r in splits.victim_train])
        y_test = np.array([r.label for r in splits.victim_test])
        found: dict[str, dict] = {}
        for client in ("encoder-first",) + PAIR_CLIENTS:  # encoder-first: the built-in client, as a check
            start = time.time()

            def vectors(records):  # noqa: ANN001, ANN202
                if client == "encoder-joined":
                    return encode_pooled(ctx, [pair_text(r.text, r.text_pair) for r in records])
                u = encode_pooled(ctx, [r.text for r in records])
                if client == "encoder-first":
                    return u
                v = encode_pooled(ctx, [r.text_pair or "" for r in records])
                return np.concatenate([u, v, np.abs(u - v), u * v], axis=1)

            key = "encoder" if client == "encoder-first" else client
            probabilities = head.fit_task_classifier(
                vectors(splits.victim_train), y_train, n_classes=2, device=ctx.device, precision=ctx.precision,
                seed=ctx.seed_for("defense", "local", "classifier", key))
            est = classification_utility(probabilities(vectors(splits.victim_test)), y_test,
                                         rng=ctx.rng("utility", "local"))["accuracy"]
            found[client] = {"accuracy": est.value, "ci": [est.ci_low, est.ci_high],
                             "num": list(map(float, est.per_record.num)), "den": list(map(float, est.per_record.den)),
                             "seconds": time.time() - start}
            print(f"    qqp seed {seed} {client}: {est.value:.3f} ({found[client]['seconds']:.0f} s)", flush=True)
    where.write_text(json.dumps({"seed": seed, "precision": ctx.precision, "clients": found}) + "\n",
                     encoding="utf-8")
    return where


def pair_rows(out: Path) -> dict[str, dict[int, dict]]:
    """client → seed → the measured pair client (finished seeds only)."""
    rows: dict[str, dict[int, dict]] = {}
    for path in sorted((out / "qqp-pairs").glob("seed=*.json")):
        doc = json.loads(path.read_text(encoding="utf-8"))
        for client, got in doc["clients"].items():
            rows.setdefault(client, {})[int(doc["seed"])] = got
    return rows


def regime_of(result) -> str:  # noqa: ANN001 - a RunResult
    """The regime tag of a result: its dataset, and the victim-train size when the run set one."""
    size = (result.config.get("data_args") or {}).get("victim_train")
    return str(result.config["dataset"]) + ("" if size is None else f"-vt{int(size)}")


def setting_of(row) -> str:  # noqa: ANN001 - a summary Row
    return str(row.params.get("method") if row.defense == "identity" else row.params.get("client"))


def load_rows(out: Path) -> dict[tuple[str, str, str], object]:
    """(regime, defense, setting) → the report's row (seeds combined) for every finished result under ``out``."""
    from rapt_audit.reporting.collect import collect
    from rapt_audit.reporting.summary import group_results

    paths = sorted(str(p) for p in out.rglob("result.json"))
    rows: dict[tuple[str, str, str], object] = {}
    for group in group_results(collect(paths, calibrations=False).results):
        for row in group.rows:
            key = (regime_of(row.runs[0].result), row.defense, setting_of(row))
            # The same setting's seeds fall into different groups when the code digest in the signature moved
            # between runs (commits landed while the study ran): join their runs into one row.
            rows[key] = replace(row, runs=rows[key].runs + row.runs) if key in rows else row
    return rows


def seconds(row) -> str:  # noqa: ANN001
    """The run's cost: its wall time (``env.wall_time_s``), per seed, in seconds."""
    by_seed = sorted((int(r.result.config["seed"]), float(r.result.env["wall_time_s"])) for r in row.runs)
    return " / ".join(f"{t:.0f}" for _, t in by_seed)


def accuracy(row) -> tuple[float, str]:  # noqa: ANN001
    """Mean accuracy over the row's seeds, and the per-seed values."""
    by_seed = sorted((int(r.result.config["seed"]), r.result.utility["accuracy"].value) for r in row.runs)
    values = [v for _, v in by_seed]
    return sum(values) / len(values), " / ".join(f"{v:.3f}" for v in values)


def paired_band(a: dict, b: dict):  # noqa: ANN201 - (Estimate, per-seed differences, Estimate)
    """``a`` minus ``b`` (seed -> hierarchical Measure, the same seeds): the hierarchical paired bootstrap's own
    interval (seeds, then records, jointly; 2,000 resamples: the draws ``paired_difference`` makes, read with
    ``interval`` alone), the per-seed differences, and ``paired_difference`` as the code has it (widened to a
    Student-t interval over the seeds where that is wider)."""
    import numpy as np

    from rapt_audit.scoring.hierarchical import Resampler, interval, paired_difference

    resampler = Resampler(sorted(a), 2000, np.random.default_rng(0))
    by_seed = resampler.point(a) - resampler.point(b)
    boot = interval(float(by_seed.mean()), (resampler.values(a) - resampler.values(b)).mean(axis=-1))
    return boot, by_seed, paired_difference(a, b)


def table(out: Path) -> str:
    """The Markdown tables: every run's accuracy and cost, then the band of each service protocol."""
    import numpy as np

    from rapt_audit.reporting.paired_rows import utility_measures
    from rapt_audit.scoring.hierarchical import Measure

    rows = load_rows(out)
    pairs = pair_rows(out)
    lines = ["### Every run (cpu profile, pilot seeds 100 / 101)", "",
             "| task | run | seeds | accuracy (mean) | accuracy per seed | wall time per run, s (per seed) |",
             "|---|---|---|---|---|---|"]
    for regime in REGIMES:
        for defense, settings in (("local", regime.clients), ("identity", regime.methods)):
            for setting in settings:
                row = rows.get((regime.tag, defense, setting))
                name = f"{defense} {'method' if defense == 'identity' else 'client'}={setting}"
                if row is None:
                    lines.append(f"| {regime.tag} | {name} | — | not run | | |")
                    continue
                mean, per_seed = accuracy(row)
                seeds = ", ".join(str(s) for s in row.seeds)
                lines.append(f"| {regime.tag} | {name} | {seeds} | {mean:.3f} | {per_seed} | {seconds(row)} |")
            if regime.tag == "qqp" and defense == "local":
                for client, by_seed in pairs.items():
                    values = [by_seed[s]["accuracy"] for s in sorted(by_seed)]
                    lines.append(f"| qqp | pair client {client} (this script) | {', '.join(map(str, sorted(by_seed)))} "
                                 f"| {np.mean(values):.3f} | {' / '.join(f'{v:.3f}' for v in values)} "
                                 f"| {' / '.join(format(by_seed[s]['seconds'], '.0f') for s in sorted(by_seed))} |")

    def candidates(regime: Regime, with_pairs: bool) -> list[tuple[str, float, dict]]:
        """(client, mean accuracy, seed → measure) of every local-only baseline of ``regime``."""
        found = []
        for client in regime.clients:
            row = rows.get((regime.tag, "local", client))
            measures = None if row is None else utility_measures(row, "accuracy")
            if measures:
                found.append((client, accuracy(row)[0], measures))
        if with_pairs:
            for client, by_seed in pairs.items():
                measures = {s: Measure(((np.asarray(g["num"], float), np.asarray(g["den"], float)),), True)
                            for s, g in by_seed.items()}
                found.append((client, float(np.mean([g["accuracy"] for g in by_seed.values()])), measures))
        return found

    lines += ["", "### The band: identity's ceiling minus the best local-only baseline", "",
              "| task | service protocol | seeds | identity accuracy (per seed) | best local baseline (client, mean "
              "accuracy over the same seeds) | band = identity − best local [95 % hierarchical paired bootstrap, "
              "seeds then records] | band per seed | paired_difference's interval with the seed-t widening | "
              "identity wall time, s (per seed) |",
              "|---|---|---|---|---|---|---|---|---|"]
    for regime in REGIMES:
        for with_pairs in ((False, True) if regime.tag == "qqp" and pairs else (False,)):
            for method in regime.methods:
                ident = rows.get((regime.tag, "identity", method))
                label = method + (" (vs pair-aware clients too)" if with_pairs else "")
                if ident is None:
                    lines.append(f"| {regime.tag} | {label} | — | not run | | | | | |")
                    continue
                a = utility_measures(ident, "accuracy") or {}
                # The best local baseline: the highest mean accuracy over the seeds both share (paired below).
                shared = [c for c in candidates(regime, with_pairs) if set(c[2]) >= set(a)]
                seeds = ", ".join(str(s) for s in ident.seeds)
                mean, per_seed = accuracy(ident)
                if not shared or not a:
                    lines.append(f"| {regime.tag} | {label} | {seeds} | {mean:.3f} ({per_seed}) | none | | | | |")
                    continue
                # Chosen and shown by its mean accuracy over identity's seeds (the seeds the band pairs over).
                def over_seeds(measures: dict) -> float:
                    return float(np.mean([m.parts[0][0].sum() / m.parts[0][1].sum() for s, m in measures.items()
                                          if s in a]))

                client, _, measures = max(shared, key=lambda c: over_seeds(c[2]))
                local_mean = over_seeds(measures)
                boot, by_seed, full = paired_band(a, {s: measures[s] for s in a})
                widened = ("same" if (full.ci_low, full.ci_high) == (boot.ci_low, boot.ci_high)
                           else f"[{full.ci_low:+.3f}, {full.ci_high:+.3f}]")
                lines.append(f"| {regime.tag} | {label} | {seeds} | {mean:.3f} ({per_seed}) | {client}, "
                             f"{local_mean:.3f} | **{boot.value:+.3f}** [{boot.ci_low:+.3f}, {boot.ci_high:+.3f}] "
                             f"| {' / '.join(f'{d:+.3f}' for d in by_seed)} | {widened} | {seconds(ident)} |")
    return "\n".join(lines) + "\n"


def overlap() -> dict[str, dict[str, int]]:
    """How many victim-test records each pilot seed shares with each benchmark seed's victim test and victim
    train (uids; the cpu profile's default split sizes)."""
    from rapt_audit.data import load_dataset
    from rapt_audit.data.base import SplitSizes, make_splits
    from rapt_audit.pipeline.context import derive_seed
    from rapt_audit.pipeline.config import profile_split_sizes

    found: dict[str, dict[str, int]] = {}
    for name in sorted({r.dataset for r in REGIMES}):
        dataset = load_dataset(name)
        sizes = SplitSizes(**profile_split_sizes("cpu", len(dataset.records), {}))

        def split(seed: int):  # noqa: ANN202
            return make_splits(dataset, sizes, seed=derive_seed(seed, "splits"))

        bench = {s: split(s) for s in BENCHMARK_SEEDS}
        for pilot in PILOT_SEEDS:
            test = {r.uid for r in split(pilot).victim_test}
            for s, parts in bench.items():
                found[f"{name} pilot {pilot} vs seed {s}"] = {
                    "pilot_victim_test": len(test),
                    "shared_with_victim_test": len(test & {r.uid for r in parts.victim_test}),
                    "shared_with_victim_train": len(test & {r.uid for r in parts.victim_train})}
    return found


def study_main(argv, description: str, run_all, table, after=None) -> int:  # noqa: ANN001 - a study's callables
    """The command of this study and of those built on it (``service_regime``, ``local_embedding_study``): ``--out``
    (the runs and table.md), ``--table-only``; runs what is not finished with ``run_all(out)``, writes and prints
    ``table(out)``, then ``after(out)`` when given (this study's overlap.json)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--out", required=True, type=Path, help="scratch folder: the runs and table.md")
    parser.add_argument("--table-only", action="store_true", help="run nothing; tabulate the finished results")
    args = parser.parse_args(argv)
    if not os.environ.get("RAPT_AUDIT_DATA"):
        parser.error("set RAPT_AUDIT_DATA to the data folder (sst2/, qqp/, wikitext2/)")
    args.out.mkdir(parents=True, exist_ok=True)
    if not args.table_only:
        run_all(args.out)
    text = table(args.out)
    (args.out / "table.md").write_text(text, encoding="utf-8")
    if after is not None:
        after(args.out)
    print(text)
    return 0


def write_overlap(out: Path) -> None:
    """``out/overlap.json``: :func:`overlap`."""
    (out / "overlap.json").write_text(json.dumps(overlap(), indent=1) + "\n", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    return study_main(argv, __doc__.splitlines()[0], run_all, table, after=write_overlap)


if __name__ == "__main__":
    sys.exit(main())
