"""Which cells of a submission may join a published benchmark: the checks ``benchmark verify`` makes on every
cell, before and without any re-run.

A submission is a benchmark folder (``benchmark.json`` and a folder per cell) that a contributor sends
back: their own cells, with or without copies of the published ones. A cell whose ``cell_id`` the
published index lists is a published cell (its copy, if there is one, must be the published result
unchanged); every other indexed cell is the contributor's, and joins the published tables only when it
was measured exactly as the published cells were. Each of these is checked, and a cell that fails one
is *refused* with the field that differs and what to do:

* its result is there, readable, of its indexed cell, and no attack of it failed (a cell its run marked ``failed``
  in ``sweep.json`` holds none: the refusal names the error);
* its defense's version (``defense.origin``) is the plugin installed here, checked for every cell;
* its seed is a published seed, and its dataset one the published benchmark runs its defense on;
* protocol: a defense whose service customizes the encoder (it has a ``method`` parameter) ran every setting of
  the service's customization (``method``, ``epochs``, ``lr``, ``lr_grid``...: the parameters of ``identity``,
  the service alone) and every ``[service]`` key as the published file runs it: the ``[service]`` value, the
  profile's default where ``[service]`` names none (the key absent from the cell's setting), or, for a defense
  the published file runs, what its own table gives it (a contributor's table may not change the protocol);
* configuration: its recorded ``cell_id`` is the one the published file makes for this defense,
  setting, seed and dataset (:func:`~rapt_audit.benchmark.plan.plan_cells` on the published file, with
  this one defense): profile, model, split sizes and attacks as published;
* signature: its result's comparability signature (data and its fingerprint, split sizes, model and its
  fingerprint, profile, attacks and their settings, the code digest of the built-ins, third-party attack
  versions, the package's minor version) is one that the published cells of its dataset carry.

The published protocol comes from the published folder's own copy of its file (``benchmark.toml``; else the
shipped file its index names, checked against the index's sha256) and its signatures from its finished
cells: a benchmark file alone holds no fingerprint or code digest.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Sequence

from rapt_audit.api.errors import DataError, ResultError, UsageError
from rapt_audit.api.params import plugin_fields
from rapt_audit.api.parsing import read_document
from rapt_audit.api.plugins import DEFENSES, load, reference_defense
from rapt_audit.benchmark.join import Joined, join
from rapt_audit.benchmark.plan import BenchCell, plan_cells
from rapt_audit.benchmark.run import COPY_FILE
from rapt_audit.benchmark.spec import Benchmark, DefenseGrid, set_text, shipped_dir
from rapt_audit.benchmark.validate import SERVICE_MARKER, load_benchmark
from rapt_audit.pipeline.config import measured_settings
from rapt_audit.pipeline.results import RunResult, signature_fields
from rapt_audit.pipeline.sweep import SWEEP_INDEX
from rapt_audit.reporting.check import signature_changes

#: What to do when a signature field differs, by field (see :func:`rapt_audit.pipeline.results.signature`).
SIGNATURE_FIXES = {
    "data": "run it on the published data files (the fingerprint is of the data the cell read)",
    "splits": "run it from the published benchmark file, whose [splits] every cell uses",
    "model": "run it with the published model (the fingerprint is of its weights)",
    "profile": "run it from the published benchmark file, whose profile every cell uses",
    "attacks": "run it from the published benchmark file: its attacks, with their default settings",
    "code": "run it with the rapt-audit the benchmark was published with (the git_sha and version in a published "
            "cell's env): the digest is of the built-in defenses, attacks and core that measured every row",
    "plugins": "run it with the third-party attacks, at the versions, of the published cells",
    "v": "run it with the rapt-audit version the benchmark was published with",
}


@dataclass(frozen=True)
class Published:
    """A published benchmark folder read back for comparison.

    Attributes:
        folder: The folder.
        joined: Its cells read (:func:`~rapt_audit.benchmark.join.join`).
        bench: Its file, parsed from the folder's own copy (``benchmark.toml``).
        signatures: Dataset → how many of its finished cells carry each signature.
    """

    folder: Path
    joined: Joined
    bench: Benchmark
    signatures: dict[str, Counter[str]]

    @property
    def cell_ids(self) -> dict[str, dict[str, Any]]:
        """``cell_id`` → the published index's cell."""
        return {c["cell_id"]: c for c in self.joined.index["cells"]}

    def codes(self, dataset: str) -> Counter[str]:
        """Code digest (first digits; ``""`` where a signature records none) → how many finished cells of
        ``dataset`` ran it. More than one where cells were measured (or refreshed) by different code."""
        found: Counter[str] = Counter()
        for sig, n in self.signatures.get(dataset, Counter()).items():
            found[signature_fields(sig).get("code", "")] += n
        return found


