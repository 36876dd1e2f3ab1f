"""Reading the user's own data: CSV/TSV, JSON Lines/JSON, Parquet, Hugging Face datasets saved to disk.

``--dataset PATH`` names such a file (or a ``save_to_disk`` directory). This module only turns it
into a :class:`Table` — column name → one value per row, missing cells as ``None`` — and a sha256
over the bytes read; :mod:`~rapt_audit.data.columns` maps the columns into records.

Files are read into memory once: the same bytes are fingerprinted and parsed, so a file that
changes while it is read cannot give a fingerprint of other data. CSV is checked to be UTF-8 first,
so a bad byte is reported by its offset rather than by pandas' chunk-relative position. JSON Lines
is parsed with the standard library, which gives exact line numbers and keeps entity lists as lists.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from rapt_audit.api.errors import DataError
from rapt_audit.api.parsing import TextDecodeError, decode_text
from rapt_audit.data.base import DATASETS

#: File suffix → format read.
SUFFIXES: Mapping[str, str] = {".csv": "csv", ".tsv": "tsv", ".jsonl": "jsonl", ".ndjson": "jsonl",
                               ".json": "json", ".parquet": "parquet"}
#: How to get the optional libraries Parquet and saved Hugging Face datasets need.
DATA_EXTRA = "pip install 'rapt-audit[data]'"
_SUPPORTED = ", ".join(SUFFIXES) + " or a directory written by datasets' save_to_disk"


@dataclass(frozen=True)
class Table:
    """A data file's rows, column by column.

    Attributes:
        path: The absolute path read.
        fmt: ``csv``, ``tsv``, ``jsonl``, ``json``, ``parquet``, ``hf`` or ``hf_dict``.
        columns: Column name → one value per row (``None`` for a missing cell), in file order.
        row_ids: The uid suffix of each row: its 0-based index, or ``<split>/<index>`` for a DatasetDict.
        fingerprint: sha256 over the bytes read (for a directory: each file's relative name and bytes).
        categories: Column → class names, for Hugging Face ``ClassLabel`` columns (values are indices).
        split_counts: Split → rows, for a DatasetDict.
        lines: The 1-based file line of each row, for JSON Lines (empty for other formats).
    """

    path: Path
    fmt: str
    columns: dict[str, list[Any]]
    row_ids: list[str]
    fingerprint: str
    categories: dict[str, tuple[str, ...]] = field(default_factory=dict)
    split_counts: dict[str, int] = field(default_factory=dict)
    lines: list[int] = field(default_factory=list)


def is_file_dataset(name: str | None) -> bool:
    """Whether ``--dataset name`` names a file or directory rather than a built-in dataset.

    A path has a separator, or a suffix (built-in names have none), or exists on disk. A built-in
    name wins over a same-named directory in the working directory: write ``./sst2`` for that.
    """
    if not name:
        return False
    if "/" in name or os.sep in name or (os.altsep and os.altsep in name):
        return True
    if name in DATASETS:
        return False
    return bool(Path(name).suffix) or Path(name).exists()


def file_format(path: Path) -> str:
    """The format of ``path``: a :data:`SUFFIXES` value, or ``hf`` / ``hf_dict`` for a saved dataset.

    Raises:
        DataError: when the path does not exist, is neither a regular file nor a directory (a FIFO),
            has an unsupported suffix, or is a directory that ``save_to_disk`` did not write.
    """
    if not path.exists():
        raise DataError(f"--dataset {path}: no such file or directory; give the path of a {_SUPPORTED}")
    if path.is_dir():
        if (path / "dataset_dict.json").is_file():
            return "hf_dict"
        if (path / "state.json").is_file():
            return "hf"
        raise DataError(f"--dataset {path} is a directory but not a Hugging Face dataset saved with "
                        "save_to_disk (it holds neither dataset_dict.json nor state.json); point --dataset at "
                        f"a data file instead ({', '.join(SUFFIXES)})")
    if not path.is_file():
        # A FIFO, socket or device would block or never end when read: refuse it before opening it.
        raise DataError(f"--dataset {path} is not a regular file (a pipe, socket or device); write the data to a "
                        f"file first and give its path ({_SUPPORTED})")
    fmt = SUFFIXES.get(path.suffix.lower())
    if fmt is None:
        raise DataError(f"--dataset {path}: unsupported file type {path.suffix or '(no suffix)'!r}; "
                        f"supported: {_SUPPORTED}")
    return fmt


def read_table(path: Path) -> Table:
    """Read ``path`` (see :func:`file_format`) into a :class:`Table`.

    Raises:
        DataError: for a missing, empty or malformed file, invalid UTF-8 (with its byte offset), or
            a missing optional library (naming ``rapt-audit[data]``).
    """
    path = path.expanduser().absolute()
    fmt = file_format(path)
    if fmt in ("hf", "hf_dict"):
        return _read_saved(path, fmt)
    raw = path.read_bytes()
    if not raw.strip():
        raise DataError(f"--dataset {path}: the file is empty; it needs a header (or one object per line) "
                        "and at least one row")
    fingerprint = hashlib.sha256(raw).hexdigest()
    lines: list[int] = []
    if fmt == "parquet":
        columns = _read_parquet(raw, path)
    elif fmt in ("jsonl", "json"):
        columns, lines = _read_json(_utf8(raw, path), path, fmt)
    else:
        columns = _read_csv(_utf8(raw, path), path, sep="\t" if fmt == "tsv" else ",")
    n = len(next(iter(columns.values()), []))
    if n == 0:
        raise DataError(f"--dataset {path}: the file has columns ({', '.join(columns) or 'none'}) but no rows")
    return Table(path, fmt, columns, [str(i) for i in range(n)], fingerprint, lines=lines)


def _utf8(raw: bytes, path: Path) -> str:
    """``raw`` decoded as UTF-8 (a byte-order mark dropped), or a DataError naming the first bad byte's line
    and column (:func:`rapt_audit.api.parsing.decode_text`, as for benchmark and config files)."""
    try:
        return decode_text(raw, source=f"--dataset {path}")
    except TextDecodeError as exc:
        raise DataError(f"{exc} (e.g. iconv -f latin1 -t utf-8)") from None


def _read_csv(text: str, path: Path, *, sep: str) -> dict[str, list[Any]]:
    import pandas as pd  # lazy (pandas)

    try:
        # Every cell as a string and nothing turned into NaN: "NA" or "null" in a review is text, and
        # an empty cell stays "" (an empty text is dropped, an empty label or attribute is missing).
        frame = pd.read_csv(io.StringIO(text), sep=sep, dtype=str, keep_default_na=False, na_filter=False)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, ValueError) as exc:
        raise DataError(f"--dataset {path}: not a valid {'TSV' if sep == chr(9) else 'CSV'} file ({exc})") from None
    return {str(c): [None if v == "" else v for v in frame[c].tolist()] for c in frame.columns}


def _read_json(text: str, path: Path, fmt: str) -> tuple[dict[str, list[Any]], list[int]]:
    """JSON Lines (one object per line), or for ``.json`` also one array of objects; with each object's line
    (JSON Lines only)."""
    objects: list[tuple[str, Any]] = []
    lines: list[int] = []
    if fmt == "json" and text.lstrip().startswith("["):
        try:
            items = json.loads(text, parse_constant=_json_constant)
        except json.JSONDecodeError as exc:
            raise DataError(f"--dataset {path}: not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") \
                from None
        objects = [(f"item {i}", obj) for i, obj in enumerate(items)]
    else:
        for number, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                objects.append((f"line {number}", json.loads(line, parse_constant=_json_constant)))
                lines.append(number)
            except json.JSONDecodeError as exc:
                raise DataError(f"--dataset {path}: line {number} is not JSON ({exc.msg} at column {exc.colno}); "
                                "JSON Lines needs one object per line") from None
    names: dict[str, None] = {}
    for where, obj in objects:
        if not isinstance(obj, dict):
            raise DataError(f"--dataset {path}: {where} is a JSON {type(obj).__name__}, not an object")
        names.update(dict.fromkeys(obj))
    # Rows may lack keys other rows have: the cell is then missing (None), as an empty CSV cell.
    return {name: [obj.get(name) for _, obj in objects] for name in names}, lines


def _json_constant(name: str) -> float | None:
    """What Python's json makes of the non-standard ``NaN`` / ``Infinity``: NaN is a missing cell, as Parquet's
    NaN and JSON's null are (``json.dumps`` writes a pandas gap as NaN), never a class or attribute ``nan``."""
    return None if name == "NaN" else float(name)


def _read_parquet(raw: bytes, path: Path) -> dict[str, list[Any]]:
    import pandas as pd  # lazy (pandas)

    try:
        frame = pd.read_parquet(io.BytesIO(raw))
    except ImportError:
        raise DataError(f"--dataset {path}: reading Parquet needs pyarrow: {DATA_EXTRA}") from None
    except (OSError, ValueError) as exc:
        raise DataError(f"--dataset {path}: not a valid Parquet file ({exc})") from None
    return {str(c): [_plain(v) for v in frame[c].tolist()] for c in frame.columns}


def _plain(value: Any) -> Any:
    """A cell as plain Python: NaN / NA → None, numpy arrays (Parquet lists) → lists."""
    if value is None:
        return None
    if isinstance(value, float) and value != value:
        return None
    if type(value).__name__ in ("NAType", "NaTType"):
        return None
    if hasattr(value, "tolist") and not isinstance(value, (str, bytes)):
        return value.tolist()
    return value


def _read_saved(path: Path, fmt: str) -> Table:
    """A ``save_to_disk`` directory: a Dataset, or a DatasetDict whose splits are concatenated in saved order."""
    try:
        import datasets  # lazy (datasets)
    except ImportError:
        raise DataError(f"--dataset {path}: reading a saved Hugging Face dataset needs `datasets`: {DATA_EXTRA}") \
            from None
    fingerprint = fingerprint_directory(path)
    try:
        loaded = datasets.load_from_disk(str(path))
    except (OSError, ValueError, KeyError) as exc:
        raise DataError(f"--dataset {path}: datasets.load_from_disk failed ({exc})") from None
    parts = list(loaded.items()) if fmt == "hf_dict" else [(None, loaded)]
    columns: dict[str, list[Any]] = {}
    row_ids: list[str] = []
    categories: dict[str, tuple[str, ...]] = {}
    counts: dict[str, int] = {}
    for split, part in parts:
        for name, feature in part.features.items():
            if isinstance(feature, datasets.ClassLabel):
                categories.setdefault(name, tuple(feature.names))
        before = len(row_ids)
        data = part.with_format(None).to_dict()  # plain Python lists, whatever format was saved
        # A column missing from some split is missing (None) in that split's rows.
        for name in data:
            columns.setdefault(name, [None] * before)
        for name, values in columns.items():
            values.extend(data.get(name, [None] * len(part)))
        row_ids += [f"{split}/{i}" if split is not None else str(i) for i in range(len(part))]
        if split is not None:
            counts[split] = len(part)
    if not row_ids:
        raise DataError(f"--dataset {path}: the saved dataset has no rows")
    return Table(path, fmt, columns, row_ids, fingerprint, categories, counts)


def fingerprint_directory(root: Path) -> str:
    """sha256 over every file under ``root`` in sorted order: its name relative to ``root``, then its bytes.

    Hidden files (``.DS_Store``, editor files) are skipped: ``load_from_disk`` never reads them.
    """
    digest = hashlib.sha256()
    files = sorted(p for p in root.rglob("*") if p.is_file()
                   and not any(part.startswith(".") for part in p.relative_to(root).parts))
    for file in files:
        name = file.relative_to(root).as_posix().encode("utf-8")
        data = file.read_bytes()
        # Lengths first, so that no two different trees hash the same bytes.
        digest.update(len(name).to_bytes(8, "big") + name + len(data).to_bytes(8, "big"))
        digest.update(data)
    return digest.hexdigest()


def stat_key(path: Path) -> tuple[tuple[str, int, int], ...]:
    """Size and modification time of ``path`` (every file under it, for a directory): a memo key part,
    so that a file edited between two loads in one process is read again."""
    path = path.expanduser()
    if not path.exists():
        return ()
    files = sorted(path.rglob("*")) if path.is_dir() else [path]
    return tuple((str(f), f.stat().st_size, f.stat().st_mtime_ns) for f in files if f.is_file())


__all__ = ["DATA_EXTRA", "SUFFIXES", "Table", "file_format", "fingerprint_directory", "is_file_dataset",
           "read_table", "stat_key"]
