"""How strong `bow_inversion` gets on clean MiniLM sentence vectors as the attacker's text grows (issue #39, item 2).

Usage: RAPT_AUDIT_DATA=../shared/data python scripts/bow_clean_curve.py [--sizes 2000,5000,10000] [--text-disjoint]

Issue #39 asks that the bag-of-words inversion recover content words from clean sentence embeddings at about
the rate Song & Raghunathan report (F1 0.5 – 0.7), or that the report say why not. The release is DPNR with no
noise and no word dropout (ε = ∞, μ = 0: the encoder's pooled vector, min-max scaled; the slow test's release).
One seeded cut of SST-2 at the cpu profile's victim sizes (2,000 / 500); the attacker's training part grows from
the first ``--sizes`` value (the cpu profile's 2,000) and each larger part holds the smaller ones, since the
parts are taken in a fixed order after one shuffle. Attacker-valid (500 records, the records after the training
part) chooses the epoch and threshold, as in a cell. Prints one JSON line per size: content F1, the prior's F1,
precision, recall and content privacy with their 95 % record-bootstrap intervals, the epoch chosen, and seconds.

GLUE's SST-2 train file holds the phrases of each review sentence as well as the sentence, so records disjoint by
row still share text: a victim-test record is often a phrase of a sentence the attacker trains on. With
``--text-disjoint`` every record is assigned to the first whole sentence that contains it (a record no longer
record contains; since issue #61 the record's `group`), and the attacker's parts keep only records of sentences no victim
record belongs to, attacker valid (its first 500) and train taken sentence-disjoint as well. The script also
prints how many victim-test records lie word for word inside an attacker-train record.
"""

from __future__ import annotations

import argparse
import json
import time

from rapt_audit.api.params import make_plugin
from rapt_audit.api.plugins import ATTACKS, DEFENSES, load
from rapt_audit.api.types import AttackerData
from rapt_audit.data import SplitSizes, load_dataset, make_splits
from rapt_audit.data.overlap import inside
from rapt_audit.pipeline.context import RunContext, default_cache_dir


def attacker_parts(size: int, *, seed: int, text_disjoint: bool):
    """The victim test and the attacker's data: ``size`` training records, 500 validation records."""
    dataset = load_dataset("sst2")
    if not text_disjoint:
        splits = make_splits(dataset, SplitSizes(2000, 500, size, 500), seed=seed)
        return splits.victim_test, splits.attacker
    rest = len(dataset.records) - 2500
    splits = make_splits(dataset, SplitSizes(2000, 500, rest, 0), seed=seed)
    # Each record's group is its review sentence (rapt_audit/data/sst2.py); make_splits keeps them apart since #61.
    taken = {r.group for r in splits.victim_train + splits.victim_test}
    pool = [r for r in splits.attacker_train if r.group not in taken]
    valid = tuple(pool[:500])
    taken |= {r.group for r in valid}
    train = tuple(r for r in pool[500:] if r.group not in taken)
    if len(train) < size:
        raise SystemExit(f"only {len(train)} text-disjoint attacker records; ask for at most that many")
    return splits.victim_test, AttackerData(train[:size], valid)


def measure(size: int, *, seed: int, profile: str, text_disjoint: bool, ctx: RunContext) -> dict:
    """Fit `bow_inversion` on ``size`` attacker-train records of clean vectors and score the victim test."""
    victim_test, attacker = attacker_parts(size, seed=seed, text_disjoint=text_disjoint)
    defense = make_plugin(DEFENSES, "dpnr", {"epsilon": float("inf"), "mu": 0.0})
    attack = make_plugin(ATTACKS, "bow_inversion", dict(ATTACKS.get("bow_inversion").profiles.get(profile, {})))
    started = time.perf_counter()
    fitted = attack.fit(attacker, defense, ctx=ctx)
    result = fitted.attack(defense.release(victim_test, ctx=ctx), victim_test, ctx=ctx)
    row: dict = {"attacker_train": size, "profile": profile, "text_disjoint": text_disjoint,
                 "victim_test_inside_attacker_train": sum(inside(victim_test, attacker.train)),
                 "seconds": round(time.perf_counter() - started, 1)}
    for name in ("content_f1", "content_prior_f1", "content_precision", "content_recall", "content_privacy"):
        m = result.metrics[name]
        row[name] = [round(m.value, 4), round(m.ci_low, 4), round(m.ci_high, 4)]
    row["best_epoch"] = result.details.get("best_epoch")
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="2000,5000,10000,20000,40000")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--profile", default="cpu", help="the attack's settings: a profile of bow_inversion")
    parser.add_argument("--text-disjoint", action="store_true", help="no attacker record of a victim's sentence")
    args = parser.parse_args()
    load()
    ctx = RunContext(seed=args.seed, profile="cpu", device="cpu", cache_dir=default_cache_dir())
    for size in (int(s) for s in args.sizes.split(",")):
        row = measure(size, seed=args.seed, profile=args.profile, text_disjoint=args.text_disjoint, ctx=ctx)
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
