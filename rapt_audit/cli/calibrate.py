"""``rapt-audit calibrate``: replacement probability per η, η for a target, plausible deniability."""

from __future__ import annotations

import argparse
import json
import math
from typing import Any

import numpy as np

from rapt_audit.api.errors import UsageError
from rapt_audit.api.params import coerce, get_params, make_plugin
from rapt_audit.api.plugins import DEFENSES, load
from rapt_audit.cli.options import defense_params, number
from rapt_audit.data.public import public_corpus
from rapt_audit.mechanisms.calibration import RAPT_TABLE_III, find_eta, plausible_deniability, replacement_probability
from rapt_audit.mechanisms.engines import token_engine
from rapt_audit.mechanisms.noise import check_eta
from rapt_audit.mechanisms.privatize import decode_noisy
from rapt_audit.pipeline.context import RunContext, default_cache_dir

#: Perturbations per token for plausible deniability (Qu et al. use 1,000) and tokens sampled.
DENIABILITY = {"smoke": (100, 50), "cpu": (1000, 300), "paper": (1000, None)}


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register the ``calibrate`` sub-command."""
    p = sub.add_parser("calibrate", help="word-replacement probability per eta (RAPT Table III) and more")
    p.add_argument("--defense", default="t2t", help="t2t, pct2t, embedding, or a word-level sanitizer whose --eta "
                   "values are its epsilon: santext, custext, tem, vickrey, mahalanobis (default t2t)")
    p.add_argument("--model", default="minilm", help="minilm (bundled), a Hugging Face id or a local directory")
    p.add_argument("--eta", default="25,75,125,150,175,inf", help="comma-separated eta values")
    p.add_argument("--target-replacement", type=number, default=None, help="also find the eta giving this probability")
    p.add_argument("--deniability", action="store_true", help="also measure plausible deniability N_w, S_w")
    p.add_argument("--format", choices=["table", "json"], default="table")
    p.add_argument("--profile", choices=["smoke", "cpu", "paper"], default="cpu")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--data-dir", dest="data_dir", default=None, help="for WikiText-2 (default $RAPT_AUDIT_DATA)")
    p.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE", help="defense parameter")


def calibrate(args: argparse.Namespace) -> dict[str, Any]:
    """Run the calibration described by ``args`` and return the JSON document."""
    load()
    etas = [coerce(v, float, key="eta") for v in args.eta.split(",") if v.strip()]
    if not etas:
        raise UsageError("--eta needs at least one value")
    params = defense_params(args.sets)
    defense = make_plugin(DEFENSES, args.defense, params)
    if not hasattr(defense, "replacement_count"):
        raise UsageError(f"defense {args.defense!r} has no replacement probability; use t2t, pct2t or embedding")
    for eta in etas:
        check_eta(eta)
    ctx = RunContext(seed=args.seed, profile=args.profile, device="cpu", model=args.model,
                     cache_dir=default_cache_dir(), data_dir=args.data_dir)
    corpus, texts = public_corpus(ctx)

    def counter(eta: float, rng: np.random.Generator):  # noqa: ANN202
        return defense.replacement_count(texts, eta=eta, rng=rng, ctx=ctx)

    seed = ctx.seed_for("calibrate", args.defense)
    rows = [replacement_probability(counter, eta, seed=seed) for eta in etas]
    # The ε-parameterised word mechanisms read --eta as their ε; RAPT's table of η does not apply to them.
    parameter = getattr(defense, "privacy_parameter", "eta")
    dchi = parameter == "eta"
    doc: dict[str, Any] = {"defense": args.defense, "params": get_params(defense), "model": args.model,
                           "model_fingerprint": ctx.encoder().fingerprint, "corpus": corpus,
                           "corpus_sentences": len(texts), "seed": args.seed, "parameter": parameter,
                           "rows": [r.to_dict() | ({} if dchi else {"rapt_table_iii_bert_base": None}) for r in rows],
                           "reference": "RAPT v3 Table III, BERT-base (a different embedding model)" if dchi else None}
    if args.target_replacement is not None:
        eta = find_eta(counter, args.target_replacement, seed=seed)
        check = replacement_probability(counter, eta, seed=seed + 1)  # fresh noise: an honest check
        doc["target"] = {"replacement": args.target_replacement, "eta": eta,
                         "check_with_fresh_noise": check.replacement.to_dict()}
    if args.deniability:
        doc["deniability"] = [deniability(ctx, eta, args.profile).summary() for eta in etas if not math.isinf(eta)]
    return doc


def deniability(ctx, eta: float, profile: str):  # noqa: ANN001, ANN201
    """N_w, S_w of token-level T2T at ``eta`` over a uniform sample of regular tokens."""
    engine = token_engine(ctx)
    repeats, sample = DENIABILITY[profile]
    rng = ctx.rng("deniability", eta)
    n = len(engine.space.tokens)
    rows = np.arange(n) if sample is None or sample >= n else np.sort(rng.choice(n, size=sample, replace=False))

    def privatize_rows(r: np.ndarray, g: np.random.Generator) -> np.ndarray:
        return decode_noisy(lambda a, b: engine.space.vectors[r[a:b]], len(r), eta=eta, rng=g, index=engine.index)

    return plausible_deniability(privatize_rows, rows, [engine.space.tokens[i] for i in rows], eta=eta,
                                 repeats=repeats, rng=rng)


def format_table(doc: dict[str, Any]) -> str:
    """Plain-text table of a calibration document."""
    lines = [f"word-replacement probability: defense {doc['defense']}, model {doc['model']}, "
             f"corpus {doc['corpus']} ({doc['corpus_sentences']} sentences), seed {doc['seed']}",
             f"{doc.get('parameter', 'eta'):>8}"  # eta, or a word mechanism's epsilon
             f"  {'replacement':>11}  {'95% CI':>17}  {'forced':>7}  {'held':>7}  {'units':>7}  "
             "RAPT Tab. III (BERT-base)"]
    for row in doc["rows"]:
        r, forced, held = row["replacement"], row.get("forced"), row.get("replacement_of_held_units")
        ref = row.get("rapt_table_iii_bert_base")
        lines.append(f"{row['eta']:>8}  {r['value']:>11.4f}  [{r['ci_low']:.4f}, {r['ci_high']:.4f}]  "
                     f"{'' if forced is None else format(forced['value'], '.4f'):>7}  "
                     f"{'' if held is None else format(held['value'], '.4f'):>7}  "
                     f"{row['units']:>7}  {'' if ref is None else f'{ref:.2f}'}")
    lines.append("forced: share of units no candidate equals (replaced at every finite η; a floor under the curve); "
                 "held: replacement of the other units (falls to 0 as η grows)")
    if "target" in doc:
        t = doc["target"]
        c = t["check_with_fresh_noise"]
        lines.append(f"target replacement {t['replacement']}: eta = {t['eta']:.2f} "
                     f"(re-measured with fresh noise: {c['value']:.4f} [{c['ci_low']:.4f}, {c['ci_high']:.4f}])")
    for d in doc.get("deniability", []):
        lines.append(f"plausible deniability at eta {d['eta']} ({d['tokens_sampled']} tokens x {d['repeats']}): "
                     f"median N_w {d['n_w_quantiles']['0.5']:.0f}, median S_w {d['s_w_quantiles']['0.5']:.0f}")
    return "\n".join(lines)


def cmd_calibrate(args: argparse.Namespace) -> int:
    """Entry of ``rapt-audit calibrate``."""
    doc = calibrate(args)
    print(json.dumps(doc, indent=2) if args.format == "json" else format_table(doc))
    return 0


__all__ = ["RAPT_TABLE_III", "add_parser", "calibrate", "cmd_calibrate", "format_table"]
