"""Your own data: the columns of a file named by ``--dataset PATH`` mapped into a :class:`Dataset`.

The mapping comes from the ``data.*`` column keys (``--set data.text=review data.label=stars
data.attributes=gender,age``); :data:`COLUMN_KEYS` lists them. Without keys, the text is read from a
``text`` (else ``sentence``) column and the label from a ``label`` column when there is one.

How values become a :class:`Record`:

* ``text`` — a string; rows whose text is empty or missing are dropped and counted in the notes.
* ``label`` — any scalar; the distinct values, sorted (numbers in numeric order, then strings), are
  the classes ``0..k-1`` and their string forms the ``label_names`` (a Hugging Face ``ClassLabel``
  keeps its own names and order). ``data.label=`` (empty) audits without a task.
* ``attributes`` — strings; a missing cell leaves that record without the attribute (the attribute
  attacks score only records that carry it). A column of more than six distinct whole numbers (ages
  in years) is cut into six equal-frequency bins, as for Trustpilot; the edges are in the notes.
* ``entities`` — a list of ``{"start", "end", "label"}`` objects (``[start, end, label]`` triples
  also work), or in CSV a JSON string of one; character offsets ``[start, end)`` into the text.
* ``id`` — a stable uid per row (unique); without it a uid is ``<name>/<row>``.
* ``group`` — what the rows are split by (an author, a document, a conversation): rows of one group all go
  to one part of a run; a missing cell makes the row its own group. Without it every row is its own group.
"""

from __future__ import annotations

import hashlib
import json
import math
import numbers
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from rapt_audit.api.errors import DataError, UsageError
from rapt_audit.api.parsing import repeated
from rapt_audit.api.registry import closest
from rapt_audit.api.types import Record, Span
from rapt_audit.data.base import Dataset
from rapt_audit.data.files import Table, read_table
from rapt_audit.data.trustpilot import assign_bin, equal_frequency_bins

#: The ``data.*`` keys that name columns of a file dataset (all others are split sizes).
COLUMN_KEYS = ("text", "text_pair", "label", "attributes", "entities", "id", "group")
TEXT_DEFAULTS = ("text", "sentence")
LABEL_DEFAULT = "label"
#: A numeric attribute with more distinct whole numbers than this is cut into this many bins.
N_BINS = 6
#: Bump when the mapping of values into records changes: the fingerprint hashes it.
VERSION = "file-dataset-v1"
_MAX_LISTED = 5
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def normalize_columns(args: Mapping[str, Any]) -> dict[str, str]:
    """The canonical form of column keys: each a column name, ``attributes`` comma-separated.

    ``attributes`` may be a list (a TOML array) or ``"gender, age"``; an empty value means "not
    used" (``data.label=`` drops the label). Other keys are ignored (they are split sizes).

    Raises:
        UsageError: for a value that is not a name, an empty ``text`` or a repeated attribute.
    """
    out: dict[str, str] = {}
    for key in COLUMN_KEYS:
        if key not in args:
            continue
        value = args[key]
        if key == "attributes" and isinstance(value, (list, tuple)):
            items = [str(v).strip() for v in value]
        elif isinstance(value, (str, int)) and not isinstance(value, bool):
            items = [v.strip() for v in str(value).split(",")] if key == "attributes" else [str(value).strip()]
        else:
            raise UsageError(f"data.{key}={value!r} must name a column (a string)")
        items = [v for v in items if v]
        twice = sorted(repeated(items))
        if twice:
            raise UsageError(f"data.attributes lists {', '.join(twice)} more than once")
        if key == "text" and not items:
            raise UsageError("data.text= is empty; name the column that holds the text (data.text=COLUMN)")
        out[key] = ",".join(items)
    return out


@dataclass(frozen=True)
class Columns:
    """The columns actually read (after defaults), the part of the mapping the fingerprint covers."""

    text: str
    text_pair: str | None = None
    label: str | None = None
    attributes: tuple[str, ...] = ()
    entities: str | None = None
    id: str | None = None
    group: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """JSON form (notes and fingerprint): only the keys in use."""
        return {k: v for k, v in (("text", self.text), ("text_pair", self.text_pair), ("label", self.label),
                                  ("attributes", list(self.attributes)), ("entities", self.entities),
                                  ("id", self.id), ("group", self.group)) if v}


