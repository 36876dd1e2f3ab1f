"""``rapt-audit bundle``: pack what an offline GPU machine needs to run one rapt-audit command.

The command to run there follows ``--``; a ``run`` is parsed by the ``run`` sub-command's own
parser and configuration rules, so the data it reads can be worked out exactly as a run would.
"""

from __future__ import annotations

import argparse
import re
import shlex
from pathlib import Path
from typing import Any

from rapt_audit.api.errors import UsageError
from rapt_audit.benchmark.plan import plan_cells
from rapt_audit.benchmark.run import default_out
from rapt_audit.benchmark.spec import shipped
from rapt_audit.benchmark.validate import load_benchmark
from rapt_audit.bundle.packing import DEFAULT_MAX_MIB, pack
from rapt_audit.cli.options import number
from rapt_audit.pipeline import sweep
from rapt_audit.pipeline.cell_limit import check_max_cells
from rapt_audit.pipeline.config import RunConfig, build_config

EPILOG = """The command after -- is what runs on the GPU machine, e.g. the paper-profile RAPT audit:
  rapt-audit bundle --out bundle -- run --defense rapt --attacks all --dataset sst2 --profile paper
  rapt-audit bundle --out bundle --dry-run -- run --defense t2t --sweep eta=25,75,inf --out runs/t2t   # the plan only
Copy the folder (at most --max-mib, default 60 MiB) to the GPU machine and run there:
  sh bundle/run.sh                 verify, install, restore the model, run; results to $OUT
  sh bundle/run.sh --check         verify, install and check the requirements only
Data: the run's dataset, WikiText-2 (public text) and, for the trained NER attacks, CoNLL-2003, read
from --data-dir of the run or $RAPT_AUDIT_DATA; --data NAMES ships those instead, --data none nothing.
Wheels: downloaded once for --python (network) into $RAPT_AUDIT_CACHE/bundle-wheels, or --wheels-from DIR.
--no-spacy leaves spaCy out and ships its analyses of the run's texts instead (room for results)."""

