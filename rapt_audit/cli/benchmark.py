"""``rapt-audit benchmark run|status|report|verify``: a declared benchmark (``benchmarks/NAME.toml``) run, its
cells compared with the code here (``status``), read, and a contributor's folder checked against the published one
(:mod:`rapt_audit.cli.bench_verify`)."""

from __future__ import annotations

import argparse
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Sequence

from rapt_audit.api.errors import UsageError
from rapt_audit.api.files import default_cache_dir
from rapt_audit.benchmark.claims import CLAIMS_FILE
from rapt_audit.benchmark.extend import Extended, copy_published, extend, select, summary
from rapt_audit.benchmark.holdings import added_since, by_kind, disk_needed, drop_finished_services
from rapt_audit.benchmark.listing import dry_run_text
from rapt_audit.benchmark.plan import BenchCell, estimate_costs, plan_cells
from rapt_audit.benchmark.render import claims_file, write_benchmark_report
from rapt_audit.benchmark.run import check_benchmark_dir, default_out, run_benchmark
from rapt_audit.benchmark.status import cell_states, source_of, status_text
from rapt_audit.benchmark.validate import load_benchmark
from rapt_audit.cli import bench_verify
from rapt_audit.cli.options import add_cell_options, cell_executor
from rapt_audit.pipeline import sweep
from rapt_audit.pipeline.cache_ledger import human_bytes
from rapt_audit.pipeline.cell_limit import check_max_cells
from rapt_audit.pipeline.results import RESULT_FILE, RunResult
from rapt_audit.pipeline.runner import check_paper_device

#: Exit status when every cell finished but some attacks failed (as ``run``'s: the report marks them failed).
EXIT_ATTACKS_FAILED = 3

