"""``benchmark verify DIR``: a maintainer's check of a contributor's benchmark folder against the published one.

Every contributor cell of DIR (a cell the published index does not list) is first checked without any
run (:mod:`~rapt_audit.benchmark.admit`): a cell measured otherwise than the published cells (data,
splits, model, profile, protocol, attacks, code digest of the built-ins) is **refused**, with the field
and the fix. A seeded sample of the admitted cells is then **re-run** from the published file (the
configuration rebuilt there, never read from the submission) into a scratch folder, and each re-run's
headline numbers are compared with the submitted ones: **verified** or **differs**. A sampled cell whose code
digest (the ``code:`` of its signature, which the published cells of its dataset it matched carry) is not this
installation's is refused instead of re-run, naming the rapt-audit to install: each cell is decided alone, so a
published folder of several digests, or a wrong installation, never stops the table. Nothing is written into
DIR or the published folder.

The noise rule. A re-run has the cell's configuration and seed, so it scores the same records in the
same order as the submission: the two are *paired*. Every utility metric and every attack's empirical
privacy (with the privacy metrics the regression gate compares) is compared with the gate's own
comparers (:mod:`rapt_audit.reporting.check`), in both directions: a measure differs when the 95 %
paired-bootstrap interval of submitted − re-run, over the shared records, lies wholly beyond ±0.001 (it
excludes 0), or, for a measure without per-record outcomes, when the two values are further apart than
1.96·sqrt(se₁² + se₂²) + 0.005. A re-run that reproduces every per-record outcome must reproduce the
submitted interval too (it is computed from them with the run's seed), and a submission must keep every
measure and per-record outcome its re-run keeps: one left out would escape the comparison or fall back to
the weaker unpaired test, so it differs (``missing``, or ``outcomes``: "per-record outcomes removed"). Why
paired, and not "each point inside the other's interval": the record-sampling noise each interval describes
is shared by the two runs and cancels; what is left is how the records were scored. Unchanged code on the
same kind of device reproduces every outcome, while an edit that moves a headline by a point or two, well inside its own
interval (about ±3 points at 872 records, wider than many gaps on the leaderboard), is still caught; a
changed per-record list that moves no headline is within noise by design. The price: training that does
not reproduce across kinds of device can move a CPU re-run of a GPU submission, so the table names both
devices when they differ, and the fix is to re-run there (``--device``).

Which cells: ``--sample N`` of the admitted cells, drawn with ``--sample-seed`` (default: a fresh random
seed, printed, so a contributor cannot know the sample beforehand and anyone can draw it again), spread
over the contributor's defenses (one cell of each before a second of any).
"""

from __future__ import annotations

import math
import random
import secrets
import shutil
import tempfile
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Sequence

from rapt_audit.api.errors import DataError, ResultError, UsageError
from rapt_audit.api.components import table_codes
from rapt_audit.api.types import AttackResult, Estimate
from rapt_audit.benchmark.admit import (
    Published,
    check_installed,
    code_refusal,
    configuration_refusal,
    expected_cell,
    read_published,
    refusals,
    same_result,
    sweep_failures,
)
from rapt_audit.benchmark.join import Joined, join
from rapt_audit.benchmark.plan import BenchCell
from rapt_audit.pipeline.results import RunResult
from rapt_audit.pipeline.stage_reuse import cell_attacks
from rapt_audit.pipeline.sweep import Axis, CellsFailed, Executor, run_sweep
from rapt_audit.reporting.baseline import run_label
from rapt_audit.reporting.check import Comparison, compare_measure, compare_runs, signature_diff
from rapt_audit.scoring.metrics import METRICS

#: Re-runs when ``--sample`` is not given: a few cells, as each costs what the contributor's run of it did.
DEFAULT_SAMPLE = 3
#: A cell's statuses, in the order the table lists them; all but verified and unchecked fail the command.
STATUSES = ("refused", "differs", "failed", "verified", "unchecked")
Log = Callable[[str], None]


