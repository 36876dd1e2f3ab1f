"""Dataset objects, the dataset registry and seeded, disjoint victim/attacker splits.

A loader turns files on disk into a :class:`Dataset` (all usable records plus what is known about
them). :func:`make_splits` then cuts four disjoint parts from it for one run:

* ``victim_train`` / ``victim_test`` — the user's data: the defense is fitted on the first, utility is
  measured and the release is attacked on the second;
* ``attacker_train`` / ``attacker_valid`` — the adversary's auxiliary data: attacks train on the
  first and select epochs or thresholds on the second. Never the victim's test split.

The parts are disjoint by *group* (``Record.group``: SST-2's review sentence, a blog's author, a CoNLL
document), not only by row, and the victim test holds whole texts only (:mod:`~rapt_audit.data.overlap`), so no
victim-test record lies word for word inside a record of another part (issue #61).
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
from rapt_audit.data.overlap import group_key, testable_uids

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

    @functools.cached_property
    def testable(self) -> frozenset[str]:
        """The uids a victim test may hold (:func:`~rapt_audit.data.overlap.testable_uids`), computed once."""
        return testable_uids(self.records)


@dataclass(frozen=True)
class SplitSizes:
    """How many records each part of a run gets (``None``: an equal share of the groups left, :func:`make_splits`)."""

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
    """Cut seeded victim and attacker parts from ``dataset``, disjoint by group (``Record.group``).

    The groups (a record without one is its own group) are shuffled once with ``seed``; the parts with an
    explicit size are filled first, in the order victim train, victim test, attacker train, attacker valid,
    each from the groups not yet used, in the shuffled order, until it holds that many records. The parts
    left at ``None`` then share the remaining groups equally (as many groups each), so with one record per
    group and every size given, or none, the cut is the row cut of before. A group goes to one part only:
    the group that would overflow a part gives it the records that fit (the first, in dataset order) and the
    rest of that group is left out of the run, never put in another part. The victim test takes only the
    records :attr:`Dataset.testable` names (whole texts; SST-2: its whole sentences) — a group's other records
    are left out — and passes over the groups that have none, which stay for the parts after it.

    Raises:
        DataError: when the dataset cannot provide the requested sizes.
    """
    import numpy as np  # lazy (numpy)

    groups: dict[tuple[bool, str], list[Record]] = {}
    for record in dataset.records:
        groups.setdefault(group_key(record), []).append(record)
    members = list(groups.values())
    queue = [members[i] for i in np.random.default_rng(seed).permutation(len(members))]
    names = ("victim_train", "victim_test", "attacker_train", "attacker_valid")
    requested = {n: getattr(sizes, n) for n in names}
    fixed = sum(v for v in requested.values() if v is not None)
    open_parts = [n for n in names if requested[n] is None]
    if fixed > len(dataset.records) or (open_parts and fixed >= len(dataset.records)):
        _too_large(dataset.name, len(dataset.records), requested)
    testable = dataset.testable
    if requested["victim_test"] is not None and requested["victim_test"] > len(testable):
        raise SplitSizeError(
            f"dataset {dataset.name!r} has {len(testable)} records a victim test may hold (whole texts, each in "
            f"one group) but data.victim_test={requested['victim_test']}; lower it with --set "
            f"data.victim_test=N", "victim_test")
    parts: dict[str, tuple[Record, ...]] = {}
    for n in (n for n in names if requested[n] is not None):
        parts[n], queue = _fill(queue, requested[n], testable if n == "victim_test" else None)
    share = len(queue) // len(open_parts) if open_parts else 0
    for n in open_parts:
        # An open part takes ``share`` groups; the victim test passes over those it cannot test.
        parts[n], queue = _fill(queue, None, testable if n == "victim_test" else None, groups=share)
    for n in ("victim_train", "victim_test", "attacker_train"):
        if not parts[n]:
            raise DataError(f"split {n} of dataset {dataset.name!r} is empty; give it a positive size")
    splits = Splits(**{n: parts[n] for n in names})
    assert_disjoint(splits.victim_train, splits.victim_test, splits.attacker_train, splits.attacker_valid)
    return splits


def _fill(queue: list[list[Record]], size: int | None, keep: frozenset[str] | None, *,
          groups: int = 0) -> tuple[tuple[Record, ...], list[list[Record]]]:
    """Take whole groups from the front of ``queue`` until ``size`` records (or ``groups`` groups when ``size`` is
    None); the part, and the groups left. ``keep``: the only records the part may hold; a group with none of them
    is passed over and stays in the queue."""
    taken: list[Record] = []
    left: list[list[Record]] = []
    used = 0
    for position, group in enumerate(queue):
        full = len(taken) >= size if size is not None else used >= groups
        if full:
            return tuple(taken), left + queue[position:]
        members = group if keep is None else [r for r in group if r.uid in keep]
        if not members:
            left.append(group)
            continue
        room = len(members) if size is None else size - len(taken)
        taken.extend(members[:room])  # the rest of a group that overflows is left out of the run
        used += 1
    return tuple(taken), left


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
        regroup: Gives every split's records, read, their groups where a group spans files (SST-2's sentences).
    """

    name: str
    read: Callable[[Path, str], list[Record]]
    card: Mapping[str, Any]
    regroup: Callable[[list[Record]], list[Record]] | None = None

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
        if self.regroup is not None:
            records = self.regroup(records)
        return Dataset(name=self.name, records=tuple(records), fingerprint=fingerprint_files(paths),
                       source=f"{card['source']} from {paths[0].parent}", task=card.get("task", ""),
                       label_names=tuple(card.get("label_names", ())),
                       entity_labels=tuple(card.get("entity_labels", ())),
                       notes={"split_counts": counts, **card.get("notes", {})})


@functools.lru_cache(maxsize=1)
def catalog() -> Mapping[str, Mapping[str, Any]]:
    """``catalog.toml``: dataset name → what is known of a dataset kept as one file per split."""
    return tomllib.loads(resources.files(__package__).joinpath("catalog.toml").read_text(encoding="utf-8"))


def register_split_files(name: str, read: Callable[[Path, str], list[Record]], *,
                         regroup: Callable[[list[Record]], list[Record]] | None = None) -> SplitFiles:
    """Register dataset ``name`` as ``catalog.toml`` describes it, its split files parsed by ``read`` (and its
    records given groups that span files by ``regroup``, :class:`SplitFiles`)."""
    loader = SplitFiles(name, read, catalog()[name], regroup)
    DATASETS.add(name, loader, tags=tuple(loader.card["tags"]))
    return loader


#: Loader signature: ``loader(data_dir) -> Dataset``.
Loader = Callable[[Path | None], Dataset]

#: Dataset name → loader.
DATASETS: Registry[Loader] = Registry("dataset")
