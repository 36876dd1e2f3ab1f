"""The JSON Schema of result files (``result.schema.json``, shipped with the package) and its check.

Result files come from other people's runs, so :func:`rapt_audit.pipeline.results.read_result`
checks each against the schema of its version before anything reads a field: a wrong type deep in
a file becomes one error that names the file and the field, instead of a crash in a report.

The schema and ``jsonschema`` are loaded on the first check, not at import, so that ``rapt-audit
--help`` and ``ls`` stay instant.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from rapt_audit.api.errors import ResultError
from rapt_audit.api.plugins import load_named
from rapt_audit.api.types import Estimate
from rapt_audit.scoring.metrics import declared, headline_metric, range_problem

SCHEMA_FILE = "result.schema.json"
_MAX_MESSAGE = 300  # jsonschema quotes the offending value, which may be a whole attack
_SURROGATE = re.compile("[\ud800-\udfff]")


@lru_cache(maxsize=1)
def result_schema() -> dict[str, Any]:
    """The result-file JSON Schema (Draft 2020-12) as a dict, read once from the package."""
    return json.loads(resources.files(__package__).joinpath(SCHEMA_FILE).read_text(encoding="utf-8"))


@lru_cache(maxsize=1)
def _validator() -> Any:
    import jsonschema  # lazy (jsonschema: a few tens of ms, only when a file is read)

    schema = result_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def field_path(parts: Iterable[str | int]) -> str:
    """A JSON path as a reader writes it: ``attacks.whitebox.metrics["a b"].value``, ``warnings[0]``."""
    out = ""
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        elif re.fullmatch(r"[A-Za-z_][A-Za-z0-9_-]*", part):
            out += f".{part}" if out else part
        else:  # a key from the file itself: quoted, so that odd characters cannot fake another path
            out += f"[{json.dumps(part)}]"
    return out or "(top level)"


def _unpaired_surrogate(value: Any, path: tuple[str | int, ...] = ()) -> tuple[str | int, ...] | None:
    """The path of the first key or string holding an unpaired surrogate (``"\\ud800"`` in the JSON), if any."""
    if isinstance(value, str):
        return path if _SURROGATE.search(value) else None
    items = value.items() if isinstance(value, Mapping) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        if isinstance(key, str) and _SURROGATE.search(key):
            return (*path, key)
        if isinstance(item, (int, float)):  # most of a file: per-record numbers, thousands a measure
            continue
        found = _unpaired_surrogate(item, (*path, key))
        if found is not None:
            return found
    return None


def _is_number(item: Any) -> bool:
    """JSON Schema's ``number``: an int or a float, not a bool."""
    return isinstance(item, (int, float)) and not isinstance(item, bool)


def _set_aside_per_record_arrays(doc: Mapping[str, Any]) -> tuple[Mapping[str, Any], list[tuple[tuple, list]]]:
    """``doc`` with every estimate's per-record arrays (``per_record.num``, ``per_record.den``) emptied, and those
    arrays with their paths.

    jsonschema checks an array item by item through its whole machinery: about a second for one paper-profile
    result (17,055 records, a dozen measures), so reading a benchmark folder would take minutes. The arrays' one
    rule (numbers) is checked by the caller in one plain pass instead; everything else still goes through the
    schema. Only the mappings on the way to an array are copied; ``doc`` is not changed.
    """
    arrays: list[tuple[tuple, list]] = []
    if not isinstance(doc, Mapping):  # not an object at all: the schema says so
        return doc, arrays

    def estimate(est: Any, path: tuple) -> Any:
        parts = est.get("per_record") if isinstance(est, Mapping) else None
        if not isinstance(parts, Mapping):
            return est
        parts = dict(parts)
        for key in ("num", "den"):
            if isinstance(parts.get(key), list):
                arrays.append(((*path, "per_record", key), parts[key]))
                parts[key] = []
        return {**est, "per_record": parts}

    light = dict(doc)
    if isinstance(doc.get("utility"), Mapping):
        light["utility"] = {m: estimate(e, ("utility", m)) for m, e in doc["utility"].items()}
    if isinstance(doc.get("attacks"), Mapping):
        attacks = {}
        for name, outcome in doc["attacks"].items():
            if isinstance(outcome, Mapping):
                outcome = dict(outcome)
                if "empirical_privacy" in outcome:
                    outcome["empirical_privacy"] = estimate(outcome["empirical_privacy"],
                                                            ("attacks", name, "empirical_privacy"))
                if isinstance(outcome.get("metrics"), Mapping):
                    outcome["metrics"] = {m: estimate(e, ("attacks", name, "metrics", m))
                                          for m, e in outcome["metrics"].items()}
            attacks[name] = outcome
        light["attacks"] = attacks
    return light, arrays


