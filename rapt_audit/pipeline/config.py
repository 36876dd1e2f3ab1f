"""Run configuration: defaults < ``--config`` file < explicit CLI flags and ``--set`` pairs.

A :class:`RunConfig` is plain data. :func:`build_config` merges the three sources; plugin
parameters stay as given (often strings) and are type-checked when the plugins are built
(:func:`rapt_audit.api.params.make_plugin`), so every unknown key or bad value fails before any work.

``--set`` keys::

    seed=3 | profile=cpu | dataset=sst2 | ...   run-level keys (see RUN_KEYS)
    defense.eta=100  (or just eta=100)          a parameter of the selected defense
    attacks.whitebox.topk=5                     a parameter of one attack
    data.victim_test=500                        a split size
    data.text=<column>                          a column of your own data file (--dataset PATH):
                                                text, text_pair, label, attributes, entities, id
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Mapping, Sequence

from rapt_audit.api.errors import UnknownNameError, UsageError
from rapt_audit.api.params import canonical_params, coerce, to_jsonable
from rapt_audit.api.parsing import FloatRangeError, check_seed, read_document
from rapt_audit.api.plugins import ATTACKS, DEFENSES, load_for, reference_defense
from rapt_audit.api.registry import closest, unknown_name_message
from rapt_audit.data import COLUMN_KEYS, is_file_dataset
from rapt_audit.data.columns import normalize_columns
from rapt_audit.encoder.precision import check_precision_choice
from rapt_audit.pipeline.context import PROFILES
from rapt_audit.pipeline.time_limits import check_attack_timeout

#: Split sizes per profile (upper bounds; scaled down for small datasets, see ``profile_split_sizes``).
PROFILE_SPLITS: Mapping[str, Mapping[str, int | None]] = {
    "smoke": {"victim_train": 200, "victim_test": 100, "attacker_train": 200, "attacker_valid": 100},
    "cpu": {"victim_train": 2000, "victim_test": 500, "attacker_train": 2000, "attacker_valid": 500},
    "paper": {"victim_train": None, "victim_test": None, "attacker_train": None, "attacker_valid": None},
}
SPLIT_KEYS = ("victim_train", "victim_test", "attacker_train", "attacker_valid")


@dataclass(frozen=True)
class RunConfig:
    """Everything that defines one run.

    Attributes:
        defense: Registered defense name (default: the no-privacy reference, ``identity``:
            :func:`~rapt_audit.api.plugins.reference_defense`).
        attacks: Attack selection spec (``all``, ``a,b``, ``tag:x``, ``-name``).
        dataset: Registered dataset name, or the path of your own data file (CSV, TSV, JSON Lines,
            Parquet, or a ``save_to_disk`` directory); ``None`` picks ``sst2`` when a data directory
            is configured and the synthetic demo corpus otherwise.
        model: The client's model: ``minilm`` (bundled), ``mpnet`` (assembled), a Hugging Face id or a local
            directory. It is also the service's unless ``service_model`` names another (:mod:`.roles`).
        service_model: The model the service customizes and scores (``--service-model``, ``--set
            service.model=...``); ``None``, or the client's model itself, is the client's: such a run keeps the
            cell id and signature it had before the roles were apart (issue #63).
        profile: ``smoke``, ``cpu`` or ``paper``.
        seed: The run seed, a whole number from 0 to 2**32 - 1 (:func:`~rapt_audit.api.parsing.check_seed`).
        device: ``auto``, ``cpu`` or ``cuda``.
        precision: ``auto`` (bfloat16 mixed precision where the device computes it natively, float32
            elsewhere: :func:`rapt_audit.encoder.precision.resolve_precision`), ``fp32`` or ``bf16``;
            the precision of every network the run trains and runs (never of the mechanisms). The
            precision used is ``env.precision``; ``auto`` is left out of ``cell_id``, like ``device``.
        out: Output directory (default: ``runs/<defense>-<dataset>-<profile>-s<seed>-<hash>``).
        data_dir: Data directory (default: ``$RAPT_AUDIT_DATA``).
        defense_args: Parameters of the defense.
        attack_args: Attack name → its parameters.
        data_args: Split sizes overriding the profile's (:data:`SPLIT_KEYS`, integers) and, for a
            file dataset, the columns to read (:data:`COLUMN_KEYS`, names; ``attributes``
            comma-separated). Both are in ``cell_id``; see :attr:`split_overrides` / :attr:`column_args`.
        force: Re-run even when ``out`` already holds this exact run (releases cached on disk under
            the same signature are still reused: they are what the defense would compute again).
        release_cache: Read and write releases in the on-disk cache (``$RAPT_AUDIT_CACHE/releases``);
            False privatizes afresh and stores nothing. Never changes a result, so not in ``cell_id``.
        attack_timeout: Seconds each attack (fit and attack) may take before it is stopped and recorded as
            failed (``None``: no limit; :mod:`~rapt_audit.pipeline.time_limits`). Changes no number of an
            attack that finishes, so, like ``device``, not in ``cell_id``.
    """

    defense: str = field(default_factory=reference_defense)
    attacks: str = "all"
    dataset: str | None = None
    model: str = "minilm"
    service_model: str | None = None
    profile: str = "cpu"
    seed: int = 0
    device: str = "auto"
    precision: str = "auto"
    out: str | None = None
    data_dir: str | None = None
    defense_args: Mapping[str, Any] = field(default_factory=dict)
    attack_args: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    data_args: Mapping[str, int | str] = field(default_factory=dict)
    force: bool = False
    release_cache: bool = True
    attack_timeout: float | None = None

    def __post_init__(self) -> None:
        if self.profile not in PROFILES:
            raise UnknownNameError(unknown_name_message("profile", self.profile, list(PROFILES)))
        object.__setattr__(self, "seed", check_seed(self.seed))  # -1 would fail deep in numpy
        if self.service_model in ("", self.model):  # the client's own model: one spelling, the cells of before
            object.__setattr__(self, "service_model", None)
        object.__setattr__(self, "attack_timeout", check_attack_timeout(self.attack_timeout))
        if self.device not in {"auto", "cpu", "cuda"}:
            raise UsageError(f"device={self.device!r} is not one of auto, cpu, cuda")
        try:
            check_precision_choice(self.precision)
        except ValueError as exc:
            raise UsageError(f"{exc} (auto: bfloat16 where the CPU or GPU computes it natively, else float32)") from None
        for key in self.data_args:
            if key not in SPLIT_KEYS and key not in COLUMN_KEYS:
                raise UnknownNameError(_unknown_data_key(key))
        # Canonical values, so that equal settings give one cell_id (3 and "3"; "a, b" and ["a", "b"]).
        sizes = {k: coerce(v, int, key=f"data.{k}") for k, v in self.data_args.items() if k in SPLIT_KEYS}
        columns = normalize_columns(self.data_args)
        object.__setattr__(self, "data_args", {k: {**sizes, **columns}[k] for k in self.data_args})
        if columns and not is_file_dataset(self.dataset):
            raise UsageError(
                f"data.{', data.'.join(columns)} name columns of your own data file, so they apply only to "
                f"--dataset PATH (a .csv, .tsv, .jsonl, .json or .parquet file, or a save_to_disk directory); "
                f"dataset {self.dataset or '(default)'!r} is not a path to a data file. Drop them, or give the file "
                "with --dataset.")

    @property
    def split_overrides(self) -> dict[str, int]:
        """The split sizes of ``data_args`` (what :func:`profile_split_sizes` takes)."""
        return {k: v for k, v in self.data_args.items() if k in SPLIT_KEYS}

    @property
    def column_args(self) -> dict[str, str]:
        """The column keys of ``data_args`` (what :func:`rapt_audit.data.load_dataset` takes)."""
        return {k: v for k, v in self.data_args.items() if k in COLUMN_KEYS}

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form (as stored in ``result.json``)."""
        return to_jsonable(asdict(self))

    def cell_id(self) -> str:
        """Hash of everything that changes the result (not ``out``, ``force``, ``device`` or the cache switch).

        The settings are canonical (:func:`canonical_settings`): ``--defense t2t`` and ``--set eta=1e2`` are one
        cell. ``precision=auto`` is left out (it resolves per machine, as ``device`` does); an explicit ``fp32``
        or ``bf16`` is in. Computed once per configuration (it builds the plugins): a sweep's index hashes every
        cell again after each cell finishes.
        """
        known = self.__dict__.get("_cell_id")
        if known is None:
            known = settings_id(self.to_dict())
            object.__setattr__(self, "_cell_id", known)  # frozen: a cache, not a field (to_dict and == ignore it)
        return known

    def spelling_id(self) -> str:
        """The hash of the settings as given, not canonical (what :meth:`cell_id` was before issue #60): it labels
        a benchmark cell's folder, so that folders named by it before are found again."""
        return _digest(measured_settings(self.to_dict()))

    def recorded_as(self, cell_id: str) -> bool:
        """Whether an index's recorded ``cell_id`` names this run: its canonical id, or the id as spelled, which
        indexes (``benchmark.json``) written before settings were canonical recorded."""
        return cell_id in (self.cell_id(), self.spelling_id())

    def matches(self, stored: Mapping[str, Any]) -> bool:
        """Whether a result's stored ``config`` is this very run: its settings, recomputed canonically.

        Compared this way, not by the result's recorded ``cell_id``, so that a result written before settings
        were canonical (its defense arguments kept as typed: ``{"epsilon": "0.1"}``) is still this run.
        """
        return settings_id(stored) == self.cell_id()


#: Run settings that do not change a result: where it is written, whether it is redone, where it runs and
#: what is read from caches. A cell's id leaves them out, and so does any comparison of two runs' settings.
NOT_MEASURED = frozenset({"out", "force", "device", "data_dir", "release_cache", "attack_timeout"})


def measured_settings(config: dict) -> dict:
    """The settings of a run's ``config`` (as ``RunConfig.to_dict`` writes it) that change its result: all but
    :data:`NOT_MEASURED`, and ``precision`` unless set explicitly (``auto`` resolves per machine, as ``device``
    does, and ids of results written before the setting existed stay the same)."""
    return {k: v for k, v in config.items() if k not in NOT_MEASURED and not (k == "precision" and v == "auto")
            and not (k == "service_model" and v is None)}  # no service named: the ids of before issue #63


def canonical_settings(config: Mapping[str, Any]) -> dict[str, Any]:
    """The :func:`measured_settings` of ``config`` (as ``RunConfig.to_dict`` writes it, or a result stores it)
    with the defense's and every selected attack's parameters as the run really uses them: by value and declared
    type, defaults and the profile's overrides filled in (:func:`~rapt_audit.api.params.canonical_params`).

    Arguments of an attack the run does not select change nothing and are left out. A plugin that is not
    installed, or arguments it refuses, keep the arguments as given (the run itself reports those).
    """
    settings = measured_settings(dict(config))
    # The plugins' declared types and defaults: only those this run can select, so that a run of built-ins
    # never imports (or waits on) a third-party plugin (issue #60).
    load_for("defense", str(settings.get("defense")))
    load_for("attack", ",".join([str(settings.get("attacks", "all")), *(settings.get("attack_args") or {})]))
    profile = str(settings.get("profile", "cpu"))
    given = dict(settings.get("defense_args") or {})
    settings["defense_args"] = _canonical("defense", str(settings.get("defense")), profile, _key(given)) or given
    try:
        names = ATTACKS.select(str(settings.get("attacks", "all")))
    except UsageError:  # an unknown attack: the run refuses it; the id keeps the spelling
        return settings
    args = dict(settings.get("attack_args") or {})
    settings["attack_args"] = {n: _canonical("attack", n, profile, _key(args.get(n) or {})) or dict(args.get(n) or {})
                               for n in names}
    return settings


def settings_id(config: Mapping[str, Any]) -> str:
    """The cell id of a run's ``config``: the hash of its :func:`canonical_settings`."""
    return _digest(canonical_settings(config))


def repeated_settings(configs: Sequence[RunConfig]) -> list[list[int]]:
    """The positions of ``configs`` that are one setting (one :meth:`RunConfig.cell_id`), for each that repeats."""
    same: dict[str, list[int]] = {}
    for i, config in enumerate(configs):
        same.setdefault(config.cell_id(), []).append(i)
    return [group for group in same.values() if len(group) > 1]


def _digest(data: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode("utf-8")).hexdigest()[:12]


def _key(args: Mapping[str, Any]) -> str:
    """Plugin arguments as one hashable text (the cache key of :func:`_canonical`)."""
    return json.dumps(dict(args), sort_keys=True, default=str)


@functools.lru_cache(maxsize=4096)  # a sweep index hashes every cell after each cell: build each setting once
def _canonical(kind: str, name: str, profile: str, args: str) -> dict[str, Any] | None:
    """:func:`~rapt_audit.api.params.canonical_params`, cached by its arguments' text; never mutate what it returns."""
    registry = DEFENSES if kind == "defense" else ATTACKS
    return canonical_params(registry, name, json.loads(args), profile=profile)


def _unknown_data_key(key: str) -> str:
    """'unknown data key' with did-you-mean over both kinds of ``data.*`` key, each kind listed."""
    near = closest(key, list(SPLIT_KEYS) + list(COLUMN_KEYS))
    hint = f" Did you mean {', '.join(repr(c) for c in near)}?" if near else ""
    return (f"unknown data key {key!r}.{hint} Valid data key names: {', '.join(sorted(SPLIT_KEYS))} (split sizes); "
            f"{', '.join(COLUMN_KEYS)} (columns of a file dataset, --dataset PATH).")


#: Keys settable at the top level of a config file or with ``--set``.
RUN_KEYS = tuple(f.name for f in fields(RunConfig) if f.name not in {"defense_args", "attack_args", "data_args"})
_RUN_TYPES = {"defense": str, "attacks": str, "dataset": str | None, "model": str, "service_model": str | None,
              "profile": str, "seed": int,
              "device": str, "precision": str, "out": str | None, "data_dir": str | None, "force": bool,
              "release_cache": bool, "attack_timeout": float | None}


def load_config_file(path: str | Path) -> dict[str, Any]:
    """Read a TOML or JSON config file into a dict.

    Raises:
        UsageError: when the file is missing, unreadable or not TOML/JSON.
    """
    path = Path(path)
    try:  # the one reader: a regular file (missing, a FIFO, a folder: refused), UTF-8, TOML or JSON, not too deep
        data = read_document(path, source=f"config file {path}")[1]
    except FloatRangeError as exc:  # 1e309 would read as infinity: "line N: ..."
        raise UsageError(f"config file {path}, {exc}") from None
    if not isinstance(data, dict):
        raise UsageError(f"config file {path} must hold a table of keys")
    return data


def _apply(merged: dict[str, Any], data: Mapping[str, Any], *, origin: str) -> None:
    valid = list(RUN_KEYS) + ["defense_args", "attack_args", "data_args"]
    for key, value in data.items():
        if key not in valid:
            raise UnknownNameError(unknown_name_message(f"key in {origin}", key, valid))
        if key in {"defense_args", "data_args"}:
            merged[key] = {**merged[key], **dict(value)}
        elif key == "attack_args":
            for name, args in dict(value).items():
                merged[key][name] = {**merged[key].get(name, {}), **dict(args)}
        else:
            merged[key] = coerce(value, _RUN_TYPES[key], key=key)


def parse_set(pairs: list[str]) -> dict[str, Any]:
    """Turn ``--set`` pairs into the nested form of a config file.

    A bare key that is not a run-level key is taken as a defense parameter (``eta=100``).
    """
    nested: dict[str, Any] = {"defense_args": {}, "attack_args": {}, "data_args": {}}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        key = key.strip()
        if not sep or not key:
            raise UsageError(f"--set expects key=value, got {pair!r}")
        parts = key.split(".")
        if parts[0] == "defense" and len(parts) == 2:
            nested["defense_args"][parts[1]] = value
        elif parts[0] in {"attacks", "attack"} and len(parts) == 3:
            nested["attack_args"].setdefault(parts[1], {})[parts[2]] = value
        elif parts[0] == "data" and len(parts) == 2:
            # Split sizes are integers; column names stay strings; an unknown key fails in RunConfig.
            nested["data_args"][parts[1]] = coerce(value, int, key=key) if parts[1] in SPLIT_KEYS else value
        elif key == "service.model":  # the [service] table's spelling of the service's model
            nested["service_model"] = value
        elif len(parts) == 1 and parts[0] in RUN_KEYS:
            nested[parts[0]] = value
        elif len(parts) == 1:
            nested["defense_args"][parts[0]] = value
        else:
            raise UsageError(
                f"--set key {key!r} is not understood; use a run key ({', '.join(RUN_KEYS)}), service.model, "
                "defense.<param>, attacks.<attack>.<param>, data.<split> (" + ", ".join(SPLIT_KEYS) + ") or "
                "data.<column key> (" + ", ".join(COLUMN_KEYS) + ")")
    return nested


def build_config(*, file: str | Path | None = None, cli: Mapping[str, Any] | None = None,
                 sets: list[str] | None = None) -> RunConfig:
    """Merge dataclass defaults < config file < explicit CLI flags < ``--set`` pairs.

    Args:
        file: Optional TOML/JSON config file.
        cli: Run-level keys the user typed on the command line (absent keys keep lower layers).
        sets: ``--set key=value`` pairs.
    """
    merged: dict[str, Any] = asdict(RunConfig())
    merged["defense_args"], merged["attack_args"], merged["data_args"] = {}, {}, {}
    if file is not None:
        _apply(merged, load_config_file(file), origin=f"config file {file}")
    if cli:
        _apply(merged, cli, origin="command line")
    if sets:
        _apply(merged, parse_set(sets), origin="--set")
    return RunConfig(**merged)


def profile_split_sizes(profile: str, n_records: int, overrides: Mapping[str, int | str]) -> dict[str, int | None]:
    """Split sizes for ``profile`` on a dataset of ``n_records``.

    Profile sizes are upper bounds: when a dataset is smaller than a profile asks for, the
    profile's sizes are scaled down in proportion (explicit ``data.*`` overrides never are).
    ``overrides`` may be a run's whole ``data_args``: column keys in it are ignored.
    """
    overrides = {k: v for k, v in overrides.items() if k in SPLIT_KEYS}
    sizes = dict(PROFILE_SPLITS[profile])
    fixed = {k: v for k, v in sizes.items() if v is not None and k not in overrides}
    budget = n_records - sum(overrides.values())
    total = sum(fixed.values())
    if fixed and total > budget > 0:
        scale = budget / total
        sizes.update({k: max(1, math.floor(v * scale)) for k, v in fixed.items()})
    sizes.update(overrides)
    return sizes


def with_defense(config: RunConfig, **defense_args: Any) -> RunConfig:
    """A copy of ``config`` with some defense parameters replaced (used by sweeps)."""
    return replace(config, defense_args={**config.defense_args, **defense_args})
