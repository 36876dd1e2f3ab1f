"""The seed papers' claims on a benchmark folder: one reading for ``FOLDER/claims.md`` and ``rapt-audit claims``.

A benchmark runs one cell per dataset for each setting and seed: the task's, and the one each attack family reads
(Trustpilot for attribute inference, CoNLL-2003 for the trained NER attacks). Read cell by cell, a folder's rows
split by dataset: the CoNLL cells form a comparable group of their own, without the task's utility, so the Pareto
claim sees a fraction of its points ("0 of 10" on ``reports/sst2-cpu`` against "11 of 30") and the NER attacks are
judged on η within that group alone. The claims are therefore judged on the joined rows
(:func:`~rapt_audit.benchmark.join.join`: one row per setting and seed, every family's attacks in it), as the
report and the leaderboard read them, whether ``rapt-audit benchmark report`` writes ``claims.md`` or a user runs
``rapt-audit claims FOLDER``: both call :func:`claims_markdown`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from rapt_audit.benchmark.join import Joined, join
from rapt_audit.benchmark.run import INDEX_FILE
from rapt_audit.reporting.claims import format_markdown, judge
from rapt_audit.reporting.collect import Collection, collect
from rapt_audit.reporting.markdown import markdown_text

#: The file a benchmark's report writes the claims to, in the folder.
CLAIMS_FILE = "claims.md"


def is_benchmark_folder(path: str | Path) -> bool:
    """Whether ``path`` is the output folder of ``rapt-audit benchmark run`` (it holds the benchmark's index)."""
    return Path(path).is_dir() and (Path(path) / INDEX_FILE).is_file()


def claims_markdown(joined: Joined) -> str:
    """``FOLDER/claims.md``: a heading naming the benchmark, then every claim judged on its joined rows."""
    return (f"# The seed papers' claims on benchmark {markdown_text(joined.index['name'])}\n\n"
            f"{format_markdown(judge(joined.collection.results))}")


def claims_input(paths: Sequence[str | Path]) -> tuple[Collection, Joined | None, list[str]]:
    """What ``rapt-audit claims PATHS`` judges: ``(results, benchmark, notes)``.

    A benchmark folder is read joined (:func:`~rapt_audit.benchmark.join.join`), every other path as stored
    (:func:`~rapt_audit.reporting.collect.collect`); ``benchmark`` is the joined folder when the results are one
    benchmark's rows and nothing else (its ``claims.md`` is then the answer), and ``notes`` name each benchmark folder whose cells were reached through another path (read cell by cell, so split
    by dataset), with the command that reads it joined. A benchmark folder given twice, or with one of its
    cells, is read once.

    Raises:
        UsageError: when ``paths`` is empty.
        ResultError: when a benchmark folder's index is unreadable.
    """
    folders, given = [], set()
    for path in paths:
        if is_benchmark_folder(path) and Path(path).resolve() not in given:  # twice: read once, as collect does
            given.add(Path(path).resolve())
            folders.append(path)
    others = [p for p in paths if not is_benchmark_folder(p)]
    out = collect(others) if others or not folders else Collection()
    # A benchmark's cell sits in FOLDER/CELL/result.json: one of a folder given is in its joined rows already (read
    # once, as collect reads a file once); one of another folder was reached through its parent or on its own.
    out.results = [loaded for loaded in out.results if loaded.path.parent.parent.resolve() not in given]
    cells_of = sorted({str(loaded.path.parent.parent) for loaded in out.results
                       if is_benchmark_folder(loaded.path.parent.parent)})
    notes = [f"{folder} is a benchmark folder, read here one cell at a time, so its rows split by dataset; its "
             f"claims.md judges its joined rows: run rapt-audit claims {folder}" for folder in cells_of]
    benchmarks = [join(folder) for folder in folders]
    alone = benchmarks[0] if len(benchmarks) == 1 and not out.results else None
    for joined in benchmarks:
        out.results += joined.collection.results
        out.problems += joined.collection.problems
    return out, alone, notes


__all__ = ["CLAIMS_FILE", "claims_input", "claims_markdown", "is_benchmark_folder"]