def read_published(folder: str | Path) -> Published:
    """Read a published benchmark folder (its index, cells and file copy).

    Raises:
        ResultError: when it holds no benchmark index, no copy of its file (nor names a file that is here), a file
            other than the one its cells ran from, or no finished cell.
    """
    folder = Path(folder)
    joined = join(folder)
    bench = load_benchmark(_published_file(folder, joined.index), check_data=False)
    if bench.sha256 != joined.index.get("file_sha256"):
        raise ResultError(f"{bench.path} is not the file {folder} was run from (sha256 {bench.sha256[:12]}, the index "
                          f"records {str(joined.index.get('file_sha256'))[:12]}); restore the folder's {COPY_FILE}")
    signatures: dict[str, Counter[str]] = {}
    for cell in joined.index["cells"]:
        result = joined.cells.get(cell["name"])
        if result is not None:
            signatures.setdefault(cell["dataset"], Counter())[result.signature] += 1
    if not signatures:
        raise ResultError(f"{folder} holds no finished cell, so there is no published signature to compare with")
    return Published(folder, joined, bench, signatures)


def _published_file(folder: Path, index: dict[str, Any]) -> Path:
    """The file the published cells were run from: the folder's copy, else the file its index names (a shipped
    ``benchmarks/NAME.toml`` wherever the package is installed)."""
    if (folder / COPY_FILE).is_file():
        return folder / COPY_FILE
    named = Path(index["file"])
    path = shipped_dir() / named.name if named.parent == Path("benchmarks") else named
    if not path.is_file():
        raise ResultError(f"{folder} holds no {COPY_FILE} and its index names {index['file']}, which is not here; give "
                          "the published folder as benchmark run wrote it (the committed reports/NAME/ or a download)")
    return path


def sweep_failures(folder: Path) -> dict[str, str]:
    """Cell name → why it failed, for each cell the folder's ``sweep.json`` marks ``failed`` (empty when there is no
    readable one: the file is the contributor's run's record, not needed to check a cell). A failed cell holds no
    result, so it is refused as unfinished: this names the error its run stopped with instead."""
    try:
        rows = read_document(folder / SWEEP_INDEX, source=str(folder / SWEEP_INDEX), fmt="json")[1]["cells"]
        return {str(r["name"]): f"its run failed ({r.get('error') or 'sweep.json records no error'})" for r in rows
                if r.get("status") == "failed"}
    except (UsageError, KeyError, TypeError, AttributeError):
        return {}


def same_result(a: RunResult, b: RunResult) -> bool:
    """Whether two results of one cell are the same measurement: everything but its provenance (``env``: when,
    where and how long it ran, which a maintainer's refreshed copy of an unchanged cell changes) and the
    settings that do not change a result (where it was written, the machine's data folder)."""
    def measured(r: RunResult) -> dict[str, Any]:
        doc = r.to_dict()
        return {**{k: v for k, v in doc.items() if k != "env"}, "config": measured_settings(doc["config"])}

    return measured(a) == measured(b)


def check_installed(cells: Sequence[dict[str, Any]], results: dict[str, RunResult]) -> None:
    """Every defense of ``cells`` is installed here, at a version some of its cells recorded (``defense.origin``).

    Only what stops the whole command is raised: a defense that is not installed, or one installed at a version
    none of its cells ran (the installation is what is wrong, not the cells). A cell whose version differs from
    the installed one that other cells of its defense ran is that cell's refusal (:func:`origin_refusal`), so
    every cell is compared, not only the first one found.

    Raises:
        UsageError: naming the defense, the distributions and versions its cells ran with, and the fix.
    """
    load()
    for defense in dict.fromkeys(c["defense"] for c in cells):
        recorded = Counter(origin for c in cells if c["defense"] == defense
                           and (origin := _origin(results.get(c["name"]))))
        ran = ", ".join(f"{o} ({n} cell{'s' if n > 1 else ''})" for o, n in recorded.most_common())
        dist, _, version = recorded.most_common(1)[0][0].rpartition(" ") if recorded else ("", "", "")
        install = f"pip install '{dist}=={version}'" if dist else "install the contributor's plugin package"
        if defense not in DEFENSES:
            raise UsageError(f"defense {defense!r} of the submission is not installed here"
                             + (f" (its cells ran with {ran})" if recorded else "")
                             + f"; {install}, check it with rapt-audit plugin check {defense}, then run verify again")
        here = DEFENSES.entry(defense).origin
        if recorded and here not in recorded:
            raise UsageError(f"defense {defense!r} is installed here from {here or 'rapt-audit itself'}, but the "
                             f"submission's cells ran with {ran}: re-runs would measure other code; {install}")