def resolve_columns(table: Table, args: Mapping[str, str]) -> Columns:
    """Apply the defaults and check that every named column exists in ``table``.

    Raises:
        DataError: naming the missing column, the closest present ones and every column present.
    """
    args = normalize_columns(args)
    present = list(table.columns)

    def need(key: str, column: str) -> str:
        if column not in table.columns:
            near = closest(column, present)
            hint = f" Did you mean {', '.join(map(repr, near))}?" if near else ""
            raise DataError(f"--dataset {table.path}: no column {column!r} (data.{key}).{hint} Columns present: "
                            f"{', '.join(present)}. Name the right one with --set data.{key}=COLUMN.")
        return column

    if "text" in args:
        text = need("text", args["text"])
    else:
        text = next((c for c in TEXT_DEFAULTS if c in table.columns), "")
        if not text:
            near = closest("text", present)
            hint = f" (perhaps {', '.join(map(repr, near))}?)" if near else ""
            raise DataError(f"--dataset {table.path}: no text column: there is neither 'text' nor 'sentence'. "
                            f"Columns present: {', '.join(present)}. Name the text column with --set "
                            f"data.text=COLUMN{hint}.")
    label = args.get("label", LABEL_DEFAULT if LABEL_DEFAULT in table.columns else "")
    optional = {k: need(k, args[k]) if args.get(k) else None for k in ("text_pair", "entities", "id", "group")}
    attributes = tuple(need("attributes", a) for a in args.get("attributes", "").split(",") if a)
    return Columns(text=text, label=need("label", label) if label else None, attributes=attributes, **optional)


def dataset_name(path: Path) -> str:
    """``file-<file name>``: readable, stable, and safe in the run directory's name."""
    return "file-" + (_UNSAFE.sub("-", path.name).strip("-.") or "data")


def load_file_dataset(path: str | Path, columns: Mapping[str, Any] | None = None) -> Dataset:
    """Read a CSV/TSV, JSON Lines/JSON or Parquet file, or a saved Hugging Face dataset, as a :class:`Dataset`.

    Args:
        path: The file, or the ``save_to_disk`` directory (a DatasetDict's splits are concatenated).
        columns: The ``data.*`` column keys (:data:`COLUMN_KEYS`); defaults as the module says.

    Raises:
        DataError: for a missing or malformed file, a missing column (listing those present), a
            missing label, a non-string text, a bad entity span or a duplicate id, naming the rows.
    """
    table = read_table(Path(path))
    cols = resolve_columns(table, columns or {})
    name = dataset_name(table.path)
    texts = table.columns[cols.text]
    keep, empty, not_text = [], 0, []
    for i, value in enumerate(texts):
        if value is None or (isinstance(value, str) and not value.strip()):
            empty += 1
        elif not isinstance(value, str):
            not_text.append(i)
        else:
            keep.append(i)
    if not_text:
        raise DataError(_rows_message(table, not_text, f"column {cols.text!r} (data.text) holds a value "
                                      f"of type {type(texts[not_text[0]]).__name__}, not text"))
    if not keep:
        raise DataError(f"--dataset {table.path}: every row's text (column {cols.text!r}) is empty")
    notes: dict[str, Any] = {"format": table.fmt, "columns": cols.as_dict(), "rows_read": len(texts),
                             "dropped_empty_text": empty}
    if table.split_counts:
        notes["split_counts"] = dict(table.split_counts)
    labels, label_names = _labels(table, cols.label, keep, notes) if cols.label else ([None] * len(keep), ())
    attributes, attribute_values = _attributes(table, cols.attributes, keep, notes)
    pairs = _pairs(table, cols.text_pair, keep)
    entities = _entities(table, cols.entities, cols.text, keep)
    uids = _uids(table, cols.id, keep, name)
    groups = _scalars(table, cols.group, "group", keep) if cols.group else [None] * len(keep)
    records = tuple(Record(uid=uid, text=texts[i], label=label, attributes=attrs, entities=spans, text_pair=pair,
                           group=group)
                    for uid, i, label, attrs, spans, pair, group in zip(uids, keep, labels, attributes, entities,
                                                                         pairs, groups))
    entity_labels = tuple(sorted({s.label for r in records for s in r.entities}))
    if cols.entities:
        notes["records_with_entities"] = sum(bool(r.entities) for r in records)
    notes["caveats"] = ("your own data, read where it lies: results compare only with runs on the same file bytes "
                        "and the same column mapping (both are in the fingerprint)")
    digest = hashlib.sha256(f"{VERSION}\n{table.fingerprint}\n".encode("utf-8"))
    digest.update(json.dumps(cols.as_dict(), sort_keys=True).encode("utf-8"))
    task = f"classification of column {cols.label!r} ({len(label_names)} classes)" if cols.label else ""
    return Dataset(name=name, records=records, label_names=label_names, task=task,
                   attribute_values=attribute_values, entity_labels=entity_labels, fingerprint=digest.hexdigest(),
                   source=str(table.path), notes=notes)


