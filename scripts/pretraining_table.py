"""The tables of reports/pretrain-sst2-cpu/README.md: accuracy per (method, η, objective) over seeds, paired vs none.

Usage: python scripts/pretraining_table.py reports/pretrain-sst2-cpu/results [more result folders...]

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


def pretraining_facts(roots: list[str]) -> dict[tuple[str, float, str, int], dict]:
    """(method, η, objective, seed) → the pretraining record and observed replacement of that run."""
    facts = {}
    for item in collect(roots, calibrations=False).results:
        meta = item.result.defense.get("release_meta", {})
        params = item.result.defense["params"]
        record = (meta.get("customization") or {}).get("pretraining") or {}
        facts[(params["method"], float(params["eta"]), params["pretrain"], int(item.result.config["seed"]))] = {
            "seconds": record.get("train_seconds"), "curve": record.get("loss_curve") or [],
            "replacement": meta.get("observed_replacement")}
    return facts


def main(roots: list[str]) -> None:
    frame = rapt_audit.load(roots)
    table = rapt_audit.summarize(roots)
    facts = pretraining_facts(roots)
    accuracy = frame[frame["measure"] == "accuracy"].assign(eta=lambda f: f["param.eta"].astype(float))
    by_seed = accuracy.pivot_table(index=["param.method", "eta", "param.pretrain"], columns="seed", values="value")
    for method in sorted(accuracy["param.method"].unique(), key=lambda m: m != "prompt"):
        for eta in sorted(accuracy.loc[accuracy["param.method"] == method, "eta"].unique()):
            table_for(method, eta, table, by_seed, facts)


def table_for(method: str, eta: float, table, by_seed, facts) -> None:  # noqa: ANN001 - pandas frames
    """Print the Markdown table of one (method, η)."""
    runs_at = {k: f for k, f in facts.items() if k[0] == method and k[1] == eta}
    replacement = np.mean([f["replacement"] for (_, _, obj, _), f in runs_at.items() if obj == "none"])
    print(f"\n### {method}, η = {eta:g} (observed replacement {replacement:.3f})")
    print("| objective | seeds | accuracy (mean, 95 % t-interval over seeds) | macro-F1 | Δ accuracy vs none, "
          "paired by seed (95 % t) | pretraining s | MLM loss adapt first→last |")
    print("|---|---|---|---|---|---|---|")
    mine = table[(table["param.method"] == method) & (table["param.eta"].astype(float) == eta)]
    for objective in ORDER:
        rows = mine[mine["param.pretrain"] == objective]
        if rows.empty:
            continue
        acc = rows[rows["measure"] == "accuracy"].iloc[0]
        f1 = rows[rows["measure"] == "macro_f1"].iloc[0]
        if objective == "none":
            delta, seconds, loss = "—", "—", "—"
        else:
            diffs = (by_seed.loc[(method, eta, objective)] - by_seed.loc[(method, eta, "none")]).dropna()
            d = t_interval(diffs.tolist())
            delta = f"{d.value:+.3f} [{d.ci_low:+.3f}, {d.ci_high:+.3f}] (n={len(diffs)})"
            runs = [f for (_, _, obj, _), f in sorted(runs_at.items()) if obj == objective]
            seconds = f"{np.mean([r['seconds'] for r in runs]):.0f}"
            curves = [[c for c in r["curve"] if c["phase"] == "adapt"] for r in runs]
            loss = "; ".join(f"{c[0]['mlm_loss']:.2f}→{c[-1]['mlm_loss']:.2f}" for c in curves if c)
        print(f"| {objective} | {acc['seeds']} | {acc['value']:.3f} [{acc['ci_low']:.3f}, {acc['ci_high']:.3f}] "
              f"| {f1['value']:.3f} | {delta} | {seconds} | {loss} |")


if __name__ == "__main__":
    main(sys.argv[1:])