def _origin(result: RunResult | None) -> str:
    """The plugin distribution and version a result's defense came from (``""``: built in, or not recorded)."""
    return str(result.defense.get("origin") or "") if result is not None else ""


def origin_refusal(cell: dict[str, Any], result: RunResult | None) -> str | None:
    """Why ``cell`` ran another version of its defense than the one installed here, or None. Checked for every
    cell (:func:`check_installed` has made sure the installed version is one some cell of the defense ran): a cell
    of another version would be re-run, and would join the table, as code it was not measured with."""
    recorded, here = _origin(result), DEFENSES.entry(cell["defense"]).origin
    if not recorded or recorded == here:
        return None  # a cell that records no origin (built in, or written before origins were) has none to compare
    return (f"defense.origin: ran with {recorded}, but {here or 'the built-in'} {cell['defense']} is installed here, "
            "the version other cells of it ran: every cell of a defense must measure one version; re-run this cell "
            f"with {here or 'the built-in defense'} (or send only the cells of one version)")


def code_refusal(published: Published, cell: dict[str, Any], result: RunResult,
                 here: tuple[str, str]) -> str | None:
    """Why the admitted ``cell`` cannot be re-run by this installation, or None when it can; ``here``: the
    ``code:`` values this code gives the cell's table (:func:`~rapt_audit.api.components.table_codes`: the
    per-component one, then the package's, for cells signed before issue #62).

    Decided for each cell against the published cells it is compared with: those of its dataset, whose signature
    it carries (admission made sure of that), so a published folder whose cells ran several code digests still
    gives each cell its own verdict. A re-run measures this installation's code: one of a cell that ran other
    code, or that records no digest to compare (which code it must be cannot be told), would report the code
    apart as a difference of the cell; it is refused with the fix instead, and the other cells go on.
    """
    mine, codes = signature_fields(result.signature).get("code", ""), published.codes(cell["dataset"])
    mixed = (f" (the published cells of {cell['dataset']} ran {len(codes)} code digests: "
             + ", ".join(f"{c or 'none recorded'} ({n} cell{'s' if n > 1 else ''})" for c, n in codes.most_common())
             + ")" if len(codes) > 1 else "")
    skip = "or pass --sample 0 to run the checks without re-runs"
    if not mine:
        return (f"re-run: the cell's signature records no code digest, so which code a re-run must run cannot be "
                f"told{mixed}; re-run the cell with the rapt-audit the benchmark was published with (it records "
                f"the digest), {skip}")
    if mine in here:
        return None
    here = here[0]
    sha = next((str(r.env.get("git_sha"))[:12] for r in published.joined.cells.values()
                if r.signature == result.signature and r.env.get("git_sha")), None)
    return (f"re-run: this rapt-audit's code digest is {here}, but the cell and the published cells of "
            f"{cell['dataset']} with its signature ran {mine}{mixed}: a re-run here would measure other code; install "
            f"the rapt-audit they ran ({f'git_sha {sha}' if sha else 'the git_sha in their env'}) and verify again, "
            f"{skip}")


def expected_cell(published: Published, cell: dict[str, Any], *, out: Path, data_dir: str | None = None,
                  device: str | None = None) -> BenchCell | None:
    """The cell the published file makes for ``cell``'s defense, setting, seed and dataset, named as ``cell`` and
    written below ``out``; None when the published benchmark runs that defense on no such dataset.

    Raises:
        UsageError, DataError: when the published file cannot make a cell of that setting (a value the defense
            refuses, a key it does not have): the caller refuses that one cell (:func:`configuration_refusal`).
    """
    grid = DefenseGrid(cell["defense"], (), tuple(cell["setting"].items()))  # the setting as the cell ran it
    bench = replace(published.bench, defenses=(grid,), seeds=(cell["seed"],))
    for planned in plan_cells(bench, out=out, data_dir=data_dir, device=device):
        if planned.dataset == cell["dataset"]:
            config = replace(planned.cell.config, out=str(out / cell["name"]))
            return replace(planned, cell=replace(planned.cell, name=cell["name"], config=config))
    return None


def configuration_refusal(exc: UsageError | DataError) -> str:
    """The refusal of a cell the published file cannot make, or whose protocol cannot be read (``exc``)."""
    return (f"configuration: {str(exc).rstrip('.')}; run it from the published benchmark file, not an edited copy "
            "or index")


