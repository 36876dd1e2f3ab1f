"""The table of reports/pretrain-sst2-cpu/README.md: accuracy per (η, objective) over seeds, and paired vs none.

Usage: python scripts/pretraining_table.py reports/pretrain-sst2-cpu/results

Accuracy and macro-F1 come from ``rapt_audit.summarize`` (the report's rows: mean over seeds with a
t-interval); the paired difference against no pretraining is taken seed by seed from
``rapt_audit.load`` and summarized with the same t-interval (``scoring.stats.seed_summary``). The
pretraining time and MLM loss curves are provenance, read from each result's release facts.
"""

from __future__ import annotations

import sys

import numpy as np

import rapt_audit
from rapt_audit.api.types import Estimate
from rapt_audit.reporting.collect import collect
from rapt_audit.scoring.stats import seed_summary

ORDER = ["none", "vanilla", "prob", "denoise"]


def t_interval(values: list[float]) -> Estimate:
    """Mean with a 95 % t-interval over seeds (the report's rule for several seeds)."""
    return seed_summary([Estimate(v, v, v) for v in values])


def pretraining_facts(root: str) -> dict[tuple[float, str, int], dict]:
    """(η, objective, seed) → the pretraining record and observed replacement of that run."""
    facts = {}
    for item in collect([root], calibrations=False).results:
        meta = item.result.defense.get("release_meta", {})
        params = item.result.defense["params"]
        record = (meta.get("customization") or {}).get("pretraining") or {}
        facts[(float(params["eta"]), params["pretrain"], int(item.result.config["seed"]))] = {
            "seconds": record.get("train_seconds"), "curve": record.get("loss_curve") or [],
            "replacement": meta.get("observed_replacement")}
    return facts


def main(root: str) -> None:
    frame = rapt_audit.load(root)
    table = rapt_audit.summarize(root)
    facts = pretraining_facts(root)
    accuracy = frame[frame["measure"] == "accuracy"].assign(eta=lambda f: f["param.eta"].astype(float))
    by_seed = accuracy.pivot_table(index=["eta", "param.pretrain"], columns="seed", values="value")
    for eta in sorted(accuracy["eta"].unique()):
        replacement = np.mean([f["replacement"] for (e, obj, _), f in facts.items() if e == eta and obj == "none"])
        print(f"\n## eta = {eta:g}  (observed replacement on the victim-test release: {replacement:.3f})")
        print("| objective | seeds | accuracy (mean, 95 % t-interval over seeds) | macro-F1 | Δ accuracy vs none, "
              "paired by seed (95 % t) | pretraining s | MLM loss adapt first→last |")
        print("|---|---|---|---|---|---|---|")
        for objective in ORDER:
            rows = table[(table["param.eta"].astype(float) == eta) & (table["param.pretrain"] == objective)]
            if rows.empty:
                continue
            acc = rows[rows["measure"] == "accuracy"].iloc[0]
            f1 = rows[rows["measure"] == "macro_f1"].iloc[0]
            if objective == "none":
                delta, seconds, loss = "—", "—", "—"
            else:
                diffs = (by_seed.loc[(eta, objective)] - by_seed.loc[(eta, "none")]).dropna()
                d = t_interval(diffs.tolist())
                delta = f"{d.value:+.3f} [{d.ci_low:+.3f}, {d.ci_high:+.3f}] (n={len(diffs)})"
                runs = [f for (e, obj, _), f in sorted(facts.items()) if e == eta and obj == objective]
                seconds = f"{np.mean([r['seconds'] for r in runs]):.0f}"
                curves = [[c for c in r["curve"] if c["phase"] == "adapt"] for r in runs]
                loss = "; ".join(f"{c[0]['mlm_loss']:.2f}→{c[-1]['mlm_loss']:.2f}" for c in curves if c)
            print(f"| {objective} | {acc['seeds']} | {acc['value']:.3f} [{acc['ci_low']:.3f}, {acc['ci_high']:.3f}] "
                  f"| {f1['value']:.3f} | {delta} | {seconds} | {loss} |")


if __name__ == "__main__":
    main(sys.argv[1])