def _estimates(doc: Mapping[str, Any]) -> Iterable[tuple[tuple, str, Mapping[str, Any]]]:
    """Every estimate of a schema-valid document: ``(path, declared metric name, estimate)``. An attack's headline
    is the measure it repeats among its metrics (:func:`~rapt_audit.scoring.metrics.headline_metric`)."""
    for name, est in doc["utility"].items():
        yield ("utility", name), name, est
    for attack, outcome in doc["attacks"].items():
        if not isinstance(outcome, Mapping) or "empirical_privacy" not in outcome:
            continue  # a skip or a failure
        try:
            metrics = {m: _as_estimate(e) for m, e in outcome["metrics"].items()}
            headline = headline_metric(metrics, _as_estimate(outcome["empirical_privacy"]))
        except ValueError:  # an interval that leaves out its value: found and named below
            headline = "empirical_privacy"
        yield ("attacks", attack, "empirical_privacy"), headline, outcome["empirical_privacy"]
        for name, est in outcome["metrics"].items():
            yield ("attacks", attack, "metrics", name), name, est


def _as_estimate(est: Mapping[str, Any]) -> Estimate:
    return Estimate(est["value"], est["ci_low"], est["ci_high"], est["n"], est["method"])


def _impossible_estimates(doc: Mapping[str, Any]) -> list[tuple[tuple, str]]:
    """The estimates whose values no measurement gives: an interval that leaves out its value (or is reversed), a
    value that is not finite, or one outside [0, 1] for a metric its plugin declares bounded (losses, errors and ε
    bounds are declared unbounded, so they may exceed 1). A metric no installed plugin declares is not judged."""
    # The plugins declare their metrics, and whether they are bounded, when imported: those this result names only
    # (a run of built-ins, which reads its own result back, never imports a third-party plugin).
    load_named(str((doc.get("config") or {}).get("defense", "")), doc.get("attacks") or {})
    problems = []
    for path, name, est in _estimates(doc):
        value, low, high = est["value"], est["ci_low"], est["ci_high"]
        if not low <= value <= high:  # as api.types.Estimate requires (NaN cannot be written in JSON)
            problems.append((path, f"the interval [{low:g}, {high:g}] does not contain its value {value:g}: "
                                   "an estimate lies within its confidence interval"))
        elif declared(name) is not None:
            problem = range_problem(name, _as_estimate(est))
            if problem:
                problems.append((path, problem))
    return problems


def validate_result_document(doc: Mapping[str, Any], source: str | Path) -> None:
    """Check one parsed result document against the result-file schema.

    Args:
        doc: The parsed JSON (a ``result.json``, or one result embedded in a baseline file).
        source: Where it came from, as it should appear in the message (a path, or
            ``"baselines/ci-smoke.json results[3]"``).

    Raises:
        ResultError: naming ``source``, the JSON path of the first offending field, what is wrong
            with it, how many other fields are wrong, and the fix.
    """
    # JSON may escape half of a UTF-16 pair; Python keeps it as a lone surrogate, which no UTF-8 page or
    # file can hold, so a report would fail at its very end. The schema cannot say this; say it here.
    bad = _unpaired_surrogate(doc)
    if bad is not None:
        raise ResultError(f"result file {source}: {field_path(bad)}: holds an unpaired UTF-16 surrogate (a \\ud800-"
                          "\\udfff escape), which is not text: correct that field, or re-run the result to write it "
                          "afresh.")
    light, arrays = _set_aside_per_record_arrays(doc)
    problems = [(tuple(e.absolute_path), e.message) for e in _validator().iter_errors(light)]
    problems += [((*path, i), f"{item!r} is not of type 'number'") for path, items in arrays
                 for i, item in enumerate(items) if not _is_number(item)]
    if not problems:  # the types hold: now the values no measurement can give
        problems = _impossible_estimates(doc)
    if not problems:
        return
    where, message = problems[0]
    message = message if len(message) <= _MAX_MESSAGE else message[:_MAX_MESSAGE] + "…"
    more = f" (and {len(problems) - 1} more problem(s))" if len(problems) > 1 else ""
    raise ResultError(f"result file {source}: {field_path(where)}: {message}{more}. The file does not "
                      f"follow the result schema {result_schema()['$id']!r} (rapt_audit/pipeline/{SCHEMA_FILE}): "
                      "correct that field, or re-run the result with this rapt-audit to write it afresh.")


__all__ = ["SCHEMA_FILE", "field_path", "result_schema", "validate_result_document"]
