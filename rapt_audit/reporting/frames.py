"""Stored results as pandas DataFrames: :func:`load` (one row per result × measure) and :func:`summarize`.

``load`` reads what the report reads (:func:`rapt_audit.reporting.collect.collect`: run directories,
sweep directories, result files) and returns the tidy rows of :mod:`rapt_audit.pipeline.tidy`.
``summarize`` returns the rows the report and the leaderboard show: results grouped by comparability
signature, seeds of one defense setting combined (a mean with a t-interval across seeds), computed by
the same :func:`~rapt_audit.reporting.summary.group_results` — there is no second implementation to
drift from the report.

A file that cannot be used does not stop the others: it is named in a :class:`ResultsWarning` and
the rest is loaded. Only when nothing at all is usable does ``load`` raise, naming every problem.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable

from rapt_audit.api.types import AttackFailure, Estimate, Skip
from rapt_audit.pipeline.results import RunResult
from rapt_audit.pipeline.tidy import estimate_cells, records_frame, setting_columns, tidy_records
from rapt_audit.reporting.collect import Collection, Loaded, collect
from rapt_audit.reporting.summary import Row, group_results

if TYPE_CHECKING:
    import pandas as pd

#: The stand-in path of a result made in this process (``run()``, a sweep): it has no file.
_IN_MEMORY = Path("<in memory>")

#: The fixed columns of :func:`summarize`, in order; ``param.<name>`` columns follow.
SUMMARY_COLUMNS = ("signature", "dataset", "synthetic", "profile", "model", "defense", "setting", "setting_key",
                   "params", "no_privacy", "privacy_level", "seeds", "n_seeds", "kind", "attack", "measure",
                   "value", "ci_low", "ci_high", "n", "ci_method", "level", "skipped", "failed")


class ResultsWarning(UserWarning):
    """A result file that was skipped (corrupt, another schema version, or a path with no results)."""


def _collect(source: Any, *, what: str) -> Collection:
    """Read ``source`` (paths and/or in-memory results) into a collection; warn about each unusable input."""
    items = [source] if isinstance(source, (str, Path, RunResult)) else list(source)
    paths = [s for s in items if not isinstance(s, RunResult)]
    found = collect(paths, calibrations=False) if paths else Collection()
    found.results.extend(Loaded(_IN_MEMORY, s) for s in items if isinstance(s, RunResult))
    for problem in found.problems:
        warnings.warn(f"skipped {problem.path}: {problem.message}", ResultsWarning, stacklevel=3)
    found.require_results(what)
    return found


def load(source: str | Path | RunResult | Iterable[str | Path | RunResult]) -> pd.DataFrame:
    """Stored results as a tidy DataFrame: one row per result × measure.

    Columns: signature, dataset, synthetic, profile, model, defense, setting_key, params (JSON),
    seed, kind (``utility`` / ``privacy`` / ``attack_metric``), attack, measure, value, ci_low,
    ci_high, n, ci_method, level, higher_is_better (for the defender, from the metric's declaration),
    skipped (the reason, for an attack that did not run; its value is NaN), failed (what went wrong,
    for an attack that raised or broke its contract; its value is NaN), cell_id, git_sha, version,
    started_at, wall_time_s, path, then one ``param.<name>`` column per defense parameter.

    Args:
        source: A run directory, a sweep directory, a ``result.json`` file, a :class:`RunResult`,
            or a list of these.

    Raises:
        ResultError: when nothing usable was found; the message names each path and its problem.
            Unusable files among usable ones only warn (:class:`ResultsWarning`).
        UsageError: for an empty list.
    """
    found = _collect(source, what="load()")
    return records_frame(row for item in found.results
                         for row in tidy_records(item.result, path=None if item.path == _IN_MEMORY else str(item.path)))


def _summary_rows(row: Row, kind: str, attack: str | None, measure: str,
                  est: Estimate | Skip | AttackFailure) -> dict[str, Any]:
    # The setting's cells are those of its first run (every run of a row shares them, the seed aside).
    skipped = est.reason if isinstance(est, Skip) else None
    failed = est.message if isinstance(est, AttackFailure) else None
    return {**setting_columns(row.runs[0].result), "synthetic": row.synthetic, "setting": row.setting,
            "no_privacy": row.no_privacy, "privacy_level": row.privacy_level,
            "seeds": ",".join(map(str, row.seeds)), "n_seeds": len(row.seeds), "kind": kind, "attack": attack,
            "measure": measure, **estimate_cells(est if isinstance(est, Estimate) else None), "skipped": skipped,
            "failed": failed}


def summarize(source: str | Path | RunResult | Iterable[str | Path | RunResult]) -> pd.DataFrame:
    """The report's rows as a DataFrame: one row per signature × defense setting × measure, seeds combined.

    ``value``/``ci_low``/``ci_high`` are the mean over seeds with a t-interval across seeds (one
    seed keeps its own interval; ``ci_method`` says which), exactly as the report and leaderboard
    print them; ``setting`` is the label they show (``η=75, method=prompt``).

    Args:
        source: As for :func:`load`.

    Raises:
        ResultError: when nothing usable was found (see :func:`load`).
    """
    found = _collect(source, what="summarize()")
    rows = []
    for group in group_results(found.results):
        for row in group.rows:
            rows += [_summary_rows(row, "utility", None, m, est) for m, est in row.utility.items()]
            for attack, est in row.privacy.items():
                rows.append(_summary_rows(row, "privacy", attack, "empirical_privacy", est))
                rows += [_summary_rows(row, "attack_metric", attack, m, e)
                         for m, e in row.metrics.get(attack, {}).items()]
    return records_frame(rows, SUMMARY_COLUMNS)


__all__ = ["ResultsWarning", "SUMMARY_COLUMNS", "load", "summarize"]
