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
        found = _unpaired_surrogate(item, (*path, key))
        if found is not None:
            return found
    return None


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
    errors = list(_validator().iter_errors(doc))
    if not errors:
        return
    first = errors[0]
    message = first.message if len(first.message) <= _MAX_MESSAGE else first.message[:_MAX_MESSAGE] + "…"
    more = f" (and {len(errors) - 1} more problem(s))" if len(errors) > 1 else ""
    raise ResultError(f"result file {source}: {field_path(first.absolute_path)}: {message}{more}. The file does not "
                      f"follow the result schema {result_schema()['$id']!r} (rapt_audit/pipeline/{SCHEMA_FILE}): "
                      "correct that field, or re-run the result with this rapt-audit to write it afresh.")


__all__ = ["SCHEMA_FILE", "field_path", "result_schema", "validate_result_document"]
