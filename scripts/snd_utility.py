#!/usr/bin/env python
"""Split-and-Denoise on SST-2: utility with and without the denoiser, next to token-embedding
privatization (``embedding``) at the same η, and the token-level attacks on SnD's upload.

Each (defense, η) is one ordinary ``rapt_audit.pipeline.runner.run`` on SST-2 (so the numbers are exactly
what ``rapt-audit run`` reports), written under ``--out`` (git-ignored ``runs/``); the markdown table
is rendered from those result files into ``--report``:

    nice -n 10 .venv/bin/python scripts/snd_utility.py                 # η = 25, 50, 100, ∞
    .venv/bin/python scripts/snd_utility.py --render-only
    .venv/bin/python scripts/snd_utility.py --defenses snd --utility-only   # snd_utility_table.md only

Utility of ``snd``: an MLP on the denoised output embedding (and on the raw server output,
``*.without_denoiser``; and on the mean of the client's own clean token embeddings, ``*.client_only``,
the control that involves no server), trained on privatized victim-train, scored on privatized
victim-test; η = ∞ is the clean output embedding.
Utility of ``embedding``: the suite's default service, prompt tuning of the encoder on the noisy
(unclipped) token embeddings as its input embeddings (``reports/fidelity.md``, item 3; rows made
before 2026-11-25 used a logistic-regression probe). Attacks: white-box nearest neighbour, MLP and autoencoder inversion
and the k-NN mutual-information estimate, all on the uploaded token embeddings.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from rapt_audit.api.files import write_text_atomic

ATTACKS = "whitebox,mlp_inversion,ae_inversion,mutual_info"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--eta", default="25,50,100,inf", help="comma-separated η values (inf: no noise)")
    p.add_argument("--defenses", default="snd,embedding")
    p.add_argument("--sizes", default="1000,500,1000,300",
                   help="SST-2 victim_train,victim_test,attacker_train,attacker_valid")
    p.add_argument("--attacks", default=ATTACKS)
    p.add_argument("--profile", default="cpu")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--data-dir", default=None)
    p.add_argument("--out", default="runs/snd")
    p.add_argument("--report", default="reports/snd")
    p.add_argument("--render-only", action="store_true")
    p.add_argument("--utility-only", action="store_true",
                   help="run only the cheapest attack (whitebox, to satisfy the runner) and render only the utility "
                        "table, to snd_utility_table.md (the attack rows do not depend on the denoiser)")
    return p.parse_args(argv)


def _ci(est: dict[str, Any] | None, digits: int = 3) -> str:
    if not est:
        return "-"
    return f"{est['value']:.{digits}f} [{est['ci_low']:.{digits}f}, {est['ci_high']:.{digits}f}]"


UTILITY_COLUMNS = ["accuracy", "accuracy.without_denoiser", "accuracy.client_only", "auc", "auc.without_denoiser",
                   "auc.client_only", "embedding_mse.denoised", "embedding_mse.noisy", "embedding_cosine.denoised",
                   "embedding_cosine.noisy"]


def render(out: Path, report: Path, *, utility_only: bool = False) -> None:
    """Write ``snd_table.md`` (or, ``utility_only``, ``snd_utility_table.md``) from every ``result.json`` under ``out``."""

    results = []
    for path in sorted(out.glob("*/result.json")):
        data = json.loads(path.read_text())
        extra = path.parent / "nn_rescaled.json"
        if extra.exists():
            data["attacks"]["whitebox_clipping_aware"] = json.loads(extra.read_text())
        results.append(data)
    results.sort(key=lambda d: (d["defense"]["name"], float(d["defense"]["params"].get("eta", 0))))
    util_cols = UTILITY_COLUMNS
    lines = ["| defense | η | " + " | ".join(util_cols) + " | wall s |", "|" + "---|" * (len(util_cols) + 3)]
    attack_names = sorted({a for d in results for a in d["attacks"]})
    alines = ["| defense | η | " + " | ".join(f"{a}: empirical privacy" for a in attack_names) + " |",
              "|" + "---|" * (len(attack_names) + 2)]
    for d in results:
        name, eta = d["defense"]["name"], d["defense"]["params"].get("eta")
        lines.append(f"| {name} | {eta} | " + " | ".join(_ci(d["utility"].get(c)) for c in util_cols)
                     + f" | {d['env'].get('wall_time_s', 0):.0f} |")
        cells = []
        for a in attack_names:
            outcome = d["attacks"].get(a, {})
            cells.append(f"skipped: {outcome['skipped'][:60]}" if "skipped" in outcome else _ci(outcome.get("empirical_privacy")))
        alines.append(f"| {name} | {eta} | " + " | ".join(cells) + " |")
    splits = results[0]["dataset"]["splits"] if results else {}
    report.mkdir(parents=True, exist_ok=True)
    text = ["# Split-and-Denoise vs token-embedding privatization (SST-2, all-MiniLM-L6-v2, CPU)", "",
            f"Splits: {json.dumps(splits)}; profile {results[0]['config']['profile'] if results else '-'}; "
            f"seed {results[0]['config']['seed'] if results else '-'}. 95 % bootstrap intervals over victim records.",
            "`snd` utility: MLP on the denoised (or, `.without_denoiser`, the raw server) output embedding; "
            "`.client_only`: the same MLP on the mean of the client's clean token embeddings (no server involved); "
            "η = inf: the clean output embedding. "
            "`embedding` utility: prompt tuning on the unclipped noisy token embeddings as input embeddings "
            "(the suite's default service). MSE / cosine: to the clean output embedding on victim-test. "
            "Denoiser settings: " + "; ".join(sorted({_denoiser_settings(d) for d in results if d["defense"]["name"] == "snd"}))
            + ".", "", "## Utility", "", *lines, ""]
    if utility_only:
        write_text_atomic(report / "snd_utility_table.md", "\n".join(text))
        return
    text += ["## Attacks on the upload (noisy token embeddings)", "",
             "Empirical privacy = 1 - token recovery (whitebox, MLP), the reconstruction MSE (AE), "
             "1 - I/H(X) (mutual information).", "", *alines, ""]
    write_text_atomic(report / "snd_table.md", "\n".join(text))


def _denoiser_settings(result: dict[str, Any]) -> str:
    p = result["defense"]["params"]
    keys = ("public_corpus", "public_size", "noise_draws", "d_model", "heads", "d_ff", "layers", "denoiser_epochs",
            "denoiser_lr")
    return ", ".join(f"{k} {p[k]}" for k in keys if k in p)


def clipping_aware_nn(config: Any) -> dict[str, Any]:
    """Top-1 token recovery of a nearest-neighbour attacker that knows the clipping (Kerckhoffs).

    A clipped upload has norm ``C`` instead of about ``d/η``, which shrinks the dot-product term of
    the Euclidean search and pulls every guess towards small-norm tokens. This attacker first undoes
    the clipping exactly as the suite's ``whitebox`` attack does
    (:func:`rapt_audit.attacks.whitebox.undo_norm_clipping`: clipped vectors are rescaled to the
    expected unclipped norm), then searches the regular vocabulary exhaustively. For unclipped
    releases it is the plain nearest-neighbour attack (a sanity check).
    """
    import numpy as np

    from rapt_audit.api.params import make_plugin
    from rapt_audit.api.plugins import DEFENSES, load
    from rapt_audit.attacks.whitebox import undo_norm_clipping
    from rapt_audit.data import SplitSizes, load_dataset, make_splits
    from rapt_audit.encoder.encode import token_id_lists
    from rapt_audit.encoder.vocab import embedding_space
    from rapt_audit.pipeline.config import profile_split_sizes
    from rapt_audit.pipeline.context import RunContext
    from rapt_audit.scoring.stats import bootstrap_mean

    load()
    ctx = RunContext(seed=config.seed, profile=config.profile, device="cpu", data_dir=config.data_dir)
    dataset = load_dataset(config.dataset, config.data_dir)
    sizes = profile_split_sizes(config.profile, len(dataset.records), config.data_args)
    test = make_splits(dataset, SplitSizes(**sizes), seed=ctx.seed_for("splits")).victim_test
    cls = DEFENSES.get(config.defense)
    defense = make_plugin(DEFENSES, config.defense, {**dict(cls.profiles.get(config.profile, {})),
                                                     **dict(config.defense_args)})
    release = defense.release(test, ctx=ctx)  # the same draws as the run's release (uid-keyed noise)
    space = embedding_space(ctx)
    vocab = space.vectors.astype(np.float32)
    vocab_sq = np.einsum("ij,ij->i", vocab, vocab)
    rows = [space.rows_of(ids) for ids in token_id_lists(ctx, [r.text for r in test])]
    uploads = [np.asarray(upload, dtype=np.float32)[r >= 0] for r, upload in zip(rows, release.token_embeddings)]
    searched, rescaled = undo_norm_clipping(np.concatenate(uploads), release.meta, vocab)
    correct, counts = [], []
    for r, u in zip(rows, np.split(searched, np.cumsum([len(u) for u in uploads])[:-1])):
        guess = np.argmax(2 * u @ vocab.T - vocab_sq, axis=1) if len(u) else np.zeros(0, np.int64)
        correct.append(float((guess == r[r >= 0]).sum()))
        counts.append(float(len(u)))
    values, weights = np.array(correct), np.array(counts)
    has = weights > 0
    est = bootstrap_mean(values[has] / weights[has], weights=weights[has], rng=ctx.rng("nn_rescaled"))
    return {"token_accuracy": est.to_dict(), "empirical_privacy": est.complement().to_dict(),
            "clip_norm": release.meta.get("clip_norm"), "rescaled_vectors": rescaled}


def main(argv: list[str] | None = None) -> int:
    """Run every (defense, η) through the runner, then render the table."""
    args = parse_args(argv)
    out, report = Path(args.out), Path(args.report)
    if not args.render_only:
        from rapt_audit.encoder.models import one_thread
        from rapt_audit.pipeline.config import RunConfig
        from rapt_audit.pipeline.runner import run

        sizes = dict(zip(("victim_train", "victim_test", "attacker_train", "attacker_valid"),
                         (int(v) for v in args.sizes.split(","))))
        with one_thread("cpu"):  # small models on shared cores: one torch thread is fastest
            for eta in [float(v) for v in args.eta.split(",")]:
                for name in args.defenses.split(","):
                    attacks = "whitebox" if args.utility_only else args.attacks
                    config = RunConfig(defense=name, attacks=attacks, dataset="sst2", profile=args.profile,
                                       seed=args.seed, device="cpu", out=str(out / f"{name}-eta{eta:g}"),
                                       data_dir=args.data_dir, defense_args={"eta": eta}, data_args=sizes)
                    result = run(config, log=lambda m: print(m, flush=True))
                    if "whitebox" in attacks and not args.utility_only:
                        nn = clipping_aware_nn(config)
                        write_text_atomic(out / f"{name}-eta{eta:g}" / "nn_rescaled.json", json.dumps(nn, indent=1))
                    acc = result.utility.get("accuracy")
                    print(f"{name} eta={eta:g}: accuracy={acc.value if acc else float('nan'):.3f} "
                          f"({result.env['wall_time_s']:.0f} s)", flush=True)
    render(out, report, utility_only=args.utility_only)
    print(f"wrote {report}/{'snd_utility_table.md' if args.utility_only else 'snd_table.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
