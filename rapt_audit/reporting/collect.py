"""Finding and reading stored results for reports, leaderboards and the regression gate.

The readers never re-run anything: they take run directories, sweep directories (whose cells are
sub-directories) or ``result.json`` paths, and read every result file below them. A bad file does
not stop the others: it becomes a :class:`Problem` that names the file and what is wrong with it,
and the caller decides whether to go on (a report) or stop (the gate).
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from rapt_audit.api.errors import ResultError, UsageError
from rapt_audit.api.parsing import read_document
from rapt_audit.pipeline.results import RESULT_FILE, SCHEMA, RunResult, read_result



@dataclass(frozen=True)
class Loaded:
    """One result read from disk, with the file it came from."""

    path: Path
    result: RunResult


@dataclass(frozen=True)
class Problem:
    """An input that could not be used: the path, and a message that names the problem and the fix.

    ``kind`` is ``"schema"`` (another schema version), ``"corrupt"`` (unreadable or malformed),
    ``"empty"`` (no result below a given directory) or ``"missing"`` (the path does not exist).
    """

    path: Path
    kind: str
    message: str
    schema: str | None = None


@dataclass
class Collection:
    """Everything read from a list of paths: usable results, calibration and audit documents, and problems."""

    results: list[Loaded] = field(default_factory=list)
    calibrations: list[tuple[Path, dict[str, Any]]] = field(default_factory=list)
    audits: list[tuple[Path, dict[str, Any]]] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)

    def require_results(self, what: str) -> None:
        """Raise when nothing usable was found, listing every problem.

        Raises:
            ResultError: naming each unusable path, so the user can fix the right one.
        """
        if self.results:
            return
        details = "; ".join(p.message for p in self.problems) or "no paths were given"
        raise ResultError(f"no usable result files for {what}: {details}")

    def inputs(self) -> list[tuple[str, Path]]:
        """Every file read (usable or not), as ``(what, path)``: what no output may overwrite
        (:func:`rapt_audit.api.outputs.check_outputs`)."""
        return ([("the result", r.path) for r in self.results] + [("the input", p) for p, _ in self.calibrations]
                + [("the input", p) for p, _ in self.audits] + [("the input", p.path) for p in self.problems])

    def warn_problems(self) -> None:
        """Print one warning per unusable input to stderr (the commands that go on without them)."""
        for p in self.problems:
            print(f"rapt-audit: warning: left out {p.path}: {p.message}", file=sys.stderr)

    def schema_summary(self) -> str | None:
        """One sentence saying which inputs use another schema version, or ``None``."""
        others: dict[str, list[str]] = {}
        for p in self.problems:
            if p.kind == "schema":
                others.setdefault(p.schema or "?", []).append(str(p.path))
        if not others:
            return None
        parts = [f"{len(paths)} file(s) with schema {schema!r} ({', '.join(paths)})" for schema, paths in others.items()]
        return (f"this rapt-audit reads schema {SCHEMA!r}; skipped " + "; ".join(parts) +
                ". Render those with the rapt-audit version that wrote them, or re-run them.")


def _schema_of(path: Path) -> str | None:
    try:
        data = read_document(path, source=str(path), fmt="json")[1]
    except UsageError:  # not JSON, not a regular file (never opened: a FIFO would hang the report)
        return None
    return str(data.get("schema")) if isinstance(data, dict) and "schema" in data else None


def _read_one(path: Path, into: Collection) -> None:
    try:
        into.results.append(Loaded(path, read_result(path)))
    except ResultError as exc:
        schema = _schema_of(path)
        if schema is not None and schema != SCHEMA and schema.startswith("rapt-audit/result/"):
            into.problems.append(Problem(path, "schema", str(exc), schema))
        else:
            into.problems.append(Problem(path, "corrupt", str(exc)))


#: Documents a report shows beside the results: file-name prefix → (Collection list, the list each
#: must hold, the command that writes them).
DOCUMENTS = {"calibration": ("calibrations", "rows", "rapt-audit calibrate --format json"),
             "audit": ("audits", "pairs", "rapt-audit audit --out FILE")}


def _read_document(path: Path, kind: str, into: Collection) -> None:
    target, required, writer = DOCUMENTS[kind]
    try:
        doc = read_document(path, source=str(path), fmt="json")[1]
        if not isinstance(doc, dict) or not isinstance(doc.get(required), list):
            raise ValueError(f"no {required!r} list (expected the output of {writer})")
        getattr(into, target).append((path, doc))
    except (UsageError, ValueError) as exc:
        into.problems.append(Problem(path, "corrupt", f"{kind} file {path} is unusable: {exc}"))


def _kind_of(path: Path) -> str | None:
    return next((kind for kind in DOCUMENTS if path.name.startswith(kind)), None)


def relative_path(path: Path, base: Path) -> str:
    """``path`` relative to ``base`` as shown in reports (as given when no relative path exists)."""
    try:
        return os.path.relpath(path.resolve(), base.resolve())
    except ValueError:  # another drive on Windows
        return str(path)


def collect(paths: Sequence[str | Path], *, calibrations: bool = True) -> Collection:
    """Read every result below ``paths`` (run dirs, sweep dirs or result files), in a stable order.

    A path that does not exist, or a directory with no ``result.json`` anywhere below it, becomes a
    problem; so does each corrupt file or file of another schema version. The same file reached
    twice (a sweep and one of its cells both given) is read once.

    Args:
        paths: What the user passed on the command line.
        calibrations: Also read the ``calibration*.json`` and ``audit*.json`` documents found in the
            given directories.

    Raises:
        UsageError: when ``paths`` is empty.
    """
    if not paths:
        raise UsageError("give at least one run directory, sweep directory or result.json file")
    out = Collection()
    seen: set[Path] = set()
    for raw in paths:
        path = Path(raw)
        if not path.exists():
            out.problems.append(Problem(path, "missing", f"{path} does not exist; check the path"))
            continue
        if path.is_file():
            files = [path] if path.suffix == ".json" and _kind_of(path) is None else []
            docs = [path] if _kind_of(path) is not None else []
        else:
            files = sorted(path.rglob(RESULT_FILE))
            docs = sorted(p for kind in DOCUMENTS for p in path.rglob(f"{kind}*.json")) if calibrations else []
        if not files and not docs:
            out.problems.append(Problem(path, "empty", f"{path} holds no {RESULT_FILE}; pass a run directory "
                                        "(rapt-audit run --out DIR), a sweep directory or a result file"))
        for file in files:
            key = file.resolve()
            if key not in seen:
                seen.add(key)
                _read_one(file, out)
        for file in docs:
            key = file.resolve()
            if key not in seen:
                seen.add(key)
                _read_document(file, str(_kind_of(file)), out)
    return out


__all__ = ["DOCUMENTS", "relative_path", "Collection", "Loaded", "Problem", "collect"]
