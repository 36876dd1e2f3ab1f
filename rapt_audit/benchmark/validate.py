"""Checking a benchmark file before any work: names, grid values, datasets, each error at its line.

Defenses, attacks and datasets are looked up in their registries (did-you-mean on a typo). Every grid
point of every defense is built as the run would build it (the profile's overrides, then the
``[service]`` settings, the fixed values and the point's values): the plugins check their own
parameters at construction, so a value out of range fails here with the plugin's own message, located
at the key that brought it. Each dataset is loaded once (a missing data folder or file fails here).
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any, Mapping

from rapt_audit.api.errors import DataError, ModelError, UnknownNameError, UsageError
from rapt_audit.api.params import canonical_params, make_plugin, plugin_args, plugin_fields
from rapt_audit.api.plugins import ATTACKS, DEFENSES, load
from rapt_audit.api.registry import unknown_name_message
from rapt_audit.benchmark.locate import find_line
from rapt_audit.benchmark.plan import count_cells
from rapt_audit.benchmark.spec import (
    FAMILIES,
    Benchmark,
    BenchmarkError,
    DefenseGrid,
    check_name,
    check_seeds,
    check_splits,
    check_top,
    family_of,
    read_toml,
    resolve,
    scalar_table,
    set_text,
)
from rapt_audit.data import SplitSizeError, SplitSizes, load_dataset, make_splits
from rapt_audit.pipeline.cell_limit import check_cell_count
from rapt_audit.pipeline.config import profile_split_sizes
from rapt_audit.pipeline.context import PROFILES
from rapt_audit.pipeline.roles import check_model


#: The parameter that marks a defense whose service customizes the encoder: ``[service]`` applies to it.
SERVICE_MARKER = "method"


def load_benchmark(source: str | Path, *, data_dir: str | None = None, check_data: bool = True,
                   problems: list[str] | None = None, max_cells: int | None = None) -> Benchmark:
    """Read and check a benchmark file (a path, or the name of a shipped one) before any work.

    Args:
        source: ``benchmarks/NAME.toml``, any ``.toml`` path, or ``NAME`` of a shipped benchmark.
        data_dir: The data folder (default ``$RAPT_AUDIT_DATA``).
        check_data: Load every dataset (a missing one is an error); off, only their names are checked.
        problems: When given, a dataset that cannot be loaded is appended here (``FILE:LINE: ...``)
            instead of raised, so a dry run can still list the cells.
        max_cells: The most cells the file may make (``--max-cells``; default
            :data:`~rapt_audit.pipeline.cell_limit.DEFAULT_MAX_CELLS`), counted from the grids' lengths
            before any grid point is built.

    Raises:
        BenchmarkError: the first problem, as ``FILE:LINE: what is wrong; the fix``.
        UnknownNameError: for a name that is neither a file nor a shipped benchmark.
    """
    path = resolve(source)
    text, data = read_toml(path)
    check_top(path, text, data)
    load()
    profile = data["profile"]
    if profile not in PROFILES:
        raise BenchmarkError(path, find_line(text, ("profile",)),
                             unknown_name_message("profile", str(profile), list(PROFILES)))
    model = data.get("model", "minilm")
    if not isinstance(model, str) or not model:
        raise BenchmarkError(path, find_line(text, ("model",)),
                             "model must be a name such as \"minilm\" or a local folder")
    description = data.get("description", "")
    service = scalar_table(path, text, data, "service")
    service_model = service.pop("model", None)  # the service's model, for every cell; the rest is its protocol
    if service_model is not None and (not isinstance(service_model, str) or not service_model):
        raise BenchmarkError(path, find_line(text, ("service", "model")),
                             "[service] model must name the service's model, such as \"mpnet\" or a local folder")
    splits = check_splits(path, text, scalar_table(path, text, data, "splits"))
    tasks, datasets = _datasets(path, text, data["datasets"])
    bench = Benchmark(name=check_name(path, text, data), path=path, text=text, profile=profile,
                      seeds=check_seeds(path, text, data["seeds"]), tasks=tasks, datasets=datasets,
                      family_attacks=_attacks(path, text, data.get("attacks", "all")),
                      defenses=(), service=tuple(service.items()), splits=splits, model=model,
                      service_model=None if service_model == model else service_model, description=str(description))
    bench = _with_defenses(bench, data["defenses"], service, max_cells)
    if check_data or problems is not None:
        _check_data(bench, data_dir, problems)
    return bench


def _datasets(path: Path, text: str, table: Any) -> tuple[tuple[str, ...], dict[str, str]]:
    """``[datasets]``: the tasks (utility, one or a list) and one dataset per other family."""
    if not isinstance(table, dict):
        raise BenchmarkError(path, find_line(text, ("datasets",)),
                             "datasets must be a table: [datasets] utility = \"sst2\"")
    for key in table:
        if key not in FAMILIES:
            raise BenchmarkError(path, find_line(text, ("datasets", key)), unknown_name_message(
                "attack family", key, list(FAMILIES)) + " Each key names the dataset that family reads.")
    tasks = table.get("utility")
    tasks = [tasks] if isinstance(tasks, str) else tasks
    if not tasks or not isinstance(tasks, list) or not all(isinstance(t, str) and t for t in tasks):
        raise BenchmarkError(path, find_line(text, ("datasets", "utility")),
                             'the benchmark needs a task: [datasets] utility = "sst2" (or a list: ["sst2", "qqp"])')
    if len(set(tasks)) < len(tasks):
        raise BenchmarkError(path, find_line(text, ("datasets", "utility")), "utility lists a dataset more than once")
    others = {}
    for family, name in table.items():
        if family == "utility":
            continue
        if not isinstance(name, str) or not name:
            raise BenchmarkError(path, find_line(text, ("datasets", family)),
                                 f"{family} must name one dataset (a string), got {name!r}; leave it out to not run "
                                 f"these attacks")
        others[family] = name
    return tuple(tasks), others


def _attacks(path: Path, text: str, spec: Any) -> dict[str, tuple[str, ...]]:
    """The attack selection, split into families (registry order inside each)."""
    if isinstance(spec, list) and spec and all(isinstance(s, str) for s in spec):
        spec = ",".join(spec)
    if not isinstance(spec, str):
        raise BenchmarkError(path, find_line(text, ("attacks",)),
                             'attacks must be a selection ("all", "a,b", "tag:x", "-name") or a list of attack names')
    try:
        names = ATTACKS.select(spec)
    except UsageError as exc:  # UnknownNameError included: its message has the did-you-mean
        raise BenchmarkError(path, find_line(text, ("attacks",)), f"{exc}") from None
    families: dict[str, tuple[str, ...]] = {f: () for f in FAMILIES if f != "utility"}
    for entry in ATTACKS.entries():
        if entry.name in names:
            family = family_of(entry.tags)
            families[family] += (entry.name,)
    return families


def _with_defenses(bench: Benchmark, table: Any, service: Mapping[str, Any], max_cells: int | None) -> Benchmark:
    """Each ``[defenses.NAME]`` table checked, the cells counted (at most ``max_cells``), then every grid point
    built; ``[service]`` keys all used."""
    if not isinstance(table, dict) or not table:
        raise bench.error(("defenses",), "the benchmark names no defense; add a [defenses.NAME] table per defense")
    grids, used = [], set()
    for name, params in table.items():
        if name not in DEFENSES:
            raise bench.error(("defenses", name), unknown_name_message("defense", name, DEFENSES.names()))
        if not isinstance(params, dict):
            raise bench.error(("defenses", name),
                              f"defenses.{name} must be a table: [defenses.{name}] with key = value")
        fields = plugin_fields(DEFENSES.get(name))
        takes = {k: v for k, v in service.items() if SERVICE_MARKER in fields and k in fields and k not in params}
        used.update(k for k in service if SERVICE_MARKER in fields and k in fields)
        fixed, grid = {}, []
        for key, value in params.items():
            if isinstance(value, dict):
                raise bench.error(("defenses", name, key), f"{key} is a table; write a value or a list of values")
            if isinstance(value, list):
                texts = [_grid_value(bench.profile, name, key, v) for v in value]
                if not value or len(set(texts)) < len(texts):
                    raise bench.error(("defenses", name, key), f"the grid of {key} is empty or lists a value twice")
                grid.append((key, tuple(value)))
            else:
                fixed[key] = value
        grids.append(DefenseGrid(name, tuple(takes.items()), tuple(fixed.items()), tuple(grid)))
    bench = replace(bench, defenses=tuple(grids))
    count, factors = count_cells(bench)  # before any grid point is built: three 100-value axes make 10**6
    try:
        check_cell_count(count, limit=max_cells, what="the benchmark", factors=factors)
    except UsageError as exc:
        raise bench.error(("defenses",), str(exc)) from None
    for defense in grids:
        _build_points(bench, defense)
    unused = [k for k in service if k not in used]
    if unused:
        served = [g.name for g in grids if SERVICE_MARKER in plugin_fields(DEFENSES.get(g.name))]
        raise bench.error(("service", unused[0]),
                          f"[service] {unused[0]} is a parameter of no defense here whose service customizes the "
                          f"encoder (those with a {SERVICE_MARKER!r} parameter: {', '.join(served) or 'none'}); "
                          "remove it or check its spelling (rapt-audit ls defenses --params)")
    return bench


def _grid_value(profile: str, defense: str, key: str, value: Any) -> str:
    """A grid value as the run uses it, by value and declared type (``100``, ``1e2`` and ``"100.0"`` are one η):
    the canonical form a cell id hashes (:func:`~rapt_audit.api.params.canonical_params`), so a grid that lists one
    setting twice is refused. A value the defense refuses alone keeps its text: its grid point reports it."""
    params = canonical_params(DEFENSES, defense, {key: set_text(value)}, profile=profile)
    return json.dumps(params[key]) if params is not None and key in params else set_text(value)


def _build_points(bench: Benchmark, defense: DefenseGrid) -> None:
    """Build the defense at every grid point as a run would; a rejected value is located at its key."""
    cls = DEFENSES.get(defense.name)
    service = dict(defense.service)
    points = defense.points()
    for point in points:
        args = dict(point)
        try:
            make_plugin(DEFENSES, defense.name, plugin_args(cls, bench.profile, args))
        except UsageError as exc:
            key = _culprit(bench, defense.name, args)
            where = ("service", key) if key in service else ("defenses", defense.name) + ((key,) if key else ())
            known = key is None or key in plugin_fields(cls)
            values = ", ".join(f"{k}={v}" for k, v in point if k in dict(defense.grid))
            at = f" at the grid point {values}" if known and values and len(points) > 1 else ""
            fix = ("change the value" + (" or drop it from the grid" if key in dict(defense.grid) else "")
                   if known else "check the parameter's spelling (rapt-audit ls defenses --params)")
            raise bench.error(where, f"defense {defense.name}{at}: {str(exc).rstrip('.')}; {fix}") from None


def _culprit(bench: Benchmark, name: str, args: Mapping[str, str]) -> str | None:
    """The first key whose value alone makes the defense refuse to build (``None``: only their combination)."""
    cls = DEFENSES.get(name)
    for key, value in args.items():
        try:
            make_plugin(DEFENSES, name, plugin_args(cls, bench.profile, {key: value}))
        except UsageError:
            return key
    return None


def _check_data(bench: Benchmark, data_dir: str | None, problems: list[str] | None) -> None:
    """Load each dataset once: missing files, a task without labels, attributes or entities the family needs; and the
    client's and the service's models found here (mpnet is assembled by a step of its own)."""
    roles = (("client", bench.model, ("model",)), ("service", bench.service_model, ("service", "model")))
    for role, spec, where in roles:
        try:
            check_model(spec, role=role)
        except ModelError as exc:
            _report(bench.error(where, str(exc)), problems)
    for dataset in bench.all_datasets:
        families = bench.families_of(dataset)
        where = ("datasets", "utility" if "utility" in families else families[0])
        try:
            loaded = load_dataset(dataset, data_dir)
            if "utility" in families and not loaded.has_labels:
                raise DataError(f"dataset {dataset} has no task labels, so it cannot measure utility; name a "
                                "labelled task (sst2, qqp, synthetic, tp_uk_raw, or your file with data.label)")
            if "attribute" in families and not loaded.attribute_values:
                raise DataError(f"dataset {dataset} carries no private attributes for the attribute attacks; name one "
                                "that does (trustpilot, blogs, synthetic)")
            # The parts cut as a cell will cut them, so that [splits] larger than the dataset is told here, at
            # its line, not by every cell of the run (issue #60).
            sizes = profile_split_sizes(bench.profile, len(loaded.records), dict(bench.splits))
            make_splits(loaded, SplitSizes(**sizes), seed=0)
        except SplitSizeError as exc:
            _report(bench.error(("splits", exc.key), str(exc)), problems)
        except (DataError, UnknownNameError) as exc:
            fix = ("point --data-dir (or RAPT_AUDIT_DATA) at the folder that holds it" if isinstance(exc, DataError)
                   else "check the name (rapt-audit ls datasets)")
            if where[1] != "utility":
                fix += f", or leave out {where[1]} = ... to not run those attacks"
            _report(bench.error(where, f"{str(exc).rstrip('.')}; {fix}"), problems)
    for defense, corpus in public_corpora(bench):
        try:
            load_dataset(corpus, data_dir)
        except (DataError, UnknownNameError) as exc:
            key = ("public_corpus",) if "public_corpus" in dict(defense.fixed) else ()
            message = (f"defense {defense.name} trains on the public corpus {corpus!r}, which is not available "
                       f"here: {str(exc).rstrip('.')}; point --data-dir (or RAPT_AUDIT_DATA) at the folder that "
                       f"holds it, or leave [defenses.{defense.name}] out")
            _report(bench.error(("defenses", defense.name, *key), message), problems)


def public_corpora(bench: Benchmark) -> list[tuple[DefenseGrid, str]]:
    """The public corpora the defenses train on (SnD's denoiser: ``public_corpus``), once per defense and corpus."""
    found: dict[tuple[str, str], tuple[DefenseGrid, str]] = {}  # a dict: one lookup per point, however many
    for defense in bench.defenses:
        cls = DEFENSES.get(defense.name)
        for point in defense.points():
            corpus = getattr(make_plugin(DEFENSES, defense.name, plugin_args(cls, bench.profile, dict(point))),
                             "public_corpus", None)
            if isinstance(corpus, str):
                found.setdefault((defense.name, corpus), (defense, corpus))
    return list(found.values())


def _report(error: BenchmarkError, problems: list[str] | None) -> None:
    """Raise ``error``, or keep it in ``problems`` (a dry run lists the cells anyway)."""
    if problems is None:
        raise error
    problems.append(str(error))


__all__ = ["SERVICE_MARKER", "load_benchmark", "public_corpora"]
