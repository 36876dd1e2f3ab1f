"""``benchmark run --dry-run``'s listing: every cell with its status, estimated cost and where the estimate comes
from, the total (and with ``--time-budget``, how many cells would start in it), and the disk the cells will need.

Every figure is the one estimator's (:func:`~rapt_audit.benchmark.plan.estimate_costs` on
:mod:`rapt_audit.pipeline.estimates`), which the run's time budget and its progress line use too, so what the dry
run says is what the run will judge by; the disk line is :func:`~rapt_audit.benchmark.holdings.disk_needed`'s.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Sequence

from rapt_audit.benchmark.plan import BenchCell, CellCost, stale_summary
from rapt_audit.benchmark.spec import Benchmark
from rapt_audit.pipeline.estimates import duration
from rapt_audit.pipeline.time_budget import cells_that_fit

#: How the summary names each kind of evidence (:attr:`~rapt_audit.pipeline.estimates.Estimate.basis`).
BASES = {"measured": "measured", "figure": "costs.toml", "others": "other defenses' costs", "fallback":
         "another service's costs.toml figure", "guess": "a flat guess", "given": "the caller's", "sweep":
         "the sweep's mean", "none": "no estimate"}


def dry_run_text(bench: Benchmark, cells: Sequence[BenchCell], costs: Sequence[CellCost], *, out: Path,
                 jobs: int = 1, time_budget: float | None = None, measured: bool = True, disk: str | None = None,
                 problems: Sequence[str] = (), notes: Sequence[str] = ()) -> str:
    """The dry run's listing of ``cells`` and their ``costs``: the benchmark, every cell with its status and
    estimated cost and its source, the total and what each estimate rests on, what fits in ``time_budget`` on
    ``jobs`` workers (``measured``: whether any cell has finished to judge by), the ``disk`` line, then ``notes`` (what the run would say here) and ``problems`` (what
    stops it)."""
    lines = [f"benchmark {bench.name} ({bench.path}, sha256 {bench.sha256[:12]}): profile {bench.profile}, "
             f"model {bench.model}, seeds {', '.join(map(str, bench.seeds))}, service {bench.service_text}",
             "datasets: " + "; ".join([f"utility {', '.join(bench.tasks)}"] +
                                      [f"{f} {d} ({', '.join(bench.family_attacks.get(f, ())) or 'no attack'})"
                                       for f, d in bench.datasets.items()])]
    lines += [f"not run: {f} attacks ({', '.join(a)}): [datasets] names no {f} dataset"
              for f, a in bench.not_run.items()]
    width = max((len(c.name) for c in cells), default=4)
    lines += [f"{len(cells)} cells in {out}:", f"  {'cell':<{width}}  {'status':<8}  {'cost':>7}  estimated from"]
    for cell, cost in zip(cells, costs):
        lines.append(f"  {cell.name:<{width}}  {cost.status:<8}  {duration(cost.seconds):>7}  {cost.source}")
    todo = [c for c in costs if c.status in ("pending", "stale")]
    total = sum(c.seconds for c in todo)
    share = f"; with --jobs {jobs}, about {duration(total / jobs)}" if jobs > 1 else ""
    stale = [c for c in costs if c.status == "stale"]
    lines.append(f"total: {len(cells)} cells, {len(cells) - len(todo)} finished, {len(todo)} to run "
                 f"({len(stale)} of them stale: other code measured them), about "
                 f"{duration(total)} one after another{share}")
    pending = Counter(c.basis for c in todo if c.status == "pending")
    if pending:
        lines.append("estimates of the pending cells: " + ", ".join(
            f"{n} from {BASES.get(basis, basis)}" for basis, n in pending.most_common()) +
            " (each learns from the first finished cell of its defense and dataset, in the run too)")
    if stale:
        lines.append("stale by component: " + stale_summary(c.stale for c in stale))
    if time_budget is not None and todo:
        fit = cells_that_fit([c.seconds for c in todo], budget=time_budget, workers=jobs, measured=measured)
        rest = (f"; the other {len(todo) - fit} wait for the next call (exit 75), which goes on" if fit < len(todo)
                else "")
        lines.append(f"time budget: {time_budget:g} s on {jobs} worker(s) starts about {fit} of the {len(todo)} "
                     f"cells to run, by these estimates{rest}")
    if disk:
        lines.append(disk)
    lines += [f"note: {n}" for n in notes] + [f"problem: {p}" for p in problems]
    lines.append("dry run: nothing was run or written" + (" (fix the problems above first)" if problems else
                                                           " (drop --dry-run to run it)"))
    return "\n".join(lines)


__all__ = ["BASES", "dry_run_text"]