@dataclass(frozen=True)
class Verdict:
    """What ``verify`` found for one contributor cell: ``status`` (one of :data:`STATUSES`) and why."""

    cell: dict[str, Any]
    status: str
    reasons: tuple[str, ...] = ()


@dataclass
class Verification:
    """The outcome of :func:`verify`: a verdict per contributor cell, and how the sample was drawn."""

    folder: Path
    published: Path
    verdicts: list[Verdict]
    sample_seed: int
    sampled: int
    published_copies: int = 0

    @property
    def passed(self) -> bool:
        """No cell refused, differing or failed (unchecked cells are admitted, not re-run)."""
        return all(v.status in ("verified", "unchecked") for v in self.verdicts)


def choose_sample(cells: Sequence[dict[str, Any]], n: int | None, seed: int) -> list[dict[str, Any]]:
    """``n`` of ``cells`` (all for None), drawn with ``seed``: shuffled, then one cell of each defense per round,
    so that every defense is re-run once before any is re-run twice."""
    order = sorted(cells, key=lambda c: c["name"])  # the draw depends on the seed, not on the index's order
    random.Random(seed).shuffle(order)
    rounds: Counter[str] = Counter()
    ranked = []
    for cell in order:
        ranked.append((rounds[cell["defense"]], cell))
        rounds[cell["defense"]] += 1
    chosen = [cell for _, cell in sorted(ranked, key=lambda pair: pair[0])]  # stable: the shuffle within a round
    return chosen if n is None else chosen[:n]


def matches(cell: dict[str, Any], selectors: Sequence[str]) -> bool:
    """Whether ``cell`` passes every ``--cell`` selector: its folder name, or ``KEY=VALUE`` where KEY is
    ``defense``, ``seed``, ``dataset`` or a key of its setting (``eta=25``)."""
    for selector in selectors:
        if selector == cell["name"]:  # before KEY=VALUE: every folder name has "=" in it (defense=..._seed=...)
            continue
        key, sep, value = selector.partition("=")
        if not sep:  # not this cell's folder name (above), and no KEY=VALUE
            return False
        known = {"defense": cell["defense"], "seed": str(cell["seed"]), "dataset": cell["dataset"], **cell["setting"]}
        if known.get(key.strip()) != value.strip():
            return False
    return True


def compare_headlines(submitted: RunResult, rerun: RunResult) -> list[Comparison]:
    """Every headline measure of ``submitted`` against its re-run, under the rule of the module docstring: the
    utility metrics (those of either), then the regression gate's own comparisons of every attack (two-sided: any
    status but ``ok`` differs), the attacks only the re-run measured, intervals not reproduced from equal
    outcomes, and measures whose per-record outcomes the submission lacks where the re-run keeps them (without
    them the comparison falls back to the weaker unpaired test and the interval goes unchecked: status
    ``outcomes``)."""
    rerun = RunResult.from_dict(rerun.to_dict())  # as its result file keeps it (the submission's only form)
    label = run_label(submitted)
    found = []
    for metric in dict.fromkeys([*submitted.utility, *rerun.utility]):
        est, new = submitted.utility.get(metric), rerun.utility.get(metric)
        higher = METRICS.get(metric).higher_is_better if metric in METRICS else True
        if est is None:
            found.append(Comparison(label, "utility", metric, None, "measured by the re-run, not submitted",
                                    math.nan, "missing"))
        elif new is None:
            found.append(Comparison(label, "utility", metric, est, "not measured by the re-run", math.nan, "missing"))
        else:
            found.append(compare_measure(label, "utility", metric, est, new, higher_is_better=higher,
                                         seed_key=f"{submitted.cell_id}|utility|{metric}"))
    found += compare_runs(submitted, rerun)
    for name, outcome in rerun.attacks.items():
        mine = submitted.attacks.get(name)
        if not isinstance(outcome, AttackResult):
            continue
        dropped = (["empirical_privacy"] if not isinstance(mine, AttackResult) else
                   [m for m in outcome.metrics if m not in mine.metrics and m in METRICS
                    and METRICS.get(m).kind == "privacy"])  # a privacy measure compare_runs would compare
        found += [Comparison(label, name, m, None, "measured by the re-run, not submitted", math.nan, "missing")
                  for m in dropped]
    # Equal per-record outcomes give the equal interval (the bootstrap is seeded by the run): else it was edited.
    found = [replace(c, status="interval") if c.status == "ok" and _same_outcomes(c) and not _same_interval(c)
             else c for c in found]
    return [replace(c, status="outcomes") if _outcomes_removed(c) else c for c in found]


