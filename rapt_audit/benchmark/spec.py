"""A benchmark is a declared file: ``benchmarks/NAME.toml``, read with :mod:`tomllib`.

::

    name = "smoke"                      # optional: the file's stem
    description = "..."                 # optional, shown in the report
    profile = "smoke"                   # smoke | cpu | paper
    model = "minilm"                    # optional
    seeds = [0, 1, 2]                   # every setting runs once per seed
    attacks = "all"                     # optional selection: "all", "a,b", "tag:x", "-name", or a list of names

    [service]                           # the utility protocol: one setting, applied to every defense whose
    method = "prompt"                   # service customizes the encoder (it has a `method` parameter)
    model = "mpnet"                     # optional: the service's model, apart from the client's (every cell)

    [datasets]                          # the dataset each attack family reads
    utility = "sst2"                    # the task(s); a list names several ("sst2", "qqp")
    inversion = "sst2"                  # token-level attacks (whitebox, mlp/ae inversion, mutual_info, ner_spacy...)
    attribute = "trustpilot"            # attribute inference (attacks tagged `attribute`)
    ner = "conll2003"                   # NER trained on gold entities (tagged `ner`, not `off-the-shelf`)

    [splits]                            # optional split sizes over the profile's (data.victim_test=...)
    victim_test = 100

    [defenses.t2t]                      # one table per defense: a list is a grid axis, a scalar is fixed
    eta = [25, 75, "inf"]
    unit = "word"

A family whose dataset is not named is not run, and the report says so. A tuple parameter is fixed
with a comma-separated string (``categories = "noun,verb"``); a list of lists is a grid of tuples.
Everything is checked before any work by :func:`rapt_audit.benchmark.validate.load_benchmark`;
each error names the file and the line (:mod:`~rapt_audit.benchmark.locate`) and the fix.
"""

from __future__ import annotations

import hashlib
import itertools
import math
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from rapt_audit.api.errors import UnknownNameError, UsageError
from rapt_audit.api.parsing import (
    MAX_SEED,
    DocumentError,
    FloatRangeError,
    read_document,
    repeated,
)
from rapt_audit.api.registry import unknown_name_message
from rapt_audit.benchmark.locate import find_line
from rapt_audit.pipeline.config import SPLIT_KEYS
from rapt_audit.pipeline.context import PROFILES

#: The package the shipped benchmark files install as (the repository's top-level ``benchmarks/``).
SHIPPED_PACKAGE = "rapt_audit.benchmarks"

#: ``[datasets]`` keys: the attack families, and what each names.
FAMILIES: Mapping[str, str] = {
    "utility": "the task(s): the service's utility is measured on each",
    "inversion": "token-level attacks on the released units: every attack in no other family (whitebox, "
                 "mlp_inversion, ae_inversion, mutual_info, ner_spacy, random_guess)",
    "attribute": "attribute inference (attacks tagged attribute)",
    "ner": "NER trained on gold entity spans (attacks tagged ner, except off-the-shelf ones)",
}
TOP_KEYS = ("name", "description", "profile", "model", "seeds", "attacks", "service", "datasets", "splits",
            "defenses")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
#: The longest benchmark name.
MAX_NAME = 100


class BenchmarkError(UsageError):
    """A benchmark file that cannot run: the message starts with ``FILE:LINE:`` and says the fix."""

    def __init__(self, file: str | Path, line: int, message: str) -> None:
        super().__init__(f"{file}:{line}: {message}")
        self.file, self.line = str(file), line


def family_of(tags: Iterable[str]) -> str:
    """The ``[datasets]`` family an attack with ``tags`` belongs to (see :data:`FAMILIES`)."""
    tags = set(tags)
    if "attribute" in tags:
        return "attribute"
    if "ner" in tags and "off-the-shelf" not in tags:
        return "ner"
    return "inversion"


def set_text(value: Any) -> str:
    """A TOML value as the text of a ``--set`` pair: ``100`` and ``100.0`` both ``100``, ``inf``, ``a,b``.

    One spelling per value, so a cell's folder label (``RunConfig.spelling_id``, which hashes the text) is one per
    setting; its ``cell_id`` is canonical anyway. A benchmark cell is the very run ``rapt-audit run --set KEY=TEXT``
    makes.
    """
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return str(int(value)) if value.is_integer() else repr(value)
    if isinstance(value, (list, tuple)):
        return ",".join(set_text(v) for v in value)
    return str(value)


