"""Issue #61 item 2: what makes the CPU benchmark's worst-case column resolve at the 90 % target, on pilot seeds.

The first screen's resolution is the detectable paired difference at 80 % power (``Ranking.detectable``:
(z₀.₉₇₅ + z₀.₈₀) × the median standard error of the candidates' paired differences over the hierarchical
bootstrap's resamples). The issue asks for ≤ 0.05 in the worst-case column at the 90 % target. This study
reads the resolution pilot (``reports/regime/resolution/pilot.toml``: three dχ word defenses at three settings
around the target, mpnet LoRA service, 2,000 victim-test records, pilot seeds 100 - 104) with the benchmark's
own paired reading (:class:`rapt_audit.benchmark.paired.Pairing`), and measures what each lever buys:

* **victim-test records per seed**: each seed's first n records (a seed's victim test is in the split's
  shuffled order, so its first n are a random sample of it, the same records for every defense);
* **seeds**: every subset of S of the five pilot seeds, the readings' mean and range over the subsets;
* **settings placed densely around the target**: the grid without each defense's middle setting;
* **a reading against a pooled ceiling**: each seed's frontier read at a share of the resample's mean ceiling
  over its drawn seeds, instead of that seed's own ceiling.

A fit of the squared detectable difference, D² S / (z₀.₉₇₅ + z₀.₈₀)² = a + b / n (a: the seed level, b: the
record level), says what the target needs beyond the pilot's 2,000 records and five seeds.

Reproduce (one heavy job at a time; about an hour on 2 cores with ``--jobs 2``)::

    scripts/bootstrap --mpnet
    RAPT_AUDIT_DATA=/path/to/data .venv/bin/rapt-audit benchmark run reports/regime/resolution/pilot.toml \\
        --out /tmp/resolution --jobs 2
    .venv/bin/python scripts/resolution_study.py /tmp/resolution --out /tmp/resolution/table.md
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import sys
from contextlib import contextmanager
from pathlib import Path
from statistics import mean
from typing import Iterator, Sequence
from unittest import mock

import numpy as np

from rapt_audit.api.plugins import WORST_CASE
from rapt_audit.benchmark.join import join
from rapt_audit.benchmark.matched import _by_defense  # the benchmark's own grouping of a group's rows
from rapt_audit.benchmark.paired import Pairing
from rapt_audit.reporting import paired_rows
from rapt_audit.reporting.figures import pick_utility
from rapt_audit.reporting.summary import Group, fmt_estimate, group_results, is_local_baseline, is_reference
from rapt_audit.scoring.hierarchical import POWER_80

FRACTION = 0.90
TARGET = 0.05
RECORDS = (250, 500, 1000, 2000)
RESAMPLES = 1000


@contextmanager
def first_records(n: int | None) -> Iterator[None]:
    """Every measure read with its first ``n`` per-record parts only (None: all): the one place the paired reading
    takes a run's parts (``paired_rows.run_parts``) is wrapped for the study."""
    real = paired_rows.run_parts

    def cut(estimate, metric):  # noqa: ANN001, ANN202 - run_parts' own signature
        parts = real(estimate, metric)
        if n is None or parts is None or isinstance(parts, float):
            return parts
        return parts[0][:n], parts[1][:n]

    with mock.patch.object(paired_rows, "run_parts", cut):
        yield


def the_group(folder: Path) -> Group:
    """The pilot's one comparable group (SST-2)."""
    groups = group_results(join(folder).collection.results)
    if len(groups) != 1:
        raise SystemExit(f"{folder}: expected the pilot's one comparable group, found {len(groups)}")
    return groups[0]


