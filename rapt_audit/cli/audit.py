"""``rapt-audit audit``: a statistically valid lower bound on a defense's privacy loss, against its claim."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rapt_audit.api.files import write_json_atomic
from rapt_audit.api.outputs import check_outputs
from rapt_audit.api.params import coerce
from rapt_audit.audit.black_box import AuditReport, audit_defense, audited
from rapt_audit.cli.options import defense_params

EPILOG = """examples:
  rapt-audit audit --defense embedding --set eta=5 --samples 2000 --pairs 2
  rapt-audit audit --defense t2t --set eta=5 --samples 2000 --pairs 2 --format json --out t2t-audit.json
Each pair of inputs x, x' gets a lower bound on the mechanism's privacy loss, valid at confidence
1 - alpha for the whole audit, next to the claim eta * d(x, x') (epsilon/sensitivity * L1 for the
Laplace releases of dpnr and cape). VIOLATION (exit 1) proves a bug;
ok is not a proof of privacy; unauditable means the claim is above what --samples can falsify.
Audited: {audited}, and any plugin that declares or implements an audit protocol
(rapt_audit.plugin.WordMechanismDefense, DchiTextDefense; rapt_audit.plugin.AUDIT_PROTOCOLS lists them)."""


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register the ``audit`` sub-command."""
    covered = audited()  # the built-ins only: --help imports no third-party plugin
    listed = ", ".join(f"{name} ({what})" for name, what in covered.items())
    p = sub.add_parser("audit", help="empirical lower bound on a defense's privacy loss vs its claim",
                       epilog=EPILOG.format(audited=listed), formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--defense", required=True,
                   help=f"defense to audit: {', '.join(covered)}, or any plugin that declares or implements an "
                        "audit protocol (WordMechanismDefense, DchiTextDefense)")
    p.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                   help="defense parameter, e.g. eta=5")
    p.add_argument("--samples", type=int, default=10_000,
                   help="releases per input for choosing the event, and as many for bounding it (default 10000)")
    p.add_argument("--pairs", type=int, default=6, help="pairs of inputs audited (default 6)")
    p.add_argument("--search", type=int, default=8,
                   help="random word pairs screened for the most suspicious one, which is audited too (default 8)")
    p.add_argument("--alpha", default="0.05", help="error level of the whole audit (default 0.05)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--model", default="minilm", help="minilm (bundled), a Hugging Face id or a local directory")
    p.add_argument("--format", choices=["table", "json"], default="table")
    p.add_argument("--out", default=None, help="also write the JSON report to this file")


def format_report(report: AuditReport) -> str:
    """A plain-text table: one line per pair, the claim next to the lower bound, then the verdict."""
    lines = [f"audit of {report.defense} at {report.parameter}={report.scale:g}: {report.audits}; "
             f"{report.samples} + {report.samples} releases per input, alpha={report.alpha:g} over "
             f"{sum(p.alpha > 0 for p in report.pairs)} pair(s)",
             f"{'pair':<52} {'d(x,x′)':>8} {'claim':>8} {'ε lower':>8} {'ceiling':>8}  verdict"]
    for p in report.pairs:
        lines.append(f"{p.label[:52]:<52} {p.distance:>8.3f} {p.claim:>8.2f} {p.lower_bound:>8.3f} "
                     f"{p.ceiling:>8.2f}  {p.verdict}")
    lines.append(f"verdict: {report.verdict} ({report.seconds:.0f} s)")
    if any(p.verdict == "unauditable" for p in report.pairs):
        lines.append("unauditable: the claim is above the largest bound these samples can give; lower eta or raise "
                     "--samples to test it")
    return "\n".join(lines)


def cmd_audit(args: argparse.Namespace) -> int:
    """Run the audit; exit 1 when a pair's lower bound exceeds its claim."""
    params = defense_params(args.sets)
    alpha = coerce(args.alpha, float, key="alpha")
    check_outputs([("--out", args.out)])  # the output rule, before the audit's work: a file, or a FIFO
    report = audit_defense(args.defense, params, samples=args.samples, pairs=args.pairs, search=args.search,
                           alpha=alpha, seed=args.seed, model=args.model)
    document = report.to_json()
    if args.out:
        write_json_atomic(Path(args.out), document)
    print(json.dumps(document, indent=2) if args.format == "json" else format_report(report))
    if report.verdict == "VIOLATION":
        print("rapt-audit: a lower bound exceeds its claim: the mechanism does not deliver its stated privacy",
              file=sys.stderr)
        return 1
    return 0