def _outcomes_removed(c: Comparison) -> bool:
    """The re-run keeps per-record outcomes of a measure the submission reports without them."""
    return (c.base is not None and c.base.per_record is None and isinstance(c.new, Estimate)
            and c.new.per_record is not None)


def _same_outcomes(c: Comparison) -> bool:
    return (c.base is not None and c.base.per_record is not None and not isinstance(c.new, str)
            and c.new is not None and c.base.per_record == c.new.per_record)


def _same_interval(c: Comparison) -> bool:
    assert c.base is not None and c.new is not None and not isinstance(c.new, str)
    return abs(c.base.ci_low - c.new.ci_low) <= 1e-9 and abs(c.base.ci_high - c.new.ci_high) <= 1e-9


def describe(c: Comparison) -> str:
    """One comparison that is not ``ok``, for the table: the measure, both values and the test."""
    measure = c.metric if c.attack == "utility" else (
        c.attack if c.metric == "empirical_privacy" else f"{c.attack} {c.metric}")
    if c.status == "outcomes":
        return (f"{measure}: per-record outcomes removed (the re-run keeps them; without them neither the paired "
                "test nor the interval can be checked): send the result.json as the run wrote it")
    if c.status == "missing" or isinstance(c.new, str) or c.base is None or c.new is None:
        return f"{measure}: {c.new if isinstance(c.new, str) else 'measured in only one of the two'}"
    values = (f"{measure}: submitted {c.base.value:.4f} [{c.base.ci_low:.4f}, {c.base.ci_high:.4f}], re-run "
              f"{c.new.value:.4f} [{c.new.ci_low:.4f}, {c.new.ci_high:.4f}]")
    if c.status == "interval":
        return values + " (the same per-record outcomes, another interval: the interval was edited)"
    if c.status == "records":
        return values + f" (scored {c.new.n} records, the submission {c.base.n})"
    test = ("paired interval of the difference excludes 0" if c.test == "paired"
            else f"apart by more than {c.allowed:.4f}")
    return f"{values} ({test})"


