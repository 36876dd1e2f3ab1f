"""``rapt-audit check``: the privacy-regression gate's arguments; the gate is :mod:`rapt_audit.reporting.check`."""

from __future__ import annotations

import argparse
import sys

from rapt_audit.api.errors import ResultError
from rapt_audit.reporting import check as check_module
from rapt_audit.reporting.baseline import read_baseline, write_baseline
from rapt_audit.reporting.check import FAILING, format_comparisons, records_note, run_gate
from rapt_audit.reporting.collect import collect
from rapt_audit.reporting.gate_cells import format_plan, summary_line
from rapt_audit.scoring.significance import DEFAULT_PAIRED_TOLERANCE, DEFAULT_TOLERANCE, DEFAULT_Z, one_sided_level


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register the ``check`` sub-command (its description: the gate's rule, from the gate's own docstring)."""
    p = sub.add_parser("check", help="privacy-regression gate: exit 1 when empirical privacy drops beyond noise",
                       description=(check_module.__doc__ or "").split("\n\n", 1)[1],
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("runs", nargs="+", metavar="RUN_DIR", help="run or sweep directories (or result files) to check")
    p.add_argument("--baseline", required=True, metavar="BASELINE.json", help="baseline file to compare against")
    p.add_argument("--write-baseline", action="store_true",
                   help="record RUN_DIRS as the new baseline in BASELINE.json instead of checking")
    p.add_argument("--z", type=float, default=DEFAULT_Z, help=f"noise multiplier of the rule (default {DEFAULT_Z})")
    p.add_argument("--tolerance", type=float, default=DEFAULT_TOLERANCE,
                   help=f"unpaired rule: absolute slack added to the allowed drop (default {DEFAULT_TOLERANCE})")
    p.add_argument("--paired-tolerance", type=float, default=DEFAULT_PAIRED_TOLERANCE,
                   help="paired rule: the drop's lower confidence bound must exceed this to fail "
                        f"(default {DEFAULT_PAIRED_TOLERANCE})")
    p.add_argument("--allow-signature-change", action="store_true",
                   help="compare runs whose comparability signature differs from the baseline's (with a warning)")
    p.add_argument("--allow-dirty-baseline", action="store_true",
                   help="record or read a baseline whose runs came from a tree with uncommitted changes (refused "
                        "by default: a reference names its commit)")
    p.add_argument("--note", default="", help="with --write-baseline: a note stored in the file")


def cmd_check(args: argparse.Namespace) -> int:
    """Entry of ``rapt-audit check``: 0 no regression, 1 regression, 2 unusable input."""
    if args.write_baseline:
        results = write_baseline(args.baseline, args.runs, rule={"z": DEFAULT_Z, "tolerance": DEFAULT_TOLERANCE},
                                 note=args.note, allow_dirty=args.allow_dirty_baseline)
        print(f"recorded {len(results)} run(s) as the baseline in {args.baseline}")
        return 0
    baseline = read_baseline(args.baseline, allow_dirty=args.allow_dirty_baseline)
    coll = collect(args.runs, calibrations=False)
    if coll.problems:  # a gate must not pass over an input it could not read
        raise ResultError("; ".join(p.message for p in coll.problems))
    outcome = run_gate(baseline, [i.result for i in coll.results], z=args.z, tolerance=args.tolerance,
                       paired_tolerance=args.paired_tolerance, allow_signature_change=args.allow_signature_change,
                       baseline_name=args.baseline)
    comparisons = outcome.comparisons
    for w in outcome.warnings:
        print(f"warning: {w}", file=sys.stderr)
    print(f"privacy-regression gate against {args.baseline}: {summary_line(outcome.plans)}")
    if detail := format_plan(outcome.plans):
        print(detail)
    print(f"rule: paired (same records): regression when the "
          f"{one_sided_level(args.z):.1%} lower bound of the drop > {args.paired_tolerance:g}; unpaired (no per-record "
          f"outcomes): when baseline − now > {args.z:g}·sqrt(se_base² + se_now²) + {args.tolerance:g}")
    print(format_comparisons(comparisons))
    bad = [c for c in comparisons if c.status in FAILING]
    if bad:
        print(f"FAILED: {len(bad)} privacy measure(s) regressed, lost records, failed or stopped being measured:",
              file=sys.stderr)
        for c in bad:
            if c.status == "regressed" and c.test == "paired":
                print(f"  {c.run}: {c.attack} {c.metric} fell from {c.base.value:.4f} to {c.new.value:.4f} "
                      f"(drop {c.drop:.4f}; paired lower bound {c.bound:.4f} > {c.allowed:g})", file=sys.stderr)
            elif c.status == "regressed":
                print(f"  {c.run}: {c.attack} {c.metric} fell from {c.base.value:.4f} to {c.new.value:.4f} "
                      f"(drop {c.drop:.4f} > allowed {c.allowed:.4f})", file=sys.stderr)
            elif c.status == "records":
                print(f"  {c.run}: {c.attack} {c.metric}: {records_note(c)}", file=sys.stderr)
            elif c.status == "failed":
                print(f"  {c.run}: {c.attack} {c.metric} was measured in the baseline and now {c.new}", file=sys.stderr)
            else:
                print(f"  {c.run}: {c.attack} {c.metric} is no longer measured ({c.new})", file=sys.stderr)
        return 1
    fresh = sum(1 for p in outcome.plans if not p.stale and p.new is None)
    print(f"passed: {len(comparisons)} privacy measure(s) within noise of the baseline" +
          (f"; {fresh} baseline cell(s) unchanged by construction" if fresh else ""))
    return 0


__all__ = ["add_parser", "cmd_check"]