@dataclass(frozen=True)
class DefenseGrid:
    """One ``[defenses.NAME]`` table: the settings to run, before seeds and datasets.

    Attributes:
        name: The registered defense.
        service: The ``[service]`` settings this defense takes, as ``(key, value)``.
        fixed: The table's scalars (they win over ``service``).
        grid: The table's lists, one axis each, in file order.
    """

    name: str
    service: tuple[tuple[str, Any], ...] = ()
    fixed: tuple[tuple[str, Any], ...] = ()
    grid: tuple[tuple[str, tuple[Any, ...]], ...] = ()

    def points(self) -> list[tuple[tuple[str, str], ...]]:
        """Every grid point as ``--set`` pairs (service, then fixed, then one value per axis), row-major."""
        base = dict(self.service)
        base.update(self.fixed)
        points = []
        for combo in itertools.product(*(values for _, values in self.grid)):
            args = {**base, **dict(zip((k for k, _ in self.grid), combo))}
            points.append(tuple((k, set_text(v)) for k, v in args.items()))
        return points

    def varying(self, point: Sequence[tuple[str, str]]) -> tuple[tuple[str, str], ...]:
        """The pairs of ``point`` that its grid varies (how a cell is named)."""
        axes = {k for k, _ in self.grid}
        return tuple((k, v) for k, v in point if k in axes)


@dataclass(frozen=True)
class Benchmark:
    """A parsed and checked benchmark file (see the module docstring for the format)."""

    name: str
    path: Path
    text: str
    profile: str
    seeds: tuple[int, ...]
    tasks: tuple[str, ...]
    datasets: Mapping[str, str]
    family_attacks: Mapping[str, tuple[str, ...]]
    defenses: tuple[DefenseGrid, ...]
    service: tuple[tuple[str, Any], ...] = ()
    splits: tuple[tuple[str, int], ...] = ()
    model: str = "minilm"
    service_model: str | None = None
    description: str = ""

    @property
    def sha256(self) -> str:
        """The hash of the file's bytes, recorded in the benchmark's index."""
        return hashlib.sha256(self.text.encode("utf-8")).hexdigest()

    @property
    def service_text(self) -> str:
        """``method=prompt``: the utility protocol as a reader sees it (``default`` when none is set)."""
        served = (("model", self.service_model),) if self.service_model else ()
        return ",".join(f"{k}={set_text(v)}" for k, v in (*served, *self.service)) or "default"

    def attacks_for(self, dataset: str) -> tuple[str, ...]:
        """The selected attacks that run on ``dataset``: those of every family it is named for."""
        return tuple(a for family, names in self.family_attacks.items() if self.datasets.get(family) == dataset
                     for a in names)

    @property
    def not_run(self) -> dict[str, tuple[str, ...]]:
        """Family → its selected attacks, for the families whose dataset the file does not name."""
        return {f: names for f, names in self.family_attacks.items() if names and f not in self.datasets}

    @property
    def all_datasets(self) -> tuple[str, ...]:
        """Every dataset a cell runs on: the tasks, then each family's, without repeats."""
        return tuple(dict.fromkeys([*self.tasks, *(d for f, d in self.datasets.items() if self.attacks_for(d))]))

    def families_of(self, dataset: str) -> tuple[str, ...]:
        """The families (``utility`` included) that read ``dataset``."""
        return tuple(f for f in FAMILIES
                     if (f == "utility" and dataset in self.tasks) or self.datasets.get(f) == dataset)

    def error(self, path: Sequence[str], message: str) -> BenchmarkError:
        """An error located at the line of ``path``."""
        return BenchmarkError(self.path, find_line(self.text, path), message)


def shipped_dir() -> Path:
    """The folder of the benchmark files shipped with rapt-audit (``benchmarks/`` in the repository)."""
    return Path(str(resources.files(SHIPPED_PACKAGE)))


def shipped() -> list[str]:
    """The names of the shipped benchmarks (``smoke``, ``sst2-cpu``...)."""
    return sorted(p.stem for p in shipped_dir().glob("*.toml"))


def resolve(source: str | Path) -> Path:
    """The file a ``benchmark run NAME|FILE`` argument names: a path, else ``benchmarks/NAME.toml`` as shipped.

    Raises:
        UsageError: for a path that does not exist.
        UnknownNameError: for a name no shipped file has (did-you-mean over the shipped names).
    """
    text = str(source)
    path = Path(text).expanduser()
    if path.suffix == ".toml" or path.is_file() or "/" in text or "\\" in text:
        if not path.exists():  # a FIFO or a folder there: refused by the reader, without being opened
            raise UsageError(f"benchmark file {path} does not exist; give a .toml file or the name of a shipped "
                             f"benchmark ({', '.join(shipped())})")
        return path
    candidate = shipped_dir() / f"{text}.toml"
    if not candidate.is_file():
        raise UnknownNameError(unknown_name_message("benchmark", text, shipped()) +
                               " Or give the path of your own benchmark file.")
    return candidate