def verify(folder: str | Path, *, against: str | Path, sample: int | None = DEFAULT_SAMPLE,
           sample_seed: int | None = None, selectors: Sequence[str] = (), scratch: str | Path | None = None,
           executor: Executor | None = None, device: str | None = None, data_dir: str | None = None,
           log: Log | None = None) -> Verification:
    """Check the contributor cells of ``folder`` against the published folder ``against`` (module docstring).

    Args:
        folder: The submission (a benchmark folder).
        against: The published benchmark folder.
        sample: How many admitted cells to re-run (None: all; 0: none, the checks only).
        sample_seed: Seeds the draw (default: a fresh random seed, recorded in the result).
        selectors: ``--cell`` selectors (:func:`matches`): only those cells are checked.
        scratch: Where re-runs are written (a new, empty or earlier scratch folder, whose finished re-runs are
            reused); default a temporary folder, removed afterwards.
        executor: Where re-runs run (``--jobs``); default one after another in this process.
        device, data_dir: For the re-runs (neither changes a cell's configuration).
        log: Where progress lines go.

    Raises:
        UsageError: for folders that overlap, or a plugin defense not installed (or installed at a version none of
            its cells ran). A cell of another version than the installed one, or one a re-run here cannot check
            (code other than this installation's), is refused alone, with the fix: the table is still made.
        ResultError: when either folder is not a benchmark folder, or nothing in ``folder`` is the contributor's.
    """
    folder, published_dir = Path(folder), Path(against)
    places = [("DIR", folder), ("--against", published_dir)] + ([("--scratch", Path(scratch))] if scratch else [])
    _check_apart(places)
    published = read_published(published_dir)
    sub = join(folder)
    problems = {**sweep_failures(folder), **{p.path.parent.name: p.message for p in sub.collection.problems}}
    own, copies, verdicts = _sort_cells(sub, published, selectors)
    if not own and not verdicts:
        raise ResultError(f"{folder} holds no cell beyond the published benchmark's"
                          + (" among the cells --cell selects" if selectors else "") + ": nothing to verify")
    check_installed(own, sub.cells)
    rerun_dir = Path(scratch) if scratch else Path(tempfile.mkdtemp(prefix="rapt-audit-verify-"))
    try:
        expected: dict[str, BenchCell | None] = {}
        admitted = []
        for cell in own:
            try:  # a cell the published file cannot make is that cell's refusal, never the whole command's
                expected[cell["name"]] = expected_cell(published, cell, out=rerun_dir, data_dir=data_dir,
                                                       device=device)
                why = refusals(published, cell, sub.cells.get(cell["name"]), problems.get(cell["name"]),
                               expected[cell["name"]])
            except (UsageError, DataError) as exc:
                why = [configuration_refusal(exc)]
            if why:
                verdicts.append(Verdict(cell, "refused", tuple(why)))
            else:
                admitted.append(cell)
        seed = secrets.randbelow(2**32) if sample_seed is None else sample_seed
        chosen = choose_sample(admitted, sample, seed)
        pairs = []
        for cell in chosen:  # each cell's code against its own published cells: a bad one costs only itself
            mine = sub.cells[cell["name"]]
            why_not = code_refusal(published, cell, mine, table_codes(cell_attacks(mine)))
            if why_not is None:
                pairs.append((cell, expected[cell["name"]]))
            else:
                verdicts.append(Verdict(cell, "refused", (why_not,)))
        if pairs:
            verdicts += _rerun(pairs, sub.cells, out=rerun_dir, executor=executor, log=log)
        picked = {c["name"] for c in chosen}
        verdicts += [Verdict(c, "unchecked", ("admitted; not in the sample",)) for c in admitted
                     if c["name"] not in picked]
    finally:
        if not scratch:
            shutil.rmtree(rerun_dir, ignore_errors=True)
    verdicts.sort(key=lambda v: (STATUSES.index(v.status), v.cell["name"]))
    return Verification(folder, published_dir, verdicts, seed, len(pairs), copies)


def _sort_cells(sub: Joined, published: Published, selectors: Sequence[str]
                ) -> tuple[list[dict[str, Any]], int, list[Verdict]]:
    """The selected cells of the submission: the contributor's, how many are published cells, and a refusal for
    each copy of a published cell that is not the published result."""
    known = published.cell_ids
    own, copies, verdicts = [], 0, []
    for cell in sub.index["cells"]:
        if not matches(cell, selectors):
            continue
        if cell["cell_id"] not in known:
            own.append(cell)
            continue
        mine, theirs = sub.cells.get(cell["name"]), published.joined.cells.get(known[cell["cell_id"]]["name"])
        if theirs is None and mine is not None:  # a published cell the published folder has not finished
            own.append(cell)
            continue
        copies += 1
        if mine is not None and not same_result(mine, theirs):
            verdicts.append(Verdict(cell, "refused", (
                "published cell: its result is not the published one; a submission adds cells and changes none, so "
                "restore the published result.json or leave the cell out",)))
    return own, copies, verdicts


