"""Datasets: the registry of loaders, seeded disjoint splits and a memoised :func:`load_dataset`.

Importing this package registers every built-in loader (``synthetic``, ``sst2``, ``qqp``,
``trustpilot``, ``trustpilot_uk``, ``tp_uk_raw``, ``conll2003``, ``blogs``, ``wikitext2``). The loader
modules import nothing heavy at import time, so this stays cheap. :mod:`~rapt_audit.data.public`
gives the public calibration text.

May import: :mod:`rapt_audit.api` (``RunContext`` in type hints only).
"""

from __future__ import annotations

import os

# Imported for their side effect: each module registers its loader(s) in DATASETS.
from rapt_audit.data import blogs, conll, qqp, sst2, synthetic, trustpilot, wikitext  # noqa: F401
from rapt_audit.data.base import (
    DATA_ENV,
    DATASETS,
    Dataset,
    Splits,
    SplitSizes,
    assert_disjoint,
    make_splits,
    resolve_data_dir,
)

__all__ = ["DATA_ENV", "DATASETS", "Dataset", "SplitSizes", "Splits", "assert_disjoint", "clear_cache",
           "load_dataset", "make_splits", "resolve_data_dir"]

#: (name, resolved data dir or None) → loaded dataset; datasets are immutable, so sharing is safe.
_CACHE: dict[tuple[str, str | None], Dataset] = {}


def load_dataset(name: str, data_dir: str | os.PathLike[str] | None = None) -> Dataset:
    """Load the dataset registered as ``name``, memoised per (name, resolved data directory).

    Args:
        name: Registry name (``"sst2"``).
        data_dir: ``--data-dir``; falls back to ``$RAPT_AUDIT_DATA`` (see :func:`resolve_data_dir`).

    Raises:
        UnknownNameError: for an unknown name, with did-you-mean suggestions.
        DataError: when the data directory or one of the dataset's files is missing or malformed.
    """
    loader = DATASETS.get(name)
    root = resolve_data_dir(data_dir)
    key = (name, str(root.resolve()) if root is not None else None)
    if key not in _CACHE:
        _CACHE[key] = loader(root)
    return _CACHE[key]


def clear_cache() -> None:
    """Forget every memoised dataset (tests, or after the files on disk changed)."""
    _CACHE.clear()