def read_toml(path: Path) -> tuple[str, dict[str, Any]]:
    """The file's text and its parsed table.

    A byte-order mark at the start is dropped (editors on Windows write one).

    Raises:
        BenchmarkError: for a file that is not UTF-8 (at the line and column of the first bad byte), not
            TOML (at the line the parser names), or that writes a float too large for one (``1e309``).
    """
    try:  # the one reader: a regular file, UTF-8, TOML, not nested too deep
        return read_document(path, source=str(path), fmt="toml")
    except FloatRangeError as exc:
        raise BenchmarkError(path, exc.line, str(exc).split(": ", 1)[1]) from None
    except DocumentError as exc:  # not UTF-8 (at its column), not TOML (at its line), not a regular file
        column = f"column {exc.column}: " if exc.column else ""
        raise BenchmarkError(path, exc.line or 1, column + exc.detail) from None


def check_top(path: Path, text: str, data: Mapping[str, Any]) -> None:
    """Unknown top-level keys, and the keys every benchmark needs.

    Raises:
        BenchmarkError: naming the key and its line.
    """
    for key in data:
        if key not in TOP_KEYS:
            raise BenchmarkError(path, find_line(text, (key,)),
                                 unknown_name_message("benchmark key", key, list(TOP_KEYS)))
    for key, fix in (("profile", f'profile = "smoke" (one of {", ".join(PROFILES)})'), ("seeds", "seeds = [0, 1, 2]"),
                     ("datasets", '[datasets] with at least utility = "sst2"'), ("defenses", "[defenses.NAME] tables")):
        if key not in data:
            raise BenchmarkError(path, 1, f"the benchmark names no {key}; add {fix}")


def scalar_table(path: Path, text: str, data: Mapping[str, Any], table: str) -> dict[str, Any]:
    """A table of scalars (``[service]``, ``[splits]``): a list or sub-table there is an error at its line."""
    value = data.get(table, {})
    if not isinstance(value, dict):
        raise BenchmarkError(path, find_line(text, (table,)),
                             f"{table} must be a table ([{table}] with key = value lines)")
    for key, item in value.items():
        if isinstance(item, (list, dict)):
            raise BenchmarkError(path, find_line(text, (table, key)),
                                 f"[{table}] {key} must be one value, not a {type(item).__name__}: the {table} is one "
                                 "setting for every defense; put a grid in a [defenses.NAME] table")
    return dict(value)


def check_splits(path: Path, text: str, splits: Mapping[str, Any]) -> tuple[tuple[str, int], ...]:
    """``[splits]``: split names and positive whole sizes."""
    for key, value in splits.items():
        if key not in SPLIT_KEYS:
            raise BenchmarkError(path, find_line(text, ("splits", key)),
                                 unknown_name_message("split", key, list(SPLIT_KEYS)))
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise BenchmarkError(path, find_line(text, ("splits", key)),
                                 f"[splits] {key} = {value!r} must be a whole number of records >= 1")
    return tuple(splits.items())


def check_seeds(path: Path, text: str, seeds: Any) -> tuple[int, ...]:
    """``seeds``: a non-empty list of distinct whole numbers >= 0."""
    where = find_line(text, ("seeds",))
    if not isinstance(seeds, list) or not seeds:
        raise BenchmarkError(path, where, f"seeds must be a non-empty list such as [0, 1, 2], got {seeds!r}")
    bad = [s for s in seeds if isinstance(s, bool) or not isinstance(s, int) or not 0 <= s <= MAX_SEED]
    if bad:
        raise BenchmarkError(path, where, f"seeds must be whole numbers from 0 to {MAX_SEED}; {bad[0]!r} is not")
    twice = sorted(repeated(seeds))  # one pass, however many seeds
    if twice:
        raise BenchmarkError(path, where,
                             f"seeds lists {', '.join(map(str, twice))} more than once; list each seed once")
    return tuple(seeds)


def check_name(path: Path, text: str, data: Mapping[str, Any]) -> str:
    """The benchmark's name (default: the file's stem), usable as a folder name on every file system."""
    name = data.get("name", path.stem)
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise BenchmarkError(path, find_line(text, ("name",)),
                             f"name = {name!r} must be letters, digits, '.', '_' or '-' (it names the output folder)")
    if len(name) > MAX_NAME:  # runs/benchmark-NAME and its files: a file name may have 255 bytes
        raise BenchmarkError(path, find_line(text, ("name",)),
                             f"name is {len(name)} characters long; it names the output folder, so use at most "
                             f"{MAX_NAME}" + ("" if "name" in data else " (it is the file's name: rename the file or "
                                                                         "add name = \"...\")"))
    return name


__all__ = ["Benchmark", "BenchmarkError", "DefenseGrid", "FAMILIES", "SHIPPED_PACKAGE", "TOP_KEYS", "family_of",
           "read_toml", "resolve", "set_text", "shipped", "shipped_dir"]
