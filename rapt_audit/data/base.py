"""Dataset objects, the dataset registry and seeded, disjoint victim/attacker splits.

A loader turns files on disk into a :class:`Dataset` (all usable records plus what is known about
them). :func:`make_splits` then cuts four disjoint parts from it for one run:

* ``victim_train`` / ``victim_test`` — the user's data: the defense is fitted on the first, utility is
  measured and the release is attacked on the second;
* ``attacker_train`` / ``attacker_valid`` — the adversary's auxiliary data: attacks train on the
  first and select epochs or thresholds on the second. Never the victim's test split.
"""

from __future__ import annotations

import functools
import hashlib
import os
import sys
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from rapt_audit.api.errors import DataError
from rapt_audit.api.registry import Registry
from rapt_audit.api.types import AttackerData, Record

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: the same parser from PyPI
    import tomli as tomllib

#: Environment variable naming the data directory (``--data-dir`` takes precedence).
DATA_ENV = "RAPT_AUDIT_DATA"


@dataclass(frozen=True)
class Dataset:
    """A loaded dataset.

    Attributes:
        name: Registry name (``"sst2"``).
        records: Every usable record, in a deterministic order.
        label_names: Names of the task labels by index (empty when there is no task).
        task: One line naming the task (``"binary sentiment"``), empty when there is none.
        attribute_values: Private attribute name → its possible values, in a fixed order.
        entity_labels: Entity types present in gold spans (empty when there are none).
        fingerprint: sha256 over the source files' bytes (or the generator's parameters).
        source: Where the data was read from.
        synthetic: True for the generated demo corpus; every output must then say so.
        notes: Facts to record in results (age bin edges, protocol names, caveats).
    """

    name: str
    records: tuple[Record, ...]
    label_names: tuple[str, ...] = ()
    task: str = ""
    attribute_values: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    entity_labels: tuple[str, ...] = ()
    fingerprint: str = ""
    source: str = ""
    synthetic: bool = False
    notes: Mapping[str, Any] = field(default_factory=dict)

    @property
    def has_labels(self) -> bool:
        """Whether every record carries a task label."""
        return bool(self.records) and all(r.label is not None for r in self.records)

    @property
    def has_entities(self) -> bool:
        """Whether the dataset has gold entity spans."""
        return bool(self.entity_labels)


@dataclass(frozen=True)
class SplitSizes:
    """How many records each part of a run gets (``None``: an equal share of what is left)."""

    victim_train: int | None = None
    victim_test: int | None = None
    attacker_train: int | None = None
    attacker_valid: int | None = None


@dataclass(frozen=True)
class Splits:
    """Four disjoint parts of one dataset for one run."""

    victim_train: tuple[Record, ...]
    victim_test: tuple[Record, ...]
    attacker_train: tuple[Record, ...]
    attacker_valid: tuple[Record, ...]

    @property
    def attacker(self) -> AttackerData:
        """The adversary's auxiliary data."""
        return AttackerData(self.attacker_train, self.attacker_valid)

    def sizes(self) -> dict[str, int]:
        """Part name → number of records (recorded in results)."""
        names = ("victim_train", "victim_test", "attacker_train", "attacker_valid")
        return {name: len(getattr(self, name)) for name in names}


class SplitSizeError(DataError):
    """Split sizes a dataset cannot provide; ``key`` names the split to lower first, so that a caller that
    read the sizes from a file (a benchmark's ``[splits]``) can point at its line."""

    def __init__(self, message: str, key: str) -> None:
        super().__init__(message)
        self.key = key


def assert_disjoint(*parts: Sequence[Record]) -> None:
    """Raise if any uid occurs in more than one part: the attacker never trains or selects on a victim record."""
    seen: dict[str, int] = {}
    for index, part in enumerate(parts):
        for record in part:
            if seen.setdefault(record.uid, index) != index:
                raise AssertionError(f"record {record.uid} is in two splits ({seen[record.uid]} and {index})")


def make_splits(dataset: Dataset, sizes: SplitSizes, *, seed: int) -> Splits:
    """Cut seeded, disjoint victim and attacker parts from ``dataset``.

    Records are shuffled once with ``seed``, then parts are taken in a fixed order. Parts with an
    explicit size get at most that many records; parts left at ``None`` share what remains equally.

    Raises:
        DataError: when the dataset cannot provide the requested sizes.
    """
    import numpy as np  # lazy (numpy)

    order = np.random.default_rng(seed).permutation(len(dataset.records))
    records = [dataset.records[i] for i in order]
    names = ("victim_train", "victim_test", "attacker_train", "attacker_valid")
    requested = {n: getattr(sizes, n) for n in names}
    fixed = sum(v for v in requested.values() if v is not None)
    open_parts = [n for n in names if requested[n] is None]
    if fixed > len(records) or (open_parts and fixed >= len(records)):
        _too_large(dataset.name, len(records), requested)
    share = (len(records) - fixed) // len(open_parts) if open_parts else 0
    parts: dict[str, tuple[Record, ...]] = {}
    start = 0
    for n in names:
        count = requested[n] if requested[n] is not None else share
        parts[n] = tuple(records[start:start + count])
        start += count
    for n in ("victim_train", "victim_test", "attacker_train"):
        if not parts[n]:
            raise DataError(f"split {n} of dataset {dataset.name!r} is empty; give it a positive size")
    splits = Splits(**parts)
    assert_disjoint(splits.victim_train, splits.victim_test, splits.attacker_train, splits.attacker_valid)
    return splits


