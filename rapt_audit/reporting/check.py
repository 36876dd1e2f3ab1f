"""``rapt-audit check``: the privacy-regression gate for CI.

A baseline file holds the full result documents of reference runs. Each new run is matched to the
baseline run of the same cell (the hash of its canonical settings, recomputed from each stored
configuration: defense and its arguments by value with their defaults, data, splits, model, profile,
attacks, seed; so a baseline recorded before ids were canonical still pairs), and every empirical-privacy
measure of every attack is compared.

The paired rule (used whenever both results keep per-record outcomes). A matched run scores the same
records in the same order as its baseline, so the two measurements are *paired*, not independent:
comparing two intervals as if they were independent would let a drop of two or three points pass at
the smoke size. For a measure where higher is better for the defender, the drop ``b − x`` is
recomputed on bootstrap resamples of the records (the same resampled records for both runs), and the
change is a **regression** when the one-sided lower confidence bound of the drop (level Φ(z), 97.5 %
for z = 1.96) exceeds a small tolerance (default 0.001, far below any change worth reporting and far
above floating-point noise)::

    quantile_{1 − Φ(z)}( drop over paired resamples )  >  paired tolerance

A rerun of unchanged code gives the same per-record outcomes, hence a drop of exactly 0, and passes.
A new run that scored fewer (or other) records than its baseline fails: fewer records is a weaker
check, never a wider interval.

The unpaired rule (a fallback for baselines recorded before results kept per-record outcomes, and for
measures that keep none, such as the mutual-information bound): each standard error is read off its
95 % interval as ``se = (ci_high − ci_low) / (2 · 1.96)``, and the change is a regression when::

    b − x  >  z · sqrt(se_b² + se_x²)  +  tolerance          (defaults: z = 1.96, tolerance = 0.005)

An attack that was measured in the baseline but is skipped or absent now is also a regression (the
gate must not pass because a check stopped running), and so is one that now failed (raised, or broke
its contract: the result holds ``{"failed": message}``). Gains are reported, never failures. Both rules
are coded once, in rapt_audit/scoring/significance.py, with the claims' and the benchmark's.

Per component (issue #62): each baseline cell is compared only where the code here can have moved it. A
cell whose core, defense and attacks hash alike here is *unchanged by construction* and needs no new run
(given anyway, it is compared as usual); a stale defense (or core) has every measure compared; when only
some attacks are stale, only theirs and the worst case are. A stale cell without a new run is unusable
input, and the error names the cell and the command that runs it. A baseline signed before per-component
digests is one component, stale whenever the package's code moved (:mod:`rapt_audit.reporting.gate_cells`).

Exit codes: 0 no regression, 1 at least one regression, 2 unusable input (a stale baseline run with no
matching new run, a corrupt file, or — unless ``--allow-signature-change`` — a new run whose
comparability signature differs from its baseline's in more than its code).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Collection, Sequence

from rapt_audit.api.components import CellCode, current_code
from rapt_audit.api.errors import ResultError, UsageError
from rapt_audit.api.plugins import load
from rapt_audit.api.types import AttackFailure, AttackResult, Estimate
from rapt_audit.pipeline.config import settings_id
from rapt_audit.pipeline.results import RunResult, signature_fields
from rapt_audit.reporting.baseline import BASELINE_SCHEMA, read_baseline, run_label, write_baseline
from rapt_audit.reporting.gate_cells import CellPlan, missing_message, new_run_warning, plan_cells
from rapt_audit.scoring.metrics import METRICS
from rapt_audit.scoring.significance import (
    DEFAULT_PAIRED_TOLERANCE,
    DEFAULT_TOLERANCE,
    DEFAULT_Z,
    compare_estimates,
    compare_paired,
    seed_of,
)

#: Statuses that fail the gate.
FAILING = frozenset({"regressed", "missing", "records", "failed"})


@dataclass(frozen=True)
class Comparison:
    """One measure of one attack of one run, against its baseline."""

    run: str
    attack: str
    metric: str
    base: Estimate | None
    new: Estimate | str | None
    allowed: float
    status: str  # "ok", "improved", "regressed", "missing", "failed", "records" (other records than the baseline's)
    test: str = "unpaired"  # "paired" (record by record) or "unpaired" (two intervals)
    bound: float = math.nan  # paired: the one-sided lower confidence bound of the drop

    @property
    def drop(self) -> float:
        """How much worse the new value is (positive = less private), NaN when not measured now."""
        if self.base is None or not isinstance(self.new, Estimate):
            return math.nan
        return self.base.value - self.new.value


def _privacy_measures(outcome: Any) -> dict[str, tuple[Estimate, bool]]:
    """The headline empirical privacy plus every attack metric registered as a privacy measure."""
    load()  # plugins register the metrics they introduce (reconstruction_mse, ...)
    measures = {"empirical_privacy": (outcome.empirical_privacy, True)}
    for name, est in outcome.metrics.items():
        if name in METRICS and METRICS.get(name).kind == "privacy":
            measures[name] = (est, METRICS.get(name).higher_is_better)
    return measures


def compare_measure(label: str, attack: str, metric: str, est: Estimate, new_est: Estimate, *, higher_is_better: bool,
                    seed_key: str, z: float = DEFAULT_Z, tolerance: float = DEFAULT_TOLERANCE,
                    paired_tolerance: float = DEFAULT_PAIRED_TOLERANCE) -> Comparison:
    """One measure of one cell, ``new_est`` against ``est``: paired where both keep per-record outcomes (the
    bootstrap seeded by ``seed_key``, so a comparison is repeatable), else unpaired; a new estimate over fewer
    records is status ``records`` (a weaker check, never a wider interval)."""
    if est.per_record is not None and new_est.per_record is not None:
        status, lower = compare_paired(est, new_est, higher_is_better=higher_is_better, z=z,
                                       tolerance=paired_tolerance, seed=seed_of(seed_key))
        return Comparison(label, attack, metric, est, new_est, paired_tolerance, status, "paired", lower)
    if new_est.n < est.n:
        return Comparison(label, attack, metric, est, new_est, math.nan, "records")
    status, allowed = compare_estimates(est, new_est, higher_is_better=higher_is_better, z=z, tolerance=tolerance)
    return Comparison(label, attack, metric, est, new_est, allowed, status)


def compare_runs(base: RunResult, new: RunResult, *, z: float = DEFAULT_Z, tolerance: float = DEFAULT_TOLERANCE,
                 paired_tolerance: float = DEFAULT_PAIRED_TOLERANCE,
                 attacks: Collection[str] | None = None) -> list[Comparison]:
    """Every privacy comparison of ``new`` against ``base`` (same cell), each by :func:`compare_measure`;
    ``attacks``: only those attacks' measures (None: every attack's)."""
    out = []
    label = run_label(base)
    for attack, outcome in base.attacks.items():
        if not isinstance(outcome, AttackResult) or (attacks is not None and attack not in attacks):
            continue  # skipped or failed in the baseline (nothing measured to defend), or not asked for
        now = new.attacks.get(attack)
        for metric, (est, higher) in _privacy_measures(outcome).items():
            if isinstance(now, AttackFailure):
                out.append(Comparison(label, attack, metric, est, f"failed: {now.message}", math.nan, "failed"))
                continue
            if not isinstance(now, AttackResult):
                reason = "not run" if now is None else f"skipped: {now.reason}"
                out.append(Comparison(label, attack, metric, est, reason, math.nan, "missing"))
                continue
            new_est = now.empirical_privacy if metric == "empirical_privacy" else now.metrics.get(metric)
            if new_est is None:
                out.append(Comparison(label, attack, metric, est, "not reported", math.nan, "missing"))
                continue
            out.append(compare_measure(label, attack, metric, est, new_est, higher_is_better=higher,
                                       seed_key=f"{base.cell_id}|{attack}|{metric}", z=z, tolerance=tolerance,
                                       paired_tolerance=paired_tolerance))
    return out


def signature_changes(a: str, b: str) -> dict[str, tuple[str | None, str | None]]:
    """The fields of two signatures that differ: field → (value in ``a``, value in ``b``)."""
    pa, pb = signature_fields(a), signature_fields(b)
    return {k: (pa.get(k), pb.get(k)) for k in dict.fromkeys(list(pa) + list(pb)) if pa.get(k) != pb.get(k)}


def signature_diff(a: str, b: str) -> str:
    """The fields of two signatures that differ, as ``field: a → b``."""
    return ", ".join(f"{k}: {x} → {y}" for k, (x, y) in signature_changes(a, b).items())


@dataclass(frozen=True)
class GateOutcome:
    """What :func:`run_gate` found: the comparisons, the warnings and each baseline cell's plan."""

    comparisons: list[Comparison]
    warnings: list[str]
    plans: list[CellPlan]


