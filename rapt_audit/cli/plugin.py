"""``rapt-audit plugin check|new``: the conformance battery on an installed plugin, and a new plugin's skeleton."""

from __future__ import annotations

import argparse
import sys

from rapt_audit.api.errors import UsageError
from rapt_audit.cli.options import defense_params
from rapt_audit.plugin_kit.conformance import (
    SPLIT_SIZES,
    ConformanceReport,
    check_plugin,
    format_verdict,
    installed_plugins,
    kinds_of,
)
from rapt_audit.plugin_kit.skeleton import new_plugin

#: Exit status of ``plugin check`` when a plugin broke a rule (as ``check`` on a regression, ``audit`` on a violation).
EXIT_RULE_FAILED = 1

EPILOG = """examples:
  rapt-audit plugin check identity
  rapt-audit plugin check random_guess --defense t2t
  rapt-audit plugin new defense my_defense --dir plugins
check runs a plugin as installed (pip install it first) on the synthetic demo corpus at the smoke
profile and prints PASS, FAIL (what was expected, what came back) or SKIP (why) for each rule; exit 0
when no rule failed, 1 when one did, 2 for an unknown name. Run it in your plugin's CI.
new writes a package (pyproject.toml with the entry point, the module, a test, a README) into
DIR/NAME-with-dashes, never over an existing folder; pip install --no-deps -e it and it passes check."""


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register the ``plugin`` sub-command and its ``check`` and ``new`` actions."""
    p = sub.add_parser("plugin", help="check an installed plugin against the contract, or write a new plugin",
                       epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    actions = p.add_subparsers(dest="plugin_command", required=True, metavar="{check,new}")
    check = actions.add_parser("check", help="run the conformance battery on installed plugins")
    check.add_argument("names", nargs="*", metavar="NAME", help="defense or attack names (rapt-audit ls)")
    check.add_argument("--all-installed", dest="all_installed", action="store_true",
                       help="every third-party plugin installed through an entry point")
    check.add_argument("--defense", default=None,
                       help="for an attack: the defense whose release it attacks (default identity, else the first "
                            "that releases what the attack needs)")
    check.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                       help="a parameter of the checked plugin (on top of its smoke profile)")
    new = actions.add_parser("new", help="write the skeleton of a plugin package")
    new.add_argument("kind", choices=["defense", "attack"])
    new.add_argument("name", help="the plugin's name: lower-case letters, digits and underscores")
    new.add_argument("--dir", default=".", help="where the package folder goes (default: here)")


def cmd_plugin(args: argparse.Namespace) -> int:
    """Run ``plugin check`` or ``plugin new``."""
    if args.plugin_command == "new":
        folder = new_plugin(args.kind, args.name, args.dir)
        print(f"wrote {folder}: pip install --no-deps -e {folder}, then rapt-audit plugin check {args.name}")
        return 0
    return _check(args)


def _check(args: argparse.Namespace) -> int:
    if args.all_installed == bool(args.names):
        raise UsageError("name the plugins to check, or give --all-installed (not both)")
    targets = installed_plugins() if args.all_installed else [(k, n) for n in args.names for k in kinds_of(n)]
    if not targets:
        print("no third-party plugin is installed (entry-point groups rapt_audit.defenses, rapt_audit.attacks)")
        return 0
    params = defense_params(args.sets)
    print(f"conformance of {len(targets)} plugin(s) on the synthetic demo corpus ({SPLIT_SIZES.victim_train} victim "
          f"train, {SPLIT_SIZES.victim_test} test, {SPLIT_SIZES.attacker_train} + {SPLIT_SIZES.attacker_valid} "
          "attacker records), smoke profile, CPU")
    reports: list[ConformanceReport] = []
    for kind, name in targets:
        print(f"\n{kind} {name}", flush=True)
        report = check_plugin(kind, name, params=params, defense=args.defense,
                              on_verdict=lambda v: print(format_verdict(v), flush=True))
        print(f"{report.header()}: {report.summary()}")
        reports.append(report)
    failed = [r for r in reports if not r.passed]
    if failed:
        print(f"rapt-audit: {len(failed)} plugin(s) broke a rule: "
              + ", ".join(f"{r.name} ({', '.join(v.rule for v in r.failed)})" for r in failed), file=sys.stderr)
        return EXIT_RULE_FAILED
    return 0


__all__ = ["EXIT_RULE_FAILED", "add_parser", "cmd_plugin"]
