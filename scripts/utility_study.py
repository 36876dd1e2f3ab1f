#!/usr/bin/env python3
"""Issue #5 study: utility of T2T, PCT2T and RAPT (+ ablations) under prompt tuning and LoRA on SST-2.

η is calibrated once on public text (WikiText-2) so that T2T replaces the given fractions of words
(RAPT Table III: 0.45 at η = 125 and 0.14 at η = 150 for BERT), and every defense then runs at the
same η, as in the paper's Table II. Each cell (defense, variant, method, η, seed) trains on privatized
victim-train text and is scored on the privatized victim-test release; cells are appended to a JSON-lines
file as they finish, so an interrupted study resumes where it stopped. The summary gives, per setting,
the mean accuracy over seeds with a t-interval, and each seed's bootstrap interval.

Usage (the data directory holds sst2/ and wikitext2/; research-only data, read in place):
    .venv/bin/python scripts/utility_study.py --data-dir ../shared/data --out runs/utility_study
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import multiprocessing as mp
import time
from pathlib import Path
from typing import Any

from rapt_audit.api.files import write_text_atomic

DEFAULT_TARGETS = (0.45, 0.14)


def calibrate(targets: list[float], data_dir: str, cache: str) -> dict[float, float]:
    """η per target T2T replacement probability, found on public text (never the victim's data)."""
    from rapt_audit.defenses.t2t import T2TDefense
    from rapt_audit.pipeline.context import RunContext

    out = {}
    for target in targets:
        ctx = RunContext(seed=0, profile="cpu", device="cpu", cache_dir=Path(cache), data_dir=data_dir)
        defense = T2TDefense(replacement=target)
        out[target] = float(defense.effective_eta(ctx))
    return out


def cells(etas: dict[str, float], methods: list[str], seeds: list[int], ablation_methods: tuple[str, ...] = ("prompt",)
          ) -> list[dict[str, Any]]:
    """The study grid, cut to fit 2 CPU cores: at the first η every defense with every method, plus the
    "without reconstruction" ablation for ``ablation_methods``; at the second η every defense with the
    first of ``ablation_methods`` only; at
    η = ∞ the no-privacy reference only (T2T and PCT2T are the identity there; the paper reports no
    gain from reconstruction at η = ∞)."""
    grid = []
    first_label = next(iter(etas))
    # Seeds outermost, so that a study cut short has every setting on its first seeds.
    for seed, (label, eta), method in itertools.product(seeds, etas.items(), methods):
        settings = [("t2t", "t2t", {})]  # at η = ∞ the no-privacy reference (T2T = PCT2T = identity there)
        if not math.isinf(eta):
            if label != first_label and method != ablation_methods[0]:
                continue  # the second η runs the paper's main method only (to fit 2 CPU cores)
            settings += [("pct2t", "pct2t", {}), ("rapt", "rapt", {})]
            if method in ablation_methods and label == first_label:
                # RAPT Table VIII: w/o reconstruction (w/o plain tokens = PCT2T + the method)
                settings.append(("rapt", "without_reconstruction", {"reconstruction": False}))
        for defense, variant, extra in settings:
            grid.append({"defense": defense, "variant": variant, "method": method, "eta_label": label,
                         "eta": eta, "seed": seed, "extra": extra})
    return grid


def rec_weight_cells(etas: dict[str, float], methods: list[str], seeds: list[int], weight: float
                     ) -> list[dict[str, Any]]:
    """Supplementary cells: RAPT at the first η with L_rec scaled by ``weight`` (e.g. 1/m: a mean, not a sum)."""
    label, eta = next(iter(etas.items()))
    return [{"defense": "rapt", "variant": f"rec_weight={weight:g}", "method": method, "eta_label": label, "eta": eta,
             "seed": seed, "extra": {"rec_weight": weight}} for seed in seeds for method in methods]


def cell_key(cell: dict[str, Any]) -> str:
    return f"{cell['defense']}|{cell['variant']}|{cell['method']}|{cell['eta_label']}|{cell['seed']}"


def run_cell(args: tuple[dict[str, Any], dict[str, Any]]) -> dict[str, Any]:
    """Fit one defense and measure its customized utility (one process, one torch thread)."""
    cell, opts = args
    from rapt_audit.api.params import make_plugin
    from rapt_audit.api.plugins import DEFENSES, load
    from rapt_audit.data import SplitSizes, load_dataset, make_splits
    from rapt_audit.encoder.models import one_thread
    from rapt_audit.pipeline.context import RunContext

    load()
    ctx = RunContext(seed=cell["seed"], profile="cpu", device="cpu", cache_dir=Path(opts["cache"]),
                     data_dir=opts["data_dir"])
    dataset = load_dataset("sst2", opts["data_dir"])
    splits = make_splits(dataset, SplitSizes(opts["train"], opts["test"], 10, 10), seed=ctx.seed_for("splits"))
    params = {"eta": cell["eta"], "method": cell["method"], "epochs": opts["epochs"],
              "max_length": opts["max_length"], **cell["extra"]}
    defense = make_plugin(DEFENSES, cell["defense"], params)
    with one_thread("cpu"):
        started = time.perf_counter()
        defense.fit(splits.victim_train, ctx=ctx)
        utility = defense.utility(splits.victim_test, ctx=ctx)
        release = defense.release(splits.victim_test, ctx=ctx)
    return {**cell, "key": cell_key(cell), "utility": {k: v.to_dict() for k, v in utility.items()},
            "observed_replacement": release.meta.get("observed_replacement"),
            "customization": release.meta.get("customization"), "wall_s": round(time.perf_counter() - started, 1),
            "sizes": {"victim_train": len(splits.victim_train), "victim_test": len(splits.victim_test)}}


def summarize(rows: list[dict[str, Any]]) -> str:
    """A markdown table: mean accuracy over seeds with a 95% t-interval, and the per-seed values."""
    from rapt_audit.api.types import Estimate
    from rapt_audit.scoring.stats import seed_summary

    groups: dict[tuple, list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault((row["method"], row["eta_label"], row["defense"], row["variant"]), []).append(row)
    lines = ["| method | η | defense | variant | accuracy (mean over seeds, 95% t-CI) | per seed (bootstrap 95% CI) |",
             "|---|---|---|---|---|---|"]
    for (method, label, defense, variant), members in sorted(groups.items()):
        members.sort(key=lambda r: r["seed"])
        summary = seed_summary([Estimate.from_dict(r["utility"]["accuracy"]) for r in members])
        per_seed = "; ".join(f"s{r['seed']} {r['utility']['accuracy']['value']:.3f} "
                             f"[{r['utility']['accuracy']['ci_low']:.3f}, {r['utility']['accuracy']['ci_high']:.3f}]"
                             for r in members)
        lines.append(f"| {method} | {label} | {defense} | {variant} | {summary.value:.3f} "
                     f"[{summary.ci_low:.3f}, {summary.ci_high:.3f}] (n={len(members)}) | {per_seed} |")
    return "\n".join(lines)


#: Paired comparisons (same seed = same split and same calibration), as (method, η label prefix, a, b): a − b.
COMPARISONS = (("PCT2T − T2T", "pct2t", "t2t"), ("RAPT − PCT2T", "rapt", "pct2t"),
               ("RAPT − without reconstruction", "rapt", "without_reconstruction"),
               ("without reconstruction − PCT2T (plain tokens alone)", "without_reconstruction", "pct2t"),
               ("RAPT rec_weight=1/m − RAPT", "rec_weight=0.025", "rapt"))


def paired_differences(rows: list[dict[str, Any]]) -> str:
    """Per-seed accuracy differences between variants on the same split, with a t-interval over seeds."""
    from rapt_audit.api.types import Estimate
    from rapt_audit.scoring.stats import seed_summary

    accuracy = {(r["method"], r["eta_label"], r["variant"], r["seed"]): r["utility"]["accuracy"]["value"] for r in rows}
    settings = sorted({(r["method"], r["eta_label"]) for r in rows})
    lines = ["| comparison | method | η | mean difference (95% t-CI over seeds) | per seed |", "|---|---|---|---|---|"]
    for title, a, b in COMPARISONS:
        for method, label in settings:
            seeds = sorted(s for (m, lab, v, s) in accuracy if (m, lab, v) == (method, label, a)
                           and (method, label, b, s) in accuracy)
            if not seeds:
                continue
            diffs = [accuracy[(method, label, a, s)] - accuracy[(method, label, b, s)] for s in seeds]
            summary = seed_summary([Estimate(d, d, d, 1, "difference") for d in diffs])
            interval = f"[{summary.ci_low:+.3f}, {summary.ci_high:+.3f}]" if len(diffs) > 1 else "(one seed)"
            lines.append(f"| {title} | {method} | {label} | {summary.value:+.3f} {interval} (n={len(diffs)}) | "
                         + ", ".join(f"{d:+.3f}" for d in diffs) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--out", default="runs/utility_study")
    parser.add_argument("--cache", default=str(Path.home() / ".cache" / "rapt-audit"))
    parser.add_argument("--targets", default=",".join(map(str, DEFAULT_TARGETS)))
    parser.add_argument("--methods", default="prompt,lora")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--train", type=int, default=600)
    parser.add_argument("--test", type=int, default=500)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--max-length", type=int, default=48)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--only", default="", help="comma-separated cell keys or substrings to run")
    parser.add_argument("--ablation-methods", default="prompt",
                        help="methods that also run the 'without reconstruction' ablation at the first η")
    parser.add_argument("--rec-weight", type=float, default=None,
                        help="also run RAPT at the first η with this L_rec weight (supplementary cells)")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    calibration_file = out / "calibration.json"
    targets = [float(t) for t in args.targets.split(",")]
    if calibration_file.exists():
        calibration = {float(k): v for k, v in json.loads(calibration_file.read_text())["eta"].items()}
    else:
        calibration = calibrate(targets, args.data_dir, args.cache)
        write_text_atomic(calibration_file, json.dumps({"eta": calibration, "method": "t2t replacement on WikiText-2"}))
    etas = {f"p={t:g} (eta {calibration[t]:.1f})": calibration[t] for t in targets} | {"inf": math.inf}
    print("calibrated:", etas, flush=True)
    results_file = out / "cells.jsonl"
    done = {json.loads(line)["key"] for line in results_file.read_text().splitlines()} if results_file.exists() else set()
    methods, seeds = args.methods.split(","), [int(s) for s in args.seeds.split(",")]
    extra = rec_weight_cells(etas, methods, seeds, args.rec_weight) if args.rec_weight is not None else []
    grid = [c for c in cells(etas, methods, seeds, tuple(args.ablation_methods.split(","))) + extra
            if cell_key(c) not in done and (not args.only or any(o in cell_key(c) for o in args.only.split(",")))]
    opts = {"data_dir": args.data_dir, "cache": args.cache, "train": args.train, "test": args.test,
            "epochs": args.epochs, "max_length": args.max_length}
    print(f"{len(grid)} cells to run ({len(done)} done)", flush=True)
    with mp.get_context("spawn").Pool(args.workers, maxtasksperchild=4) as pool:
        for row in pool.imap_unordered(run_cell, [(c, opts) for c in grid]):
            with results_file.open("a") as handle:
                handle.write(json.dumps(row) + "\n")
            print(f"{row['key']}: acc {row['utility']['accuracy']['value']:.3f} ({row['wall_s']} s)", flush=True)
    rows = [json.loads(line) for line in results_file.read_text().splitlines()]
    text = summarize(rows) + "\n\nPaired differences in accuracy:\n\n" + paired_differences(rows)
    write_text_atomic(out / "summary.md", text + "\n")
    print(text)


if __name__ == "__main__":
    main()
