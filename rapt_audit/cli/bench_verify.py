"""``rapt-audit benchmark verify DIR``: a maintainer's check of a contributor's benchmark folder
(:mod:`rapt_audit.benchmark.verify`). Exit 0 when every checked cell is admitted and every re-run verified,
1 when a cell is refused, differs or its re-run failed, 2 for unusable input."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rapt_audit.api.errors import UsageError
from rapt_audit.benchmark.run import INDEX_FILE, read_index
from rapt_audit.benchmark.verify import DEFAULT_SAMPLE, format_verification, verify
from rapt_audit.cli.options import cell_executor

DESCRIPTION = """\
Check a contributor's benchmark folder DIR (their cells, with or without copies of the published ones) against
the published benchmark folder. Every contributor cell whose measurement differs from the published cells'
(data, splits, model, profile, protocol, attacks, code digest of the built-ins) is refused, naming the field
and the fix; a seeded sample of the others is re-run from the published file in a scratch folder and each
re-run's headline numbers compared with the submitted ones: a measure differs when the paired 95 % interval
of submitted - re-run (the same records, the same seed) excludes 0. Nothing is written into DIR or the
published folder. Exit 0: every cell admitted and every re-run verified; 1: some cell refused, differs or
failed to re-run; 2: unusable input (a plugin defense not installed names the plugin and the fix)."""


def sample_count(text: str) -> int | None:
    """An argparse ``type`` for ``--sample``: a whole number >= 0, or ``all`` (None)."""
    if text.strip().lower() == "all":
        return None
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number or 'all'") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} is negative; give 0 (the checks only), N or all")
    return value


def add_parser(actions: argparse._SubParsersAction) -> None:
    """Register ``benchmark verify``."""
    p = actions.add_parser("verify", help="check a contributor's benchmark folder against the published one",
                           description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("folder", metavar="DIR", help="the folder the contributor sent (written by benchmark run)")
    p.add_argument("--against", default=None, metavar="PUBLISHED_DIR",
                   help="the published benchmark folder (default reports/NAME for the benchmark DIR is indexed by, "
                        "when it is there)")
    p.add_argument("--sample", type=sample_count, default=DEFAULT_SAMPLE, metavar="N",
                   help=f"re-run N of the admitted cells (default {DEFAULT_SAMPLE}; 0: the checks only; all)")
    p.add_argument("--sample-seed", dest="sample_seed", type=int, default=None, metavar="S",
                   help="draw the sample with seed S (default: a fresh random seed, printed, so the same draw can "
                        "be repeated and a contributor cannot know it beforehand)")
    p.add_argument("--cell", dest="cells", action="append", default=[], metavar="SELECTOR",
                   help="check only the cells that match: a cell folder name or KEY=VALUE (defense=, seed=, "
                        "dataset= or a setting such as eta=25); repeat to require several")
    p.add_argument("--scratch", default=None, metavar="FOLDER",
                   help="write the re-runs here and keep them (a new or empty folder, or an earlier --scratch whose "
                        "finished re-runs are reused); default a temporary folder, removed afterwards")
    p.add_argument("--jobs", type=int, default=1, metavar="N", help="re-run N cells at once in worker processes")
    p.add_argument("--device", default=None, choices=["auto", "cpu", "cuda"],
                   help="torch device of the re-runs (default auto); re-run on the submission's kind of device")
    p.add_argument("--data-dir", dest="data_dir", default=None, help="data folder (default $RAPT_AUDIT_DATA)")
    p.add_argument("--quiet", action="store_true", help="no progress output")
    # cell_executor reads the Ray flags too; verify runs its re-runs on this machine.
    p.set_defaults(executor="local", address=None, cpus_per_cell=None, gpus_per_cell=None)


def default_against(folder: str) -> Path:
    """``reports/NAME`` (below the working folder) for the benchmark ``folder`` is indexed by, when it holds a
    benchmark index and is not ``folder`` itself.

    Raises:
        UsageError: when there is no such folder (say where the published one is).
    """
    name = read_index(folder)["name"]
    candidate = Path("reports") / name
    if (candidate / INDEX_FILE).is_file() and candidate.resolve() != Path(folder).resolve():
        return candidate
    raise UsageError(f"no published folder for benchmark {name!r} at {candidate}; give it with --against "
                     "PUBLISHED_DIR (the committed reports/NAME/ of a checkout, or a downloaded copy)")


def cmd_verify(args: argparse.Namespace) -> int:
    """Run ``benchmark verify``: print the table, return 0 (passed) or 1 (refused, differs or failed)."""
    against = Path(args.against) if args.against else default_against(args.folder)
    log = None if args.quiet else (lambda msg: print(f"[rapt-audit] {msg}", file=sys.stderr, flush=True))
    result = verify(args.folder, against=against, sample=args.sample, sample_seed=args.sample_seed,
                    selectors=args.cells, scratch=args.scratch, executor=cell_executor(args, cells=True),
                    device=args.device, data_dir=args.data_dir, log=log)
    print(format_verification(result))
    return 0 if result.passed else 1


__all__ = ["add_parser", "cmd_verify", "default_against", "sample_count"]