EPILOG = """examples:
  rapt-audit benchmark run smoke --out runs/bench-smoke
  rapt-audit benchmark run sst2-paper --dry-run
  rapt-audit benchmark run sst2-cpu --jobs 2 --time-budget 3000
  rapt-audit benchmark status smoke --out runs/bench-smoke
  rapt-audit benchmark report runs/bench-smoke
  rapt-audit benchmark verify runs/submission --against runs/bench-smoke --sample 0
NAME is a benchmark shipped with rapt-audit (the repository's benchmarks/ folder); FILE is any .toml of
the same format (docs/benchmarks.md). Every cell is checked before any work; a bad file stops with
FILE:LINE and the fix. Finished cells are reused, so an interrupted benchmark run again goes on; a cell that
other code measured is stale and has only its stale stages run again (status lists them by component); run
renders DIR/index.html, DIR/leaderboard.md and DIR/claims.md when every cell has finished. verify (for
maintainers) refuses a contributor's cells measured otherwise than the published ones and re-runs a sample.
To put your defense on a published benchmark, give its folder (reports/NAME or a downloaded copy) with
--add FILE (only [defenses.NAME] tables) and a new --out: only your cells run, the published ones are
copied and reused (docs/writing-a-defense.md: Put your defense on the leaderboard)."""


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register the ``benchmark`` sub-command and its ``run``, ``status``, ``report`` and ``verify`` actions."""
    p = sub.add_parser("benchmark", help="run a declared benchmark (benchmarks/NAME.toml), render its report",
                       epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    actions = p.add_subparsers(dest="benchmark_command", required=True, metavar="{run,status,report,verify}")
    run = actions.add_parser("run", help="run every cell of a benchmark (finished cells are reused)")
    run.add_argument("benchmark", metavar="NAME|FILE",
                     help="a shipped benchmark (smoke, sst2-cpu, sst2-paper) or a .toml file")
    run.add_argument("--out", default=None, help="output folder (default runs/benchmark-NAME)")
    run.add_argument("--data-dir", dest="data_dir", default=None, help="data folder (default $RAPT_AUDIT_DATA)")
    run.add_argument("--device", default=None, choices=["auto", "cpu", "cuda"], help="torch device (default auto)")
    run.add_argument("--dry-run", dest="dry_run", action="store_true",
                     help="check the file, list every cell with its estimated cost, run nothing")
    run.add_argument("--quiet", action="store_true", help="no progress output")
    run.add_argument("--add", default=None, metavar="FILE",
                     help="add the defenses of FILE ([defenses.NAME] tables only) to the published benchmark whose "
                          "folder (or reports/NAME) is given instead of NAME|FILE; only their cells run, into a new "
                          "--out, and the published cells are copied there and reused")
    run.add_argument("--cell", dest="cells", action="append", default=[], metavar="SELECTOR",
                     help="run only the cells that match: a cell folder name or KEY=VALUE (defense=, seed=, "
                          "dataset= or a setting such as p=0.3); repeat to require several. The index still lists "
                          "every cell, and the report is rendered once all have finished")
    run.add_argument("--drop-finished-services", dest="drop_services", action="store_true",
                     help="once every cell of a setting has finished, remove the service weights its cells stored "
                          "in the cache (services/, pretrained/); the summary says how much it freed")
    add_cell_options(run)
    status = actions.add_parser("status", help="which cells are fresh, stale (other code measured them, by component) "
                                               "or pending; runs nothing")
    status.add_argument("benchmark", metavar="NAME|FILE|DIR",
                        help="a shipped benchmark or a .toml file (with --out), or a benchmark folder (read by its "
                             "own copy of its file, benchmark.toml)")
    status.add_argument("--out", default=None, help="the benchmark's folder (default: DIR, else runs/benchmark-NAME)")
    status.add_argument("--cell", dest="cells", action="append", default=[], metavar="SELECTOR",
                        help="only the cells that match (as run's --cell)")
    status.add_argument("--list", dest="listing", action="store_true",
                        help="list every cell that is not fresh, with its stale components")
    report = actions.add_parser("report", help="render a benchmark folder's report, leaderboard and claims")
    report.add_argument("folder", metavar="DIR", help="the --out folder of benchmark run")
    report.add_argument("--out", default=None, help="HTML file (default DIR/index.html)")
    report.add_argument("--leaderboard", default=None, help="Markdown file (default DIR/leaderboard.md)")
    report.add_argument("--claims", default=None, metavar="FILE",
                        help="the seed papers' claims, Markdown (default claims.md beside --leaderboard, else beside "
                             "--out, else DIR/claims.md)")
    report.add_argument("--title", default=None)
    bench_verify.add_parser(actions)


def cmd_benchmark(args: argparse.Namespace) -> int:
    """Run ``benchmark run``, ``benchmark status``, ``benchmark report`` or ``benchmark verify``."""
    if args.benchmark_command == "verify":
        return bench_verify.cmd_verify(args)
    if args.benchmark_command == "status":
        return _status(args)
    if args.benchmark_command == "report":
        html, markdown, joined = write_benchmark_report(args.folder, out=args.out, leaderboard=args.leaderboard,
                                                        claims=args.claims, title=args.title)
        joined.collection.warn_problems()
        claims = claims_file(args.folder, out=args.out, leaderboard=args.leaderboard, claims=args.claims)
        print(f"wrote {html}, {markdown} and {claims} ({len(joined.collection.results)} "
              f"joined row(s) of {len(joined.cells)} finished cell(s); {len(joined.pending)} pending)")
        return 0
    return _run(args)


def _status(args: argparse.Namespace) -> int:
    """``benchmark status``: the cells against the code here, by component (the data is not loaded: the status is
    about code)."""
    source, folder = source_of(args.benchmark)
    bench = load_benchmark(source, check_data=False)
    out = Path(args.out) if args.out else folder or default_out(bench)
    cells = plan_cells(bench, out=out)
    cells = select(cells, args.cells) if args.cells else cells
    print(status_text(bench, cell_states(cells), out=out, source=source, listing=args.listing))
    return 0


def _published(ext: Extended | None) -> list[tuple[str, str, str, RunResult]]:
    """``(name, defense, dataset, result)`` of the published cells an ``--add`` run copies (for the estimates)."""
    if ext is None:
        return []
    joined = ext.published.joined
    return [(c["name"], c["defense"], c["dataset"], joined.cells[c["name"]]) for c in joined.index["cells"]
            if c["name"] in joined.cells]


def _cache_lines(out: Path, since: str, cells: Sequence[BenchCell], results: Sequence[tuple[Any, RunResult]],
                 drop: bool) -> list[str]:
    """The summary's cache lines: what the run stored in the cache, by kind, and what ``--drop-finished-services``
    freed."""
    root = default_cache_dir()
    added = added_since(out, since, root)
    stored = (f"{human_bytes(sum(added.values()))} ({by_kind(added.items())})" if added else "nothing new")
    lines = [f"cache: this run stored {stored} in {root}, as its ledger records it on this machine (rapt-audit "
             "cache ls lists the cache by benchmark, setting and kind; rapt-audit cache prune removes entries)"]
    return lines + ([drop_finished_services(cells, out=out, root=root, results=results)] if drop else [])


def _run(args: argparse.Namespace) -> int:
    problems: list[str] | None = [] if args.dry_run else None  # a dry run lists the cells even without the data
    max_cells = check_max_cells(args.max_cells)  # counted before any cell is built
    if args.add:
        if not args.out:
            raise UsageError("--add needs --out NEW_DIR: the published folder is never written, and your cells "
                             "go beside copies of its cells there")
        out = Path(args.out)
        check_benchmark_dir(out)
        ext = extend(args.benchmark, args.add, out=out, data_dir=args.data_dir, problems=problems,
                     max_cells=max_cells)
        bench = ext.bench
    else:
        ext = None
        bench = load_benchmark(args.benchmark, data_dir=args.data_dir, problems=problems, max_cells=max_cells)
        out = Path(args.out) if args.out else default_out(bench)
        check_benchmark_dir(out)  # the output rule, in a dry run too: a folder of the user's files is refused
    cells = plan_cells(bench, out=out, data_dir=args.data_dir, device=args.device)
    todo = [c for c in cells if ext is None or ext.is_added(c)]  # a published cell is never re-run
    todo = select(todo, args.cells) if args.cells else todo
    notes = []
    counts = summary(ext, cells) if ext is not None else {"published": 0}
    if ext is not None:
        notes.append(f"{counts['published']} published cell(s) of {ext.published.folder} are copied into {out} and "
                     f"reused, never re-run; {counts['added']} cell(s) of {', '.join(ext.added)} are added")
    if len(todo) < len(cells) - counts["published"]:
        notes.append("--cell: the other cells are not run now; the report is rendered once every cell of the "
                     "file has finished (the same command without --cell runs them)")
    executor = cell_executor(args, cells=True) if not args.dry_run else None
    if args.dry_run:
        try:  # the run would refuse the paper profile here; the listing is still right for a GPU machine
            check_paper_device(todo[0].cell.config) if todo else None
        except UsageError as exc:
            notes.append(str(exc))
        if args.time_budget is not None and not args.time_budget > 0:  # as the run refuses it
            raise UsageError(f"--time-budget must be a positive number of seconds, got {args.time_budget:g}")
        names = {c.name for c in todo}
        costs, evidence = estimate_costs(todo, bench, indexed=[c for c in cells if c.name not in names],
                                         published=_published(ext))
        disk = disk_needed([c for c, cost in zip(todo, costs) if cost.status != "complete"], root=default_cache_dir())
        print(dry_run_text(bench, todo, costs, out=out, jobs=args.jobs, time_budget=args.time_budget,
                           measured=bool(evidence.measured), disk=disk, problems=problems or (), notes=notes))
        return 2 if problems else 0
    log = None if args.quiet else (lambda msg: print(f"[rapt-audit] {msg}", file=sys.stderr, flush=True))
    since = datetime.now(timezone.utc).isoformat(timespec="microseconds")  # as the ledger times its entries
    try:
        results = run_benchmark(bench, todo, out=out, log=log, progress=not args.quiet and sys.stderr.isatty(),
                                executor=executor, time_budget=args.time_budget, indexed=cells,
                                prepare=(lambda: copy_published(ext, out)) if ext is not None else None,
                                published=_published(ext))
    except sweep.CellsFailed:  # main() lists the failed cells (exit 2); what finished can be read already
        print(f"render what finished with: rapt-audit benchmark report {out}", file=sys.stderr)
        raise
    except sweep.BudgetSpent as spent:  # not an error: the same command goes on later
        print(f"rapt-audit: {spent}", file=sys.stderr)
        print("\n".join(_cache_lines(out, since, cells, spent.results, args.drop_services)))
        print(f"render what finished so far with: rapt-audit benchmark report {out}")
        return sweep.BudgetSpent.EXIT_CODE
    print("\n".join(_cache_lines(out, since, cells, results, args.drop_services)))
    # A cell with a failed attack has its result (the report marks it failed); one without any is still to run.
    pending = [c for c in cells if not (Path(str(c.cell.config.out)) / RESULT_FILE).is_file()]
    if pending:  # never a leaderboard of part of the file over a folder indexed by all of it
        print(f"benchmark {bench.name}: {len(results)} cell(s) run in {out}; {len(pending)} cell(s) of the file still "
              "to run, so no report yet: the same command without --cell runs them and renders it (a published cell that "
              "had not finished is the publisher's to run)")
    else:
        html, markdown, _ = write_benchmark_report(out)
        print(f"benchmark {bench.name}: {len(results)} cells in {out}; wrote {html}, {markdown} and "
              f"{out / CLAIMS_FILE}")
    failed = sorted({f"{name} ({cell.label})" for cell, r in results for name in r.failed})
    if failed:
        print(f"rapt-audit: {len(failed)} attack run(s) failed and are marked failed in the report: "
              + "; ".join(failed), file=sys.stderr)
        return EXIT_ATTACKS_FAILED
    return 0


__all__ = ["EXIT_ATTACKS_FAILED", "add_parser", "cmd_benchmark"]