def _check_apart(places: Sequence[tuple[str, Path]]) -> None:
    """No two of the folders are one, or one inside another: verify writes only to the scratch folder."""
    for i, (name_a, a) in enumerate(places):
        for name_b, b in places[i + 1:]:
            ra, rb = a.resolve(), b.resolve()
            if ra == rb or ra in rb.parents or rb in ra.parents:
                raise UsageError(f"{name_a} {a} and {name_b} {b} overlap; give folders apart from each other "
                                 "(re-runs are written only to the scratch folder, never into the submission or "
                                 "the published folder)")


def _rerun(pairs: Sequence[tuple[dict[str, Any], BenchCell]], submitted: dict[str, RunResult], *, out: Path,
           executor: Executor | None, log: Log | None) -> list[Verdict]:
    """Re-run each ``(indexed cell, cell rebuilt from the published file)`` into ``out`` through the sweep
    machinery (the one way cells run: ``--jobs``, Ray, reuse of finished ones) and judge it."""
    failures: dict[str, str] = {}
    cells = [bench.cell for _, bench in pairs]
    try:
        results = run_sweep(cells, out=out, axes=[Axis("cell", tuple(c.name for c in cells))], log=log,
                            executor=executor)
    except CellsFailed as failed:
        results, failures = failed.results, {cell.name: error for cell, error in failed.failures}
    reruns = {cell.name: result for cell, result in results}
    verdicts = []
    for index, _ in pairs:
        name = index["name"]
        if name in failures:
            verdicts.append(Verdict(index, "failed", (f"the re-run failed: {failures[name]}",)))
        else:
            verdicts.append(_judge(index, submitted[name], reruns[name]))
    return verdicts


def _judge(cell: dict[str, Any], mine: RunResult, again: RunResult) -> Verdict:
    """``verified`` or ``differs`` for one re-run, with what differs and the devices when they differ."""
    devices = (mine.env.get("device"), again.env.get("device"))
    where = f"; submitted on {devices[0]}, re-run on {devices[1]}" if devices[0] != devices[1] else ""
    if again.signature != mine.signature:
        diff = signature_diff(mine.signature, again.signature)
        return Verdict(cell, "differs", (f"the re-run's signature differs ({diff}){where}",))
    comparisons = compare_headlines(mine, again)
    bad = [c for c in comparisons if c.status != "ok"]
    if not bad:
        return Verdict(cell, "verified", (f"{len(comparisons)} headline measure(s) within noise{where}",))
    hint = f" (training may not reproduce across devices: re-run with --device {devices[0]})" if where else ""
    return Verdict(cell, "differs", tuple(describe(c) for c in bad) + ((where.lstrip("; ") + hint,) if where else ()))


def format_verification(v: Verification) -> str:
    """The summary table: one line per contributor cell (its status, then each reason), then the counts."""
    width = max((len(x.cell["name"]) for x in v.verdicts), default=4)
    lines = [f"verify {v.folder} against the published {v.published}:", f"  {'cell':<{width}}  {'status':<9}  detail"]
    for verdict in v.verdicts:
        reasons = verdict.reasons or ("",)
        lines.append(f"  {verdict.cell['name']:<{width}}  {verdict.status:<9}  {reasons[0]}")
        lines += [f"  {'':<{width}}  {'':<9}  {r}" for r in reasons[1:]]
    counts = Counter(x.status for x in v.verdicts)
    lines.append(f"{len(v.verdicts)} cell(s): " + ", ".join(f"{counts[s]} {s}" for s in STATUSES)
                 + f"; {v.published_copies} cell(s) of the published benchmark in the index, not re-run")
    lines.append(f"sample: {v.sampled} re-run(s), drawn with --sample-seed {v.sample_seed} (the same seed draws the "
                 "same cells)")
    lines.append("noise rule: a measure differs when the paired 95 % interval of submitted − re-run excludes 0 "
                 "(same records, same seed), or without per-record outcomes when the values are further apart than "
                 "1.96·sqrt(se₁² + se₂²) + 0.005")
    return "\n".join(lines)


__all__ = ["DEFAULT_SAMPLE", "STATUSES", "Verdict", "Verification", "choose_sample", "compare_headlines", "describe",
           "format_verification", "matches", "verify"]