def subset(group: Group, seeds: Sequence[int], dense: bool = True) -> Group:
    """``group`` at ``seeds`` only; without each private defense's middle setting unless ``dense``."""
    rows = []
    for mine in _by_defense(group).values():
        private = [r for r in mine if not r.no_privacy]
        keep = mine if dense or len(private) < 3 else [r for r in mine if r is not private[len(private) // 2]]
        rows += [dataclasses.replace(r, runs=[run for run in r.runs if paired_rows.seed_of(run) in seeds])
                 for r in keep]
    return Group(group.signature, [r for r in rows if r.runs])


def reading(group: Group, *, pooled: bool = False, fraction: float = FRACTION):  # noqa: ANN201 - (readings, Ranking, verdict)
    """The worst case's paired readings, ranking and verdict at ``fraction`` of the ceiling, as the benchmark
    reads them (``pooled``: against the resample's mean ceiling over its drawn seeds)."""
    utility = pick_utility(group)
    # As rapt_audit.benchmark.matched.matched reads a group: the ceiling's row, the candidates by defense.
    ceiling_row = max((r for r in group.rows if is_reference(r.defense)), key=lambda r: r.utility[utility].value)
    pairing = Pairing.of(group, utility, ceiling_row, RESAMPLES, 0)
    if pairing is None:
        raise SystemExit("the pilot's results cannot be paired (a result kept no per-record parts)")
    if pooled:
        pairing.ceilings = np.repeat(pairing.ceilings.mean(axis=-1, keepdims=True), pairing.ceilings.shape[-1], -1)
        pairing.ceiling_point = np.full_like(pairing.ceiling_point, pairing.ceiling_point.mean())
    rows = {d: mine for d, mine in _by_defense(group).items() if not is_local_baseline(d)}
    found = pairing.read(group, WORST_CASE, rows, (fraction,))
    if found is None:
        raise SystemExit("the worst case cannot be paired")
    return found[fraction]


def detectable(group: Group, seeds: Sequence[int], n: int | None, *, dense: bool = True,
               pooled: bool = False) -> float | None:
    with first_records(n):
        return reading(subset(group, seeds, dense), pooled=pooled)[1].detectable


def over_subsets(group: Group, size: int, n: int | None, **how: bool) -> tuple[float, float, float]:
    """The detectable difference over every subset of ``size`` of the pilot's seeds: (mean, min, max)."""
    seeds = sorted({s for r in group.rows for s in r.seeds})
    found = [d for combo in itertools.combinations(seeds, size) if (d := detectable(group, combo, n, **how)) is not None]
    return (mean(found), min(found), max(found)) if found else (float("nan"),) * 3


def fit(points: Sequence[tuple[int, int, float]]) -> tuple[float, float]:
    """Least squares of D² S / POWER_80² = a + b / n over ``(S, n, D)``: (a, b)."""
    x = np.array([[1.0, 1.0 / n] for _, n, _ in points])
    y = np.array([d * d * s / POWER_80 ** 2 for s, n, d in points])
    (a, b), *_ = np.linalg.lstsq(x, y, rcond=None)
    return float(a), float(b)


def predicted(a: float, b: float, seeds: int, n: float) -> float:
    return POWER_80 * float(np.sqrt(max(a + b / n, 0.0) / seeds))


def cell_costs(group: Group) -> list[str]:
    """Each defense's mean cell time (``env.wall_time_s``) split into what does not grow with the victim test (the
    service's training, the attacks' fits) and what does (the service's evaluation: the utility stage less its
    training; the attacks' scoring), per 1,000 victim-test records."""
    lines = []
    for defense in dict.fromkeys(r.defense for r in group.rows):
        runs = [run.result for r in group.rows if r.defense == defense for run in r.runs]
        n = len(runs[0].utility[pick_utility(group)].per_record or ())

        def stage(res, pick) -> float:  # noqa: ANN001
            return sum(v for k, v in res.env.get("timings_s", {}).items() if pick(k))

        train = [float((res.defense.get("release_meta", {}).get("customization") or {}).get("train_seconds", 0.0))
                 for res in runs]
        wall = mean(float(res.env.get("wall_time_s", 0.0)) for res in runs)
        evaluation = mean(stage(res, lambda k: k == "defense.utility") - t for res, t in zip(runs, train))
        fits = mean(stage(res, lambda k: k.startswith("attack.") and k.endswith(".fit")) for res in runs)
        scoring = mean(stage(res, lambda k: k.startswith("attack.") and not k.endswith(".fit")) for res in runs)
        per_k = 1000 * (evaluation + scoring) / n if n else float("nan")
        lines.append(f"| {defense} | {len(runs)} | {n} | {wall:.0f} | {mean(train):.0f} | {fits:.0f} | "
                     f"{evaluation:.0f} | {scoring:.0f} | {per_k:.0f} |")
    return lines


def _value(r) -> str:  # noqa: ANN001 - a Reading
    return "–" if r.value is None else fmt_estimate(r.value)


def table(folder: Path) -> str:
    group = the_group(folder)
    seeds = sorted({s for r in group.rows for s in r.seeds})
    out = [f"# Resolution pilot: {folder}", "",
           f"Seeds {', '.join(map(str, seeds))}; worst case at {FRACTION:.0%} of the ceiling; {RESAMPLES} resamples.",
           ""]
    readings, ranking, said = reading(group)
    out += ["## The readings (all records, all seeds)", "", f"verdict: {said}", "",
            "| defense | kind | reading | between | P(best) |", "|---|---|---:|---|---:|"]
    for r in readings:
        out.append(f"| {r.defense} | {r.kind} | {_value(r)} | {', '.join(r.between)} | "
                   f"{ranking.p_best.get(r.defense, float('nan')):.2f} |")
    per_seed = {s: {r.defense: r for r in reading(subset(group, [s]))[0]} for s in seeds}
    names = [r.defense for r in readings if not is_reference(r.defense)]
    out += ["", "## Each seed's reading (all its records): the seed level", "",
            "| seed | " + " | ".join(names) + " |", "|---:|" + "---:|" * len(names)]
    for s in seeds:
        out.append(f"| {s} | " + " | ".join(_value(per_seed[s][d]) for d in names) + " |")
    out += ["", "## Settings' utility (mean over seeds)", "", "| defense | setting | utility |", "|---|---|---:|"]
    utility = pick_utility(group)
    out += [f"| {r.defense} | {r.setting} | {r.utility[utility].value:.3f} |" for r in group.rows]
    sizes = [s for s in (3, 4, 5) if s <= len(seeds)]
    points = []
    for label, how in (("three settings per defense", {}), ("without the middle setting", {"dense": False}),
                       ("pooled ceiling, three settings", {"pooled": True})):
        out += ["", f"## Detectable difference (80 % power), {label}: mean [min, max] over seed subsets", "",
                "| records per seed | " + " | ".join(f"{s} seeds" for s in sizes) + " |",
                "|---:|" + "---:|" * len(sizes)]
        for n in RECORDS:
            cells = []
            for s in sizes:
                m, lo, hi = over_subsets(group, s, n, **how)
                cells.append(f"{m:.3f}" if s == len(seeds) else f"{m:.3f} [{lo:.3f}, {hi:.3f}]")
                if not how and np.isfinite(m):
                    points.append((s, n, m))
            out.append(f"| {n} | " + " | ".join(cells) + " |")
            print(f"  {label}: n={n} done", file=sys.stderr, flush=True)
    a, b = fit(points)
    out += ["", "## What the target needs (fit to the three-setting table)", "",
            f"D² S / {POWER_80:.3f}² = a + b / n with a = {a:.5f} (seed level) and b = {b:.3f} (record level).", "",
            "| seeds | " + " | ".join(f"n = {n}" for n in (500, 1000, 2000, 4000, 8000)) + " |",
            "|---:|" + "---:|" * 5]
    for s in (3, 5, 8, 10):
        out.append(f"| {s} | " + " | ".join(f"{predicted(a, b, s, n):.3f}" for n in (500, 1000, 2000, 4000, 8000))
                   + " |")
    out += ["", "## Cell cost (this machine, two cells at a time, one thread each; seconds, mean over cells)", "",
            "| defense | cells | test records | wall | service training | attack fits | service evaluation | "
            "attack scoring | per 1,000 test records |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    out += cell_costs(group)
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path, help="the pilot benchmark's output folder")
    parser.add_argument("--out", type=Path, help="also write the table here")
    args = parser.parse_args(argv)
    text = table(args.folder)
    if args.out is not None:
        args.out.write_text(text, encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