def refusals(published: Published, cell: dict[str, Any], result: RunResult | None, problem: str | None,
             expected: BenchCell | None) -> list[str]:
    """Why ``cell`` (the contributor's) may not join the published benchmark, one line per field; empty when it
    may. ``problem``: why its result could not be read, if it could not (see the module docstring).

    Raises:
        UsageError: when the published index's ``service`` is not a table (:func:`configuration_refusal`).
    """
    if result is None:
        return [f"result: {problem or 'not finished (no result.json)'}; run the cell to the end and send its folder"]
    found = []
    if result.failed:
        found.append(f"result: attack(s) {', '.join(sorted(result.failed))} failed; run the cell again until "
                     "every attack finishes")
    seeds = published.joined.index["seeds"]
    if cell["seed"] not in seeds:
        found.append(f"seed: {cell['seed']} is not a published seed ({', '.join(map(str, seeds))}); run the "
                     "published seeds only, so that rows combine the same seeds")
    found += _protocol(published, cell)
    if (origin := origin_refusal(cell, result)) is not None:
        found.append(origin)
    if expected is None:
        found.append(f"dataset: the published benchmark runs no {cell['defense']} cell on {cell['dataset']}; drop it")
    elif not expected.cell.config.recorded_as(cell["cell_id"]):
        changed = _config_changes(result.config, expected.cell.config.to_dict())
        found.append(f"configuration: {changed or 'its recorded cell_id'} differs from the cell the published file "
                     "makes for this setting; run it from the published benchmark file, not an edited copy")
    reference = published.signatures.get(cell["dataset"])
    if reference and result.signature not in reference:
        usual = reference.most_common(1)[0][0]
        for field, (theirs, ours) in signature_changes(result.signature, usual).items():
            found.append(f"signature {field}: {theirs or 'none'} where the published cells have {ours or 'none'}; "
                         f"{SIGNATURE_FIXES.get(field, 'run it as the published cells were run')}")
    elif not reference:
        found.append(f"signature: no published cell of {cell['dataset']} has finished, so there is nothing to "
                     "compare its signature with")
    return found


def service_parameters() -> frozenset[str]:
    """The settings of the service's customization (``method``, ``epochs``, ``lr``, ``lr_grid``...): the parameters
    of the no-privacy reference (``identity``, :func:`~rapt_audit.api.plugins.reference_defense`), whose service is
    the customization alone (the parameter group every defense with a ``method`` parameter extends; this layer
    reaches it through the registry, never by importing a defense)."""
    load()
    return frozenset(plugin_fields(DEFENSES.get(reference_defense())))


def _protocol(published: Published, cell: dict[str, Any]) -> list[str]:
    """The protocol settings ``cell`` ran otherwise than the published file runs them (module docstring): those
    of the service's customization and the ``[service]`` keys, for a defense whose service customizes the
    encoder."""
    service = published.joined.index.get("service") or {}
    if not isinstance(service, dict):
        raise UsageError(f"the published index's service is {type(service).__name__} {service!r}, not a table of "
                         "settings, so the protocol cannot be checked; restore the published benchmark.json")
    fields = plugin_fields(DEFENSES.get(cell["defense"]))
    if SERVICE_MARKER not in fields:
        return []  # its service does not customize the encoder: [service] does not apply to it
    keys = [k for k in fields if k in service or k in service_parameters()]
    grid = next((g for g in published.bench.defenses if g.name == cell["defense"]), None)
    points = [dict(p) for p in grid.points()] if grid is not None else [
        {k: set_text(v) for k, v in service.items() if k in fields}]
    found = []
    for key in keys:
        got = cell["setting"].get(key)
        allowed = {p.get(key) for p in points}
        if (None if got is None else set_text(got)) in allowed:
            continue
        what = f"ran without {key}" if got is None else f"ran with {key}={set_text(got)}"
        published_value = set_text(service[key]) if key in service else None
        if allowed != {published_value}:  # the published table of this defense sets it
            options = " or ".join(sorted(v or "the profile's default" for v in allowed))
            found.append(f"protocol: {what}, but the published file runs {cell['defense']} with {key}: {options}; "
                         f"keep {key} as the published table of {cell['defense']} sets it")
        elif key in service:
            found.append(f"protocol: {what}, but the published [service] sets {key}={published_value} for every "
                         f"defense whose service customizes the encoder; remove {key} from your defense's table")
        else:
            found.append(f"protocol: {what}, but the published [service] does not set {key}, so every defense whose "
                         f"service customizes the encoder runs the profile's default; remove {key} from your "
                         "defense's table")
    return found


def _config_changes(got: dict[str, Any], want: dict[str, Any]) -> str:
    """``attack_args: {...} (published {...})``: the measured configuration keys that differ."""
    got, want = measured_settings(got), measured_settings(want)
    keys = [k for k in dict.fromkeys([*want, *got]) if got.get(k) != want.get(k)]
    return "; ".join(f"{k}: {got.get(k)!r} (published {want.get(k)!r})" for k in keys)


__all__ = ["Published", "SIGNATURE_FIXES", "check_installed", "code_refusal", "configuration_refusal",
           "expected_cell", "origin_refusal", "read_published", "refusals", "same_result", "service_parameters",
           "sweep_failures"]
