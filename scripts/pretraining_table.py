"""The table of reports/pretrain-sst2-cpu/README.md: accuracy per (η, objective) over seeds, and paired vs none.

Usage: python scripts/pretraining_table.py reports/pretrain-sst2-cpu/results
"""
import glob, json, sys, math
import numpy as np
from scipy import stats

root = sys.argv[1]
rows = {}
for f in glob.glob(f"{root}/*/result.json"):
    r = json.load(open(f))
    p = r["defense"]["params"]
    key = (float(p["eta"]), p["pretrain"])
    pt = (r["defense"]["release_meta"].get("customization") or {}).get("pretraining") or {}
    rows.setdefault(key, {})[r["config"]["seed"]] = {
        "acc": r["utility"]["accuracy"]["value"], "f1": r["utility"]["macro_f1"]["value"],
        "auc": r["utility"].get("auc", {}).get("value"),
        "ci": (r["utility"]["accuracy"]["ci_low"], r["utility"]["accuracy"]["ci_high"]),
        "repl": r["defense"]["release_meta"].get("observed_replacement"),
        "pt_s": pt.get("train_seconds"), "curve": pt.get("loss_curve"), "wall": r["env"]["wall_time_s"]}

def tint(x):
    x = np.asarray(x, float)
    if len(x) < 2:
        return float(x.mean()), float("nan"), float("nan")
    h = stats.t.ppf(0.975, len(x) - 1) * x.std(ddof=1) / math.sqrt(len(x))
    return float(x.mean()), float(x.mean() - h), float(x.mean() + h)

order = ["none", "vanilla", "prob", "denoise"]
for eta in sorted({k[0] for k in rows}):
    repl = [v["repl"] for s in rows.get((eta, "none"), {}).values() for v in [s]]
    print(f"\n## eta = {eta:g}  (observed replacement on the victim-test release: {np.mean(repl):.3f})")
    print("| objective | seeds | accuracy (mean, 95 % t-interval over seeds) | macro-F1 | Δ accuracy vs none, paired by seed (95 % t) | pretraining s | MLM loss adapt first→last |")
    print("|---|---|---|---|---|---|---|")
    base = rows.get((eta, "none"), {})
    for obj in order:
        cell = rows.get((eta, obj), {})
        if not cell:
            continue
        seeds = sorted(cell)
        m, lo, hi = tint([cell[s]["acc"] for s in seeds])
        f, _, _ = tint([cell[s]["f1"] for s in seeds])
        if obj != "none":
            common = [s for s in seeds if s in base]
            d, dlo, dhi = tint([cell[s]["acc"] - base[s]["acc"] for s in common])
            delta = f"{d:+.3f} [{dlo:+.3f}, {dhi:+.3f}] (n={len(common)})"
            curves = [[c for c in cell[s]["curve"] if c["phase"] == "adapt"] for s in seeds]
            loss = "; ".join(f"{c[0]['mlm_loss']:.2f}→{c[-1]['mlm_loss']:.2f}" for c in curves if c)
            pts = f"{np.mean([cell[s]['pt_s'] for s in seeds]):.0f}"
        else:
            delta, loss, pts = "—", "—", "—"
        print(f"| {obj} | {','.join(map(str, seeds))} | {m:.3f} [{lo:.3f}, {hi:.3f}] | {f:.3f} | {delta} | {pts} | {loss} |")