#: The ``run`` flags that reach the configuration, as ``rapt-audit run`` reads them (cli.main.cmd_run).
RUN_KEYS = ("defense", "attacks", "dataset", "model", "service_model", "profile", "seed", "out", "device", "precision",
            "data_dir", "force", "release_cache", "attack_timeout")


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register the ``bundle`` sub-command (after ``run``, whose parser it reuses)."""
    p = sub.add_parser("bundle", help="pack an offline GPU machine's needs for one command into ≤ 60 MiB",
                       epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="the bundle folder to write (copy it whole to the GPU machine)")
    p.add_argument("--max-mib", dest="max_mib", type=number, default=DEFAULT_MAX_MIB,
                   help=f"fail when the folder exceeds this many MiB (default {DEFAULT_MAX_MIB:g})")
    p.add_argument("--python", default="3.12", help="the GPU machine's Python, MAJOR.MINOR (default 3.12)")
    p.add_argument("--wheels-from", dest="wheels_from", default=None, metavar="DIR",
                   help="ship exactly the wheels in DIR (for that Python) instead of downloading them")
    p.add_argument("--include", action="append", default=[], metavar="DIST,...",
                   help="also ship these distributions (when the GPU image lacks one the run needs)")
    p.add_argument("--provided", default=None, metavar="DIST,...|FILE",
                   help="the distributions the GPU image has, or a file listing them one per line (`pip list "
                        "--format=freeze` there, or image-distributions.txt from `sh run.sh --check`); default: "
                        "torch, transformers, peft, scikit-learn, pandas, matplotlib, jinja2, tqdm, pytest, hypothesis, "
                        "numpy, scipy and their dependencies")
    p.add_argument("--data", default=None, metavar="NAME,...",
                   help="datasets to ship instead of those the run reads (none: no data)")
    p.add_argument("--no-spacy", dest="no_spacy", action="store_true",
                   help="ship spaCy's analyses of every text the run reads (made here, a few minutes) instead of "
                        "spaCy and its model: about 19 MiB less; the ner_spacy attack is then skipped there")
    p.add_argument("--preset", default="9e", help="xz preset, 0-9 with optional e (default 9e: smallest)")
    p.add_argument("--no-strip", dest="strip", action="store_false",
                   help="ship shared libraries as their wheels hold them (much larger; for a packing machine "
                        "without binutils' strip)")
    p.add_argument("--force", action="store_true",
                   help="replace an earlier bundle in --out (a folder of anything else is refused)")
    p.add_argument("--dry-run", dest="dry_run", action="store_true",
                   help="print what would be packed (model, distributions, data files); download and write nothing")
    # dest "remote": "command" is the top-level parser's name for the sub-command
    p.add_argument("remote", nargs=argparse.REMAINDER, metavar="-- COMMAND", help="the rapt-audit command to run there")
    p.set_defaults(subcommands=sub.choices)


def _names(values: list[str] | str | None) -> list[str]:
    """``["a,b", "c"]`` or ``"a,b"`` → ``["a", "b", "c"]``."""
    if values is None:
        return []
    items = [values] if isinstance(values, str) else values
    return [n.strip() for item in items for n in item.split(",") if n.strip()]


def provided_names(value: str | None) -> list[str] | None:
    """``--provided``: a comma-separated list, or a file of requirement lines (``name==version``)."""
    if value is None:
        return None
    path = Path(value)
    if not path.is_file():
        return _names(value)
    lines = [line.strip() for line in path.read_text(encoding="utf-8").splitlines()]
    return [re.split(r"[=<>~!@ ;\[]", line)[0] for line in lines if line and not line.startswith(("#", "-"))]


def run_configs(command: list[str], subcommands: dict[str, Any]) -> tuple[list[str], list[RunConfig]]:
    """The command as it will run there, and the configurations it makes (one per sweep cell; none for others).

    ``--data-dir`` is dropped (the data folder there is the bundle's); what cannot travel is refused.

    Raises:
        UsageError: for an empty or unknown command, or options that name files of this machine.
    """
    if not command or command[0] not in subcommands or command[0] == "bundle":
        known = ", ".join(sorted(n for n in subcommands if n != "bundle"))
        raise UsageError(f"give the rapt-audit command to run on the GPU machine after --, e.g. `-- run --defense "
                         f"rapt --attacks all` (one of: {known})")
    if command[:2] == ["benchmark", "run"]:
        return _without_data_dir(command), benchmark_configs(command, subcommands)
    if command[0] != "run":
        return list(command), []
    try:
        args = subcommands["run"].parse_args(command[1:])
    except SystemExit:
        raise UsageError("the command after -- is not a valid `rapt-audit run` (see the message above)") from None
    if args.config:
        raise UsageError("--config FILE is not carried by a bundle; give its settings as --set KEY=VALUE")
    if args.executor != "local":
        raise UsageError("--executor ray needs Ray, which a bundle does not carry; run the sweep in-process")
    if getattr(args, "out", None) and Path(args.out).is_absolute():
        raise UsageError(f"--out {args.out}: give a relative folder; on the GPU machine it is made in the results "
                         "folder that is packed into the results tar")
    cli = {k: getattr(args, k) for k in RUN_KEYS if hasattr(args, k)}
    config = build_config(file=None, cli=cli, sets=args.sets)
    configs = [config]
    if args.sweeps:
        axes = sweep.parse_axes(args.sweeps)
        out = Path(config.out) if config.out else sweep.default_sweep_dir(config, axes)
        configs = [cell.config for cell in sweep.expand(axes=axes, file=None, cli=cli, sets=args.sets, out=out,
                                                        max_cells=args.max_cells)]
    return _without_data_dir(command), configs


def benchmark_configs(command: list[str], subcommands: dict[str, Any]) -> list[RunConfig]:
    """The configuration of every cell of ``benchmark run NAME``, so that the data and (with ``--no-spacy``)
    the texts a benchmark's cells read are packed exactly as for a sweep.

    Raises:
        UsageError: for a benchmark that is not shipped (a file of this machine does not travel), an
            absolute ``--out`` or Ray.
    """
    try:
        args = subcommands["benchmark"].parse_args(command[1:])
    except SystemExit:
        raise UsageError("the command after -- is not a valid `rapt-audit benchmark run` (see the message above)") \
            from None
    if args.benchmark not in shipped():
        raise UsageError(f"benchmark {args.benchmark!r}: a bundle runs a benchmark shipped with rapt-audit (one of: "
                         f"{', '.join(shipped())}); a file of this machine does not travel, so add it to benchmarks/ "
                         "and pack again")
    if args.executor != "local":
        raise UsageError("--executor ray needs Ray, which a bundle does not carry; run the cells in-process")
    if args.out and Path(args.out).is_absolute():
        raise UsageError(f"--out {args.out}: give a relative folder here; to go on with the cells of an earlier call "
                         "there, give its absolute path in the command after run.sh's -- (docs/gpu.md)")
    bench = load_benchmark(args.benchmark, data_dir=args.data_dir, max_cells=check_max_cells(args.max_cells))
    out = Path(args.out) if args.out else default_out(bench)
    return [c.cell.config for c in plan_cells(bench, out=out, data_dir=args.data_dir, device=args.device)]


def _without_data_dir(command: list[str]) -> list[str]:
    """``command`` less ``--data-dir DIR`` / ``--data-dir=DIR`` (there, ``RAPT_AUDIT_DATA`` names the data)."""
    kept, skip = [], False
    for arg in command:
        if skip:
            skip = False
        elif arg == "--data-dir":
            skip = True
        elif not arg.startswith("--data-dir="):
            kept.append(arg)
    return kept


def cmd_bundle(args: argparse.Namespace) -> int:
    """Build the bundle; print each piece's size and the command to run there."""
    command = list(args.remote[1:] if args.remote[:1] == ["--"] else args.remote)
    remote, configs = run_configs(command, args.subcommands)
    options = [f"--out {shlex.quote(args.out)}", f"--python {args.python}"]
    if args.wheels_from:
        options.append(f"--wheels-from {shlex.quote(args.wheels_from)}")
    options += [f"--include {shlex.quote(i)}" for i in args.include]
    options += ["--no-spacy"] if args.no_spacy else []
    for flag, value in (("--data", args.data), ("--provided", args.provided)):
        if value is not None:
            options.append(f"{flag} {shlex.quote(value)}")
    pack_command = f"rapt-audit bundle {' '.join(options)} -- {shlex.join(command)}"
    data = None if args.data is None else [n for n in _names(args.data) if n != "none"]
    pack(out=Path(args.out), command=remote, configs=configs, python=args.python,
         wheels_from=Path(args.wheels_from) if args.wheels_from else None, include=_names(args.include),
         provided=provided_names(args.provided), data=data, max_mib=args.max_mib,
         preset=args.preset, strip=args.strip, force=args.force, pack_command=pack_command, dry_run=args.dry_run,
         no_spacy=args.no_spacy)
    return 0