def _rows_message(table: Table, rows: Sequence[int], problem: str) -> str:
    """``<path>: row 3, row 7 (+2 more): <problem>``, rows as in the uids (0-based, header not counted); for
    JSON Lines ``<path>:<line>: row 3 (line 4), ...``, so that an editor jumps to the first row at fault."""
    lines = table.lines
    shown = ", ".join(f"row {table.row_ids[i]}" + (f" (line {lines[i]})" if lines else "") for i in rows[:_MAX_LISTED])
    more = f" (+{len(rows) - _MAX_LISTED} more)" if len(rows) > _MAX_LISTED else ""
    where = f"{table.path}:{lines[rows[0]]}" if lines and rows else str(table.path)
    return f"--dataset {where}: {shown}{more} (0-based, header not counted): {problem}"


def _category(value: Any) -> str | None:
    """A scalar cell's string form (whole floats as integers: a column with gaps reads 3 as 3.0); None if
    the cell is missing, ``ValueError`` if it is not a scalar."""
    if value is None:
        return None
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, numbers.Integral):
        return str(int(value))
    if isinstance(value, numbers.Real):
        return str(int(value)) if float(value).is_integer() else repr(float(value))
    if isinstance(value, str):
        return value.strip() or None
    raise ValueError(type(value).__name__)


def _order(name: str) -> tuple[int, float, str]:
    """Sort key of a class name: finite numbers first, in numeric order, then strings."""
    try:
        number = float(name)
    except ValueError:
        return (1, 0.0, name)
    return (0, number, name) if math.isfinite(number) else (1, 0.0, name)


def _scalars(table: Table, column: str, key: str, keep: Sequence[int]) -> list[str | None]:
    """The string forms of ``column`` for the kept rows (a ClassLabel index as its name), or a DataError
    naming the cells that are lists or objects."""
    names = table.categories.get(column)
    values, bad = [], []
    for i in keep:
        value = table.columns[column][i]
        if names and isinstance(value, int) and not isinstance(value, bool):
            # Hugging Face marks a missing class with -1 (GLUE test splits): missing, not class "-1".
            value = names[value] if 0 <= value < len(names) else None
        try:
            values.append(_category(value))
        except ValueError:
            bad.append(i)
    if bad:
        raise DataError(_rows_message(table, bad, f"column {column!r} (data.{key}) holds a list or object; "
                                      "it needs one value per row"))
    return values


def _labels(table: Table, column: str, keep: Sequence[int], notes: dict[str, Any]) -> tuple[list[int], tuple[str, ...]]:
    """Label indices and names; a ClassLabel column keeps its names and order."""
    names = table.categories.get(column)
    values = _scalars(table, column, "label", keep)
    missing = [keep[j] for j, v in enumerate(values) if v is None]
    if missing:
        raise DataError(_rows_message(table, missing, f"no label in column {column!r}. Fill it in, drop those "
                                      "rows, or audit without a task with --set data.label= (empty)"))
    classes = tuple(names) if names else tuple(sorted(set(values), key=_order))
    if len(set(values)) < 2:
        raise DataError(f"--dataset {table.path}: label column {column!r} holds the single value {values[0]!r}; "
                        "utility needs at least two classes. Name another column with --set data.label=COLUMN, "
                        "or audit privacy alone with --set data.label= (empty)")
    index = {c: k for k, c in enumerate(classes)}
    notes["label_counts"] = {c: values.count(c) for c in classes}
    return [index[v] for v in values], classes


def _attributes(table: Table, columns: Sequence[str], keep: Sequence[int],
                notes: dict[str, Any]) -> tuple[list[dict[str, str]], dict[str, tuple[str, ...]]]:
    """Per kept row its attributes (missing cells left out), and each attribute's values in order."""
    per_row: list[dict[str, str]] = [{} for _ in keep]
    values_of: dict[str, tuple[str, ...]] = {}
    for column in columns:
        values = _scalars(table, column, "attributes", keep)
        present = [v for v in values if v is not None]
        if not present:
            raise DataError(f"--dataset {table.path}: attribute column {column!r} is empty in every row with text")
        if len(present) < len(values):
            notes.setdefault("missing_attributes", {})[column] = len(values) - len(present)
        distinct = set(present)
        if len(distinct) > N_BINS and all(re.fullmatch(r"-?\d+", v) for v in distinct):
            # Ages in years would make one class per age; the attacks need a few well-filled classes.
            edges, labels = equal_frequency_bins([int(v) for v in present], N_BINS)
            values = [assign_bin(int(v), edges, labels) if v is not None else None for v in values]
            notes.setdefault("attribute_bins", {})[column] = {"edges": edges, "labels": labels,
                                                               "rule": "equal-frequency, as Trustpilot's age bins"}
            values_of[column] = tuple(labels)
        else:
            values_of[column] = tuple(sorted(distinct, key=_order))
        for row, value in zip(per_row, values):
            if value is not None:
                row[column] = value
    return per_row, values_of