def gate(baseline: Sequence[RunResult], runs: Sequence[RunResult], **kwargs: Any) -> tuple[list[Comparison],
                                                                                          list[str]]:
    """:func:`run_gate`'s comparisons and warnings."""
    out = run_gate(baseline, runs, **kwargs)
    return out.comparisons, out.warnings


def run_gate(baseline: Sequence[RunResult], runs: Sequence[RunResult], *, z: float = DEFAULT_Z,
             tolerance: float = DEFAULT_TOLERANCE, paired_tolerance: float = DEFAULT_PAIRED_TOLERANCE,
             allow_signature_change: bool = False, baseline_name: str = "the baseline",
             code_here: Callable[[str, list[str]], CellCode] = current_code) -> GateOutcome:
    """Compare ``runs`` to ``baseline``, per component (the module's rule; ``code_here(defense, attacks)``: the
    digests the code here gives a cell).

    Raises:
        ResultError: when a stale baseline run has no new run of its cell, or (unless
            ``allow_signature_change``) when a matched pair's signatures differ in more than ``code:``.
    """
    if z < 0 or tolerance < 0 or paired_tolerance < 0:
        raise UsageError(f"--z, --tolerance and --paired-tolerance must not be negative (got {z}, {tolerance}, "
                         f"{paired_tolerance})")
    plans = plan_cells(baseline, runs, code_here=code_here)
    missing = missing_message(plans, baseline_name)
    if missing:
        raise ResultError(missing)
    comparisons, warnings = [], []
    for plan in plans:
        b, new = plan.base, plan.new
        if new is None:
            continue  # unchanged by construction: nothing the change touched runs in this cell
        if new.signature != b.signature:
            diff = signature_diff(b.signature, new.signature)
            if set(signature_changes(b.signature, new.signature)) == {"code"}:  # what the gate is for
                where = f", stale here: {', '.join(plan.components())}" if plan.stale else ""
                warnings.append(f"{run_label(b)}: the code changed since the baseline ({diff}){where}; compared")
            elif not allow_signature_change:
                raise ResultError(
                    f"{run_label(b)}: the comparability signature changed ({diff}), so the numbers are not "
                    f"comparable. If the change is intended, record a new baseline with rapt-audit check "
                    f"--write-baseline, or compare anyway with --allow-signature-change")
            else:
                warnings.append(f"{run_label(b)}: signature changed ({diff}); compared anyway "
                                "(--allow-signature-change); refresh the baseline when the change is intended")
        other_code = new_run_warning(plan)
        if other_code:
            warnings.append(other_code)
        comparisons += compare_runs(b, new, z=z, tolerance=tolerance, paired_tolerance=paired_tolerance,
                                    attacks=plan.compared())
    # A baseline recorded before results kept per-record outcomes (not a measure that keeps none, such
    # as the mutual-information bound): say that the weaker rule was used, and how to get the paired one.
    unpaired = sorted(plan.label for plan in plans if plan.new is not None and not any(
        isinstance(o, AttackResult) and o.empirical_privacy.per_record is not None for o in plan.base.attacks.values()))
    if unpaired:
        warnings.append(f"{baseline_name} keeps no per-record outcomes for " + "; ".join(unpaired) +
                        ", so those runs were compared as two independent intervals, which misses drops of a "
                        "few points; record the baseline again with this version (rapt-audit check "
                        "--write-baseline) to get the paired test")
    if any(plan.stale.legacy for plan in plans):
        warnings.append(f"{baseline_name} was signed before per-component digests, so each of its cells is one "
                        "component (all) and every one is re-run and compared; record it again with this version "
                        "(rapt-audit check --write-baseline) to gate only what a change can have moved")
    cells = {settings_id(b.config) for b in baseline}
    unmatched = sorted({run_label(r) for r in runs if settings_id(r.config) not in cells})
    if unmatched:
        warnings.append("not in the baseline, so not gated: " + "; ".join(unmatched))
    return GateOutcome(comparisons, warnings, plans)


