"""Datasets: the registry of loaders, seeded disjoint splits and a memoised :func:`load_dataset`.

Importing this package registers every built-in loader (``synthetic``, ``sst2``, ``qqp``,
``trustpilot``, ``trustpilot_uk``, ``tp_uk_raw``, ``conll2003``, ``blogs``, ``wikitext2``). The loader
modules import nothing heavy at import time, so this stays cheap. :mod:`~rapt_audit.data.public`
gives the public calibration text.

:func:`load_dataset` also reads the user's own data: a name that is a path (``reviews.csv``,
``data/tickets.parquet``, a ``save_to_disk`` directory) is read by :mod:`~rapt_audit.data.files`
and mapped into records by :mod:`~rapt_audit.data.columns` with the ``data.*`` column keys.

May import: :mod:`rapt_audit.api` (the ``ctx`` it is handed is typed by :class:`rapt_audit.api.context.RunContext`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping

from rapt_audit.api.errors import UsageError

# Imported for their side effect: each module registers its loader(s) in DATASETS.
from rapt_audit.data import blogs, conll, qqp, sst2, synthetic, trustpilot, wikitext  # noqa: F401
from rapt_audit.data.base import (
    DATA_ENV,
    DATASETS,
    Dataset,
    SplitSizeError,
    Splits,
    SplitSizes,
    assert_disjoint,
    make_splits,
    resolve_data_dir,
)
from rapt_audit.data.columns import COLUMN_KEYS, load_file_dataset, normalize_columns
from rapt_audit.data.files import is_file_dataset, stat_key

__all__ = ["COLUMN_KEYS", "DATA_ENV", "DATASETS", "Dataset", "SplitSizeError", "SplitSizes", "Splits",
           "assert_disjoint", "clear_cache", "is_file_dataset", "load_dataset", "make_splits", "resolve_data_dir"]

#: Memo key → loaded dataset; datasets are immutable, so sharing is safe. A built-in dataset is keyed by
#: (name, resolved data dir); a file by its absolute path, size and mtime, and the column mapping.
_CACHE: dict[tuple[Any, ...], Dataset] = {}


def load_dataset(name: str, data_dir: str | os.PathLike[str] | None = None, *,
                 columns: Mapping[str, Any] | None = None) -> Dataset:
    """Load the dataset registered as ``name``, or the data file ``name`` is the path of; memoised.

    Args:
        name: Registry name (``"sst2"``), or a path (see :func:`~rapt_audit.data.files.is_file_dataset`).
        data_dir: ``--data-dir``; falls back to ``$RAPT_AUDIT_DATA`` (see :func:`resolve_data_dir`).
            Not used for a path.
        columns: The ``data.*`` column keys of a file dataset (:data:`COLUMN_KEYS`); other keys
            (split sizes) are ignored, so a run's whole ``data_args`` may be passed.

    Raises:
        UnknownNameError: for an unknown name, with did-you-mean suggestions.
        UsageError: when column keys are given for a built-in dataset.
        DataError: when the data directory or one of the dataset's files is missing or malformed.
    """
    mapping = normalize_columns(columns or {})
    if is_file_dataset(name):
        path = Path(name).expanduser().absolute()
        key = ("file", str(path), stat_key(path), tuple(sorted(mapping.items())))
        if key not in _CACHE:
            _CACHE[key] = load_file_dataset(path, mapping)
        return _CACHE[key]
    if mapping:
        raise UsageError(f"data.{', data.'.join(mapping)} name columns of your own data file; they apply only to "
                         f"--dataset PATH (a .csv, .tsv, .jsonl, .json or .parquet file, or a save_to_disk "
                         f"directory); dataset {name!r} is not a path to a data file")
    loader = DATASETS.get(name)
    root = resolve_data_dir(data_dir)
    key = (name, str(root.resolve()) if root is not None else None)
    if key not in _CACHE:
        _CACHE[key] = loader(root)
    return _CACHE[key]


def clear_cache() -> None:
    """Forget every memoised dataset (tests, or after the files on disk changed)."""
    _CACHE.clear()
