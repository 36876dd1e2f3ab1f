"""How much of a benchmark's SST-2 victim test lies word for word inside other records of the same run, and what
the cells measured on those records against the rest.

Usage: RAPT_AUDIT_DATA=../shared/data python scripts/sst2_overlap.py [reports/sst2-cpu] [--profile cpu]

GLUE's SST-2 train file holds every phrase of each review sentence beside the sentence, and a run cuts its four
parts from the shuffled rows, so a victim-test record is often a phrase of a sentence that the service trains
on (victim-train) or the attacker trains on (attacker-train, attacker-valid). The script rebuilds each seed's
parts as the runner does (`make_splits` with the profile's sizes and the run seed's "splits" seed), marks the
victim-test records found inside a record of another part (padded with spaces: whole words), and prints:

* per seed, how many are inside victim-train, inside the attacker's parts, inside either;
* per defense setting (SST-2 cells of the folder, every seed), the task accuracy on the marked records and on
  the rest, and each inversion attack's content privacy on both, from the cells' per-record outcomes (content
  privacy's per-record parts keep the whole sample's scale, as the paired comparisons do, so the two parts
  compare with each other, not exactly with the cell's headline). Means over seeds.

Records inside another are mostly short phrases, and length alone moves both measures, so each difference is
also given length-adjusted: the rest are reweighted, stratum by stratum of content-word count (0 – 1, 2, 3,
4 – 5, 6 or more), to the marked records' mix of strata. ``whitebox`` learns nothing from the attacker's data:
its adjusted difference is what length and word mix leave unexplained, a control for the attacks that learn.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path

import numpy as np

from rapt_audit.data import SplitSizes, load_dataset, make_splits
from rapt_audit.data.overlap import inside
from rapt_audit.pipeline.config import profile_split_sizes
from rapt_audit.pipeline.context import derive_seed
from rapt_audit.scoring.content_tokens import content_tokens

ATTACKS = ("bayes_inversion", "mlp_inversion", "whitebox", "ae_inversion", "bow_inversion")
STRATA = (0, 2, 3, 4, 6)  # lower edges of the content-word-count strata


def marks(seed: int, profile: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For run seed ``seed``: victim-test records inside a victim-train record, inside an attacker record, and
    each record's content-word stratum."""
    dataset = load_dataset("sst2")
    sizes = profile_split_sizes(profile, len(dataset.records), {})
    splits = make_splits(dataset, SplitSizes(**sizes), seed=derive_seed(seed, "splits"))
    strata = np.searchsorted(STRATA, [len(content_tokens(r.text)) for r in splits.victim_test], side="right") - 1
    return (np.array(inside(splits.victim_test, splits.victim_train)),
            np.array(inside(splits.victim_test, splits.attacker_train + splits.attacker_valid)), strata)


def part_ratio(per_record: dict, mask: np.ndarray, weights: np.ndarray | None = None) -> float:
    """Σ w·num / Σ w·den over the records ``mask`` selects (``den`` may be one number for every record)."""
    num = np.asarray(per_record["num"], dtype=float)
    den = np.broadcast_to(np.asarray(per_record["den"], dtype=float), num.shape)
    w = np.ones_like(num) if weights is None else weights
    return float((w * num)[mask].sum() / (w * den)[mask].sum()) if (w * den)[mask].sum() > 0 else float("nan")


def reweight(mark: np.ndarray, strata: np.ndarray) -> np.ndarray:
    """Weights that give the unmarked records, stratum by stratum, the marked records' mix of strata."""
    weights = np.ones(mark.size)
    for s in np.unique(strata):
        marked, rest = (mark & (strata == s)).sum(), (~mark & (strata == s)).sum()
        weights[~mark & (strata == s)] = (marked / mark.sum()) / (rest / (~mark).sum()) if rest else 0.0
    return weights


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", nargs="?", default="reports/sst2-cpu")
    parser.add_argument("--profile", default="cpu")
    args = parser.parse_args()
    seen: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    rows: dict[str, dict[str, list[tuple[float, float, float]]]] = defaultdict(lambda: defaultdict(list))
    for path in sorted(Path(args.folder).glob("*_dataset=sst2-*/result.json")):
        result = json.loads(path.read_text(encoding="utf-8"))
        seed = int(result["config"]["seed"])
        if seed not in seen:
            train_mark, attacker_mark, strata = marks(seed, args.profile)
            mark = train_mark | attacker_mark
            seen[seed] = (mark, reweight(mark, strata))
            print(f"seed {seed}: of {train_mark.size} victim-test records, {train_mark.sum()} inside a victim-train "
                  f"record, {attacker_mark.sum()} inside an attacker record, {mark.sum()} inside either")
        mark, weights = seen[seed]
        setting = path.parent.name.split("_seed=")[0].removeprefix("defense=")
        accuracy = result["utility"].get("accuracy", {}).get("per_record")
        if accuracy and len(accuracy["num"]) == mark.size:
            rows[setting]["accuracy"].append((part_ratio(accuracy, mark), part_ratio(accuracy, ~mark),
                                              part_ratio(accuracy, ~mark, weights)))
        for name in ATTACKS:
            metric = (result["attacks"].get(name) or {}).get("metrics", {}).get("content_privacy", {})
            per_record = metric.get("per_record") if isinstance(metric, dict) else None
            if per_record and len(per_record["num"]) == mark.size:
                rows[setting][name].append((part_ratio(per_record, mark), part_ratio(per_record, ~mark),
                                            part_ratio(per_record, ~mark, weights)))
    print("\nsetting | measure | inside another record | the rest | difference | length-adjusted (means over seeds)")
    for setting, measures in sorted(rows.items()):
        for name, parts in measures.items():
            a, b, c = (float(np.nanmean([p[i] for p in parts])) for i in range(3))
            print(f"{setting} | {name} | {a:.3f} | {b:.3f} | {a - b:+.3f} | {a - c:+.3f} ({len(parts)} seeds)")


if __name__ == "__main__":
    main()