def format_comparisons(comparisons: Sequence[Comparison]) -> str:
    """A table of every comparison, regressions first."""
    order = {"regressed": 0, "failed": 1, "records": 2, "missing": 3, "improved": 4, "ok": 5}
    header = (f"{'status':<10} {'run':<34} {'attack / measure':<40} {'baseline':>9} {'now':>9} {'drop':>8} "
              f"{'allowed':>8}  test")
    lines = [header]
    for c in sorted(comparisons, key=lambda c: (order[c.status], c.run, c.attack, c.metric)):
        measure = c.attack if c.metric == "empirical_privacy" else f"{c.attack} / {c.metric}"
        now = f"{c.new.value:.4f}" if isinstance(c.new, Estimate) else "—"
        drop = "" if math.isnan(c.drop) else f"{c.drop:+.4f}"
        allowed = "" if math.isnan(c.allowed) else f"{c.allowed:.4f}"
        base = f"{c.base.value:.4f}" if c.base is not None else "—"
        status = c.status.upper() if c.status in FAILING else c.status
        line = f"{status:<10} {c.run[:34]:<34} {measure[:40]:<40} {base:>9} {now:>9} {drop:>8} {allowed:>8}"
        if c.test == "paired" and not math.isnan(c.bound):
            line += f"  paired: drop ≥ {c.bound:+.4f}"
        elif c.status in {"ok", "improved", "regressed"}:
            line += "  unpaired"
        if c.status in {"missing", "failed"}:
            line += f"   ({c.new})"
        elif c.status == "records":
            line += f"   ({records_note(c)})"
        lines.append(line)
    return "\n".join(lines)


def records_note(c: Comparison) -> str:
    """Why a comparison has status ``records``: the counts of records scored now and in the baseline."""
    def count(est: Estimate) -> int:
        return len(est.per_record) if est.per_record is not None else est.n

    assert c.base is not None and isinstance(c.new, Estimate)
    return (f"scored {count(c.new)} records, the baseline {count(c.base)}: the same cell must score the same "
            "records")


__all__ = ["BASELINE_SCHEMA", "FAILING", "Comparison", "GateOutcome", "compare_measure", "compare_runs",
           "format_comparisons", "gate", "read_baseline", "records_note", "run_gate", "run_label", "signature_changes",
           "signature_diff", "write_baseline"]