def _too_large(name: str, n_records: int, requested: Mapping[str, int | None]) -> None:
    """Raise the one line for sizes beyond the dataset: the sizes, the record count and the split to lower."""
    given = {n: v for n, v in requested.items() if v is not None}
    key = max(given, key=lambda n: given[n])
    what = "alone is more than the dataset holds" if given[key] > n_records else "is the largest"
    left = [n for n, v in requested.items() if v is None]
    rest = f", leaving nothing for {', '.join(left)}" if left else ""
    raise SplitSizeError(
        f"dataset {name!r} has {n_records} records but the split sizes ask for {sum(given.values())} "
        f"({', '.join(f'{n}={v}' for n, v in given.items())}){rest}: data.{key}={given[key]} {what}; "
        f"lower them with --set data.<part>=N (data.{key} first) or use a larger dataset", key)


def resolve_data_dir(data_dir: str | os.PathLike[str] | None) -> Path | None:
    """``--data-dir`` if given, else ``$RAPT_AUDIT_DATA``, else ``None``."""
    value = data_dir if data_dir not in (None, "") else os.environ.get(DATA_ENV)
    return Path(value).expanduser() if value else None


def require_file(root: Path | None, relative: str, *, dataset: str) -> Path:
    """Return ``root/relative`` or raise a :class:`DataError` saying what is missing and where."""
    if root is None:
        raise DataError(
            f"dataset {dataset!r} needs a data directory: pass --data-dir DIR or set {DATA_ENV}=DIR "
            f"(DIR must contain {relative})")
    path = root / relative
    if not path.is_file():
        raise DataError(f"dataset {dataset!r}: expected file {relative} under {root} but {path} does not exist")
    return path


def fingerprint_files(paths: Sequence[Path]) -> str:
    """sha256 over the names and bytes of ``paths`` (the data fingerprint recorded in results)."""
    digest = hashlib.sha256()
    for path in paths:
        digest.update(path.name.encode("utf-8"))
        digest.update(path.read_bytes())
    return digest.hexdigest()


@dataclass(frozen=True)
class SplitFiles:
    """A dataset kept as one file per split, ``<data_dir>/<name>/<split><suffix>``: a :data:`Loader`.

    Attributes:
        name: The dataset's registry name, also its folder.
        read: Parses one split file into records with uids unique across splits.
        card: What ``catalog.toml`` says of the dataset (splits, suffix, summary, source, notes...).
    """

    name: str
    read: Callable[[Path, str], list[Record]]
    card: Mapping[str, Any]

    @property
    def summary(self) -> str:
        """The catalog's one-line summary (what ``rapt-audit ls datasets`` shows)."""
        return str(self.card["summary"])

    def __call__(self, data_dir: Path | None) -> Dataset:
        """Read every split file, in the catalog's order, into one :class:`Dataset`.

        Every file is checked to exist before any is read, so a missing file fails fast. The
        fingerprint covers the files' names and bytes; ``notes`` start with ``split_counts``.

        Raises:
            DataError: when the data directory or a file is missing (and whatever ``read`` raises).
        """
        card, splits = self.card, tuple(self.card["splits"])
        paths = [require_file(data_dir, f"{self.name}/{split}{card['suffix']}", dataset=self.name) for split in splits]
        records: list[Record] = []
        counts: dict[str, int] = {}
        for split, path in zip(splits, paths):
            part = self.read(path, split)
            counts[split] = len(part)
            records.extend(part)
        return Dataset(name=self.name, records=tuple(records), fingerprint=fingerprint_files(paths),
                       source=f"{card['source']} from {paths[0].parent}", task=card.get("task", ""),
                       label_names=tuple(card.get("label_names", ())),
                       entity_labels=tuple(card.get("entity_labels", ())),
                       notes={"split_counts": counts, **card.get("notes", {})})


@functools.lru_cache(maxsize=1)
def catalog() -> Mapping[str, Mapping[str, Any]]:
    """``catalog.toml``: dataset name → what is known of a dataset kept as one file per split."""
    return tomllib.loads(resources.files(__package__).joinpath("catalog.toml").read_text(encoding="utf-8"))


def register_split_files(name: str, read: Callable[[Path, str], list[Record]]) -> SplitFiles:
    """Register dataset ``name`` as ``catalog.toml`` describes it, its split files parsed by ``read``."""
    loader = SplitFiles(name, read, catalog()[name])
    DATASETS.add(name, loader, tags=tuple(loader.card["tags"]))
    return loader


#: Loader signature: ``loader(data_dir) -> Dataset``.
Loader = Callable[[Path | None], Dataset]

#: Dataset name → loader.
DATASETS: Registry[Loader] = Registry("dataset")
