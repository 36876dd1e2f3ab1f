"""Baseline files of the privacy-regression gate: reading, recording, and refusing a modified tree's runs.

A baseline (schema ``rapt-audit/baseline/1``) holds the reference runs ``rapt-audit check`` compares
new runs with (:mod:`rapt_audit.reporting.check`). A reference must name the code that made it, so
runs from a git checkout with uncommitted changes are refused unless the user says it is a throw-away
local check.
"""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import Mapping, Sequence

from rapt_audit.api.errors import ResultError
from rapt_audit.api.files import write_json_atomic
from rapt_audit.api.outputs import check_outputs
from rapt_audit.api.parsing import DocumentError, FloatRangeError, read_document
from rapt_audit.api.version import __version__
from rapt_audit.pipeline.result_schema import validate_result_document
from rapt_audit.pipeline.results import SCHEMA, RunResult
from rapt_audit.reporting.collect import collect

BASELINE_SCHEMA = "rapt-audit/baseline/1"


def run_label(result: RunResult) -> str:
    """``t2t eta=75 seed 0 on synthetic``: how a run is named in the gate's output."""
    args = ", ".join(f"{k}={v}" for k, v in sorted(result.config.get("defense_args", {}).items()))
    return (f"{result.defense.get('name')}{' ' + args if args else ''} seed {result.config.get('seed')} "
            f"on {result.dataset.get('name')}")


def read_baseline(path: str | Path, *, allow_dirty: bool = False) -> list[RunResult]:
    """The reference runs of a baseline file (or of a single result file used as a baseline).

    Raises:
        ResultError: naming the file when it is missing, corrupt or of another schema, or (unless
            ``allow_dirty``) when a run came from a modified tree (:func:`refuse_dirty`).
    """
    path = Path(path)
    try:
        doc = read_document(path, source=f"baseline {path}", fmt="json")[1]
    except FloatRangeError as exc:  # a number too large for a float, at its line
        raise ResultError(f"baseline {path} is corrupt: {exc}") from None
    except DocumentError as exc:  # missing, not a regular file, not JSON, nested too deep
        hint = "" if path.exists() else f"; create one with rapt-audit check --write-baseline {path} RUN_DIRS"
        raise ResultError(f"{exc}{hint}") from None
    if isinstance(doc, dict) and doc.get("schema") == SCHEMA:
        docs = [doc]
    elif isinstance(doc, dict) and doc.get("schema") == BASELINE_SCHEMA:
        docs = doc.get("results", [])
    else:
        schema = doc.get("schema") if isinstance(doc, dict) else None
        raise ResultError(f"baseline {path} has schema {schema!r}; this rapt-audit reads {BASELINE_SCHEMA!r} "
                          f"(or a single {SCHEMA!r} result)")
    for i, d in enumerate(docs):  # the same schema as result files; names the result and the field
        validate_result_document(d, f"{path} results[{i}]")
    try:
        results = [RunResult.from_dict(d) for d in docs]
    except (KeyError, TypeError, ValueError) as exc:
        raise ResultError(f"baseline {path} holds a malformed result: {exc!r}") from None
    if not allow_dirty:
        refuse_dirty(results, f"baseline {path}")
    return results


def refuse_dirty(results: Sequence[RunResult], where: str) -> None:
    """Raise when a result ran from a git checkout with uncommitted changes (its ``git_sha`` ends ``-dirty``).

    A reference result must say which code made it: a commit names it, a modified tree does not. A
    result from an installed package (no checkout, ``git_sha`` null) names its versions instead and passes.

    Raises:
        ResultError: naming the runs and the fix.
    """
    dirty = [f"{run_label(r)} ({r.env.get('git_sha')})" for r in results
             if str(r.env.get("git_sha") or "").endswith("-dirty")]
    if dirty:
        raise ResultError(f"{where}: {len(dirty)} run(s) came from a working tree with uncommitted changes: "
                          f"{'; '.join(dirty[:3])}{' …' if len(dirty) > 3 else ''}. A baseline is a reference: "
                          "commit, run again from the clean tree and record it with rapt-audit check "
                          "--write-baseline (or pass --allow-dirty-baseline for a throw-away local check)")


def write_baseline(path: str | Path, runs: Sequence[str | Path], *, rule: Mapping[str, float], note: str = "",
                   allow_dirty: bool = False) -> list[RunResult]:
    """Record the results under ``runs`` as the new baseline (every input usable and, unless
    ``allow_dirty``, from a clean tree); ``rule`` is the gate's rule, stored with them."""
    coll = collect(runs, calibrations=False)
    if coll.problems:
        raise ResultError("cannot record a baseline from unusable inputs: "
                          + "; ".join(p.message for p in coll.problems))
    check_outputs([("--baseline", path)], coll.inputs())  # never one of the results it records
    results = [item.result for item in coll.results]
    if not allow_dirty:
        refuse_dirty(results, "cannot record the baseline")
    doc = {"schema": BASELINE_SCHEMA, "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
           "created_by": f"rapt-audit {__version__}", "note": note,
           "rule": dict(rule),
           "results": [r.to_dict() for r in results]}
    write_json_atomic(Path(path), doc)
    return results


__all__ = ["BASELINE_SCHEMA", "read_baseline", "refuse_dirty", "run_label", "write_baseline"]
