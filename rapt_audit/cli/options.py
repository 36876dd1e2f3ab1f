"""Command-line pieces shared by several commands: the parser whose usage errors are one line, a defense's
``--set`` pairs (privatize, audit, calibrate), and where the cells of a sweep or a benchmark run (``run
--sweep``, ``benchmark run``)."""

from __future__ import annotations

import argparse
from typing import NoReturn

from rapt_audit.api.errors import UsageError
from rapt_audit.api.parsing import parse_float
from rapt_audit.pipeline.cell_limit import DEFAULT_MAX_CELLS
from rapt_audit.pipeline.local_executor import LocalExecutor
from rapt_audit.pipeline.ray_executor import RayExecutor
from rapt_audit.pipeline.sweep import Executor


class OneLineParser(argparse.ArgumentParser):
    """argparse's parser, its usage errors on one line: the problem, then where the options are described.

    argparse prints the whole usage before the error, a dozen lines in which the one that matters comes
    last; every other error of rapt-audit is one line. Subcommands' parsers are of this class too
    (``add_subparsers`` makes them of its parser's class). The exit code stays 2.
    """

    def error(self, message: str) -> NoReturn:
        """Print ``PROG: error: MESSAGE; see 'PROG --help'`` on standard error and exit 2."""
        self.exit(2, f"{self.prog}: error: {message}; see '{self.prog} --help'\n")


def defense_params(sets: list[str]) -> dict[str, str]:
    """``--set KEY=VALUE`` pairs as the defense's parameters (a ``defense.`` prefix is allowed).

    Raises:
        UsageError: for a pair without ``=`` or without a key.
    """
    params: dict[str, str] = {}
    for pair in sets:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--set {pair!r} is not KEY=VALUE (for example --set eta=75)")
        params[key.strip().removeprefix("defense.")] = value.strip()
    return params


def number(text: str) -> float:
    """An argparse ``type``: a number as :func:`~rapt_audit.api.parsing.parse_float` reads it (``1e309`` is refused)."""
    try:
        return parse_float(text, key="")
    except UsageError as exc:
        raise argparse.ArgumentTypeError(str(exc).lstrip("=")) from None


def add_cell_options(p: argparse.ArgumentParser) -> None:
    """``--max-cells``, ``--time-budget``, ``--executor``, ``--jobs`` and the Ray options: how the cells of a sweep or
    benchmark run."""
    p.add_argument("--max-cells", dest="max_cells", type=int, default=None, metavar="N",
                   help=f"with --sweep or benchmark run: refuse a grid of more than N cells, counted before any is "
                        f"built (default {DEFAULT_MAX_CELLS})")
    p.add_argument("--time-budget", dest="time_budget", type=number, default=None, metavar="SECONDS",
                   help="with --sweep or benchmark run: start no cell that would not finish within SECONDS of the "
                        "start (judged by its estimate, as the dry run lists it; with --jobs N or on Ray, the cells "
                        "running then finish first); the rest stay pending for the next call, which goes on (exit 75)")
    p.add_argument("--executor", choices=["local", "ray"], default="local",
                   help="where sweep cells run: local (one after another in this process, the default) or ray "
                        "(each cell a Ray task, several at once; needs pip install 'rapt-audit[ray]')")
    p.add_argument("--jobs", type=int, default=1, metavar="N",
                   help="with --sweep or benchmark run: run N cells at once in N worker processes on this machine, "
                        "each computing with its share of the cores (default 1: one after another in this process)")
    p.add_argument("--address", default=None, metavar="HOST:PORT",
                   help="with --executor ray: the head of a running Ray cluster (ray start --head); default: "
                        "$RAY_ADDRESS, else a local Ray instance sized to this machine")
    p.add_argument("--cpus-per-cell", dest="cpus_per_cell", type=number, default=None, metavar="N",
                   help="with --executor ray: CPUs each cell's task declares (default 1)")
    p.add_argument("--gpus-per-cell", dest="gpus_per_cell", type=number, default=None, metavar="N",
                   help="with --executor ray: GPUs each cell's task declares (default 0; 1 for a GPU grid)")


def cell_executor(args: argparse.Namespace, *, cells: bool) -> Executor | None:
    """The executor the flags of :func:`add_cell_options` ask for (None: in this process), checked before any
    cell (Ray installed, cluster up).

    Args:
        args: The parsed flags.
        cells: Whether the command runs cells (a sweep, a benchmark); a single run does not, and
            ``--jobs N`` / ``--executor ray`` then say to add ``--sweep``.
    """
    ray_flags = {"--address": args.address, "--cpus-per-cell": args.cpus_per_cell,
                 "--gpus-per-cell": args.gpus_per_cell}
    if args.jobs < 1:
        raise UsageError(f"--jobs must be a whole number >= 1, got {args.jobs}")
    if args.executor == "local":
        given = [flag for flag, value in ray_flags.items() if value is not None]
        if given:
            raise UsageError(f"{', '.join(given)} apply only to --executor ray")
        if args.jobs == 1:
            return None
        if not cells:
            raise UsageError("--jobs runs the cells of a sweep side by side; add --sweep KEY=V1,V2,...")
        return LocalExecutor(jobs=args.jobs)
    if args.jobs != 1:
        raise UsageError("--jobs applies to sweeps on this machine; on Ray, --cpus-per-cell sets how many cells "
                         "run at once")
    if not cells:
        raise UsageError("--executor ray runs the cells of a sweep; add --sweep KEY=V1,V2,... (one value runs "
                         "one cell: --sweep seed=0)")
    executor = RayExecutor(address=args.address,
                           cpus_per_cell=1.0 if args.cpus_per_cell is None else args.cpus_per_cell,
                           gpus_per_cell=0.0 if args.gpus_per_cell is None else args.gpus_per_cell)
    executor.check()
    return executor


__all__ = ["OneLineParser", "add_cell_options", "cell_executor", "defense_params", "number"]