def _pairs(table: Table, column: str | None, keep: Sequence[int]) -> list[str | None]:
    if column is None:
        return [None] * len(keep)
    values = [table.columns[column][i] for i in keep]
    bad = [i for i, v in zip(keep, values) if not isinstance(v, str)]
    if bad:
        raise DataError(_rows_message(table, bad, f"column {column!r} (data.text_pair) holds no text; a pair "
                                      "task needs a second text in every row"))
    return values


def _entities(table: Table, column: str | None, text_column: str, keep: Sequence[int]) -> list[tuple[Span, ...]]:
    if column is None:
        return [()] * len(keep)
    out = []
    for i in keep:
        try:
            out.append(parse_spans(table.columns[column][i], table.columns[text_column][i]))
        except ValueError as exc:
            raise DataError(_rows_message(table, [i], f"entities (column {column!r}): {exc}")) from None
    return out


def parse_spans(value: Any, text: str) -> tuple[Span, ...]:
    """Gold spans from one entities cell: a list of ``{start, end, label}`` / ``[start, end, label]``, a JSON
    string of one, or Hugging Face's ``{start: [...], end: [...], label: [...]}``; sorted by position.

    Raises:
        ValueError: saying what is wrong (not a list, a non-integer offset, a span outside the text).
    """
    if value is None:
        return ()
    if isinstance(value, str):
        if not value.strip():
            return ()
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise ValueError(f"not JSON ({exc.msg}); write a JSON list such as "
                             '[{"start": 0, "end": 5, "label": "PER"}]') from None
    if isinstance(value, dict) and {"start", "end", "label"} <= set(value):
        value = [dict(zip(("start", "end", "label"), t)) for t in zip(value["start"], value["end"], value["label"])]
    if not isinstance(value, (list, tuple)):
        raise ValueError(f"expected a list of {{start, end, label}} objects, got a {type(value).__name__}")
    spans = []
    for item in value:
        if isinstance(item, dict) and {"start", "end", "label"} <= set(item):
            start, end, label = item["start"], item["end"], item["label"]
        elif isinstance(item, (list, tuple)) and len(item) == 3:
            start, end, label = item
        else:
            raise ValueError(f"{item!r} is not a {{start, end, label}} object")
        if not all(isinstance(v, numbers.Real) and not isinstance(v, bool) and float(v).is_integer()
                   for v in (start, end)):
            raise ValueError(f"offsets of {item!r} must be whole numbers")
        if not isinstance(label, str) or not label.strip():
            raise ValueError(f"label of {item!r} must be a non-empty string")
        start, end = int(start), int(end)
        if not 0 <= start < end <= len(text):
            raise ValueError(f"span [{start}, {end}) {label!r} is not inside the text of {len(text)} characters "
                             "(offsets are characters, end exclusive)")
        spans.append(Span(start, end, label.strip()))
    return tuple(sorted(spans, key=lambda s: (s.start, s.end, s.label)))


def _uids(table: Table, column: str | None, keep: Sequence[int], name: str) -> list[str]:
    if column is None:
        return [f"{name}/{table.row_ids[i]}" for i in keep]
    uids = _scalars(table, column, "id", keep)
    missing = [i for i, u in zip(keep, uids) if u is None]
    if missing:
        raise DataError(_rows_message(table, missing, f"no id in column {column!r} (data.id)"))
    twice = sorted((u for u, n in Counter(uids).items() if n > 1), key=_order)
    if twice:
        raise DataError(f"--dataset {table.path}: ids in column {column!r} (data.id) must be unique; repeated: "
                        f"{', '.join(map(repr, twice[:_MAX_LISTED]))}" + (" ..." if len(twice) > _MAX_LISTED else ""))
    return uids  # type: ignore[return-value]


__all__ = ["COLUMN_KEYS", "Columns", "dataset_name", "load_file_dataset", "normalize_columns", "parse_spans",
           "resolve_columns"]
