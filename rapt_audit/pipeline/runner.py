"""``run(config) -> RunResult``: one audit of one defense, end to end.

1. Build the defense and the selected attacks (every bad name or value fails here, before work).
2. Load the dataset and cut disjoint victim and attacker splits.
3. ``defense.fit(victim_train)``; ``defense.utility(victim_test)``.
4. ``defense.release(victim_test)`` once; every applicable attack is fitted on the attacker's own
   data and scored on that one release. Inapplicable pairs are recorded as skipped with a reason;
   an attack that raises or returns the wrong thing is recorded as failed, naming the broken
   contract (:mod:`~rapt_audit.pipeline.contracts`), and the other attacks go on. A defense that
   raises stops the run with a :class:`~rapt_audit.api.errors.PluginError` naming it.
   The victim release and the attackers' adaptive releases go through the on-disk release cache
   (:mod:`~rapt_audit.pipeline.cache`), so a re-run reads them instead of privatizing again.
5. Write ``<out>/result.json`` atomically (nothing for a run that fails, or is stopped before its attacks;
   stopped during them, the attacks that finished: :mod:`~rapt_audit.pipeline.attack_loop`).

Steps 1-4 are :func:`compute`, which touches no output directory: a sweep's Ray workers
(:mod:`~rapt_audit.pipeline.ray_executor`) call it on machines whose disks differ from the
driver's, and the driver writes what they return. :func:`run` is :func:`plan`, the lock, then
:func:`compute`'s steps and the write, so both paths give the same numbers for the same config.

The run holds the lock of ``<out>`` throughout (:mod:`~rapt_audit.api.locks`): a second process
aimed at the same directory fails at once instead of racing the first to ``result.json``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

from rapt_audit.api.errors import ResultError, UsageError
from rapt_audit.api.components import CellCode
from rapt_audit.api.files import remove_stray_temps
from rapt_audit.api.locks import hold_out_dir
from rapt_audit.api.outputs import folder_exists
from rapt_audit.api.params import get_params, make_plugin, plugin_args, to_jsonable
from rapt_audit.api.plugins import ATTACKS, DEFENSES, load_for, origins
from rapt_audit.api.threat import ThreatModel, declared_threat_model, threat_model_record
from rapt_audit.api.types import AttackFailure
from rapt_audit.api.version import __version__
from rapt_audit.data import Dataset, Splits, SplitSizes, load_dataset, make_splits, resolve_data_dir
from rapt_audit.encoder.models import model_fingerprint, resolve_device
from rapt_audit.encoder.precision import resolve_precision
from rapt_audit.encoder.threads import current_threads
from rapt_audit.mechanisms import analysis_pack
from rapt_audit.pipeline.attack_loop import again, bounded, run_attacks
from rapt_audit.pipeline.cache import cached_defense
from rapt_audit.pipeline.config import RunConfig, profile_split_sizes
from rapt_audit.pipeline.contracts import check_utility, checked_release, defense_call
from rapt_audit.pipeline.context import RunContext, default_cache_dir, derive_seed
from rapt_audit.pipeline.gpu_usage import GpuMonitor, monitor as gpu_monitor
from rapt_audit.pipeline.results import (
    RESULT_FILE,
    SYNTHETIC_WARNING,
    RunResult,
    environment,
    read_result,
    signature,
    why_unreadable,
    write_result,
)
from rapt_audit.pipeline.roles import check_model, defense_context, service_provenance
from rapt_audit.pipeline.stage_reuse import StoredStages, here_code, reusable_in, staleness
from rapt_audit.pipeline.text_store import TextReleaseStore
from rapt_audit.scoring.worst_case import WORST_CASE, WORST_CASE_THREAT, worst_case

Log = Callable[[str], None]


@dataclass
class Plan:
    """A checked run, ready to execute: plugins built, data loaded and split, output directory chosen.

    ``existing`` is the finished result of this exact run that ``out`` held when :func:`plan` looked, when
    the code here would compute none of it differently (a stale one is run again: :mod:`.stage_reuse`);
    ``here`` is the digests of the code here for this cell (:class:`~rapt_audit.api.components.CellCode`).
    """

    config: RunConfig
    defense: Any
    attacks: dict[str, Any]
    dataset: Dataset
    splits: Splits
    out: Path
    existing: RunResult | None = None
    here: CellCode | None = None


def default_dataset(config: RunConfig) -> str:
    """The dataset a run uses when none is named: SST-2 if a data directory is configured, else synthetic.

    SST-2 is the real default because it supports both utility (sentiment) and the inversion and
    NER attacks; the Trustpilot subset we have carries private attributes but no task label.
    """
    if config.dataset:
        return config.dataset
    return "sst2" if resolve_data_dir(config.data_dir) is not None else "synthetic"


#: Why ``--profile paper`` without a GPU stops before any work, and what it would cost.
PAPER_ON_CPU = (
    "--profile paper runs the papers' settings on full datasets (SST-2: about 17,000 training sentences per "
    "victim split, up to 6 epochs, 150 prompt tokens, every attack at full size); one such cell (identity on "
    "SST-2, every inversion attack) took 6 minutes on an H100 (reports/sst2-paper) and would take hours on a "
    "CPU (extrapolated: the cpu profile prompt-tunes 2,000 sentences of 64 tokens in about 35 s on 2 cores). "
    "torch sees no CUDA device. Run it on a GPU machine (docs/gpu.md), use --profile cpu, or pass "
    "--device cpu to run the paper profile on this CPU anyway.")


def check_paper_device(config: RunConfig) -> None:
    """Refuse the ``paper`` profile on a machine without CUDA unless ``--device cpu`` insists.

    Raises:
        UsageError: with the expected cost, before any data is read or model trained.
    """
    if config.profile == "paper" and config.device == "auto" and resolve_device("auto") == "cpu":
        raise UsageError(PAPER_ON_CPU)


def _prepare(config: RunConfig) -> Plan:
    """:func:`plan` without the look at the output directory (which a remote worker does not have)."""
    check_paper_device(config)
    # Only the third-party plugins the run selects are imported: one that hangs at import costs only itself.
    load_for("defense", config.defense)
    load_for("attack", ",".join([config.attacks, *config.attack_args]))
    defense = make_plugin(DEFENSES, config.defense,
                          plugin_args(DEFENSES.get(config.defense), config.profile, dict(config.defense_args)))
    names = ATTACKS.select(config.attacks)
    for name in config.attack_args:
        if name not in names:
            ATTACKS.get(name)  # unknown name → did-you-mean error
    attacks = {n: make_plugin(ATTACKS, n, plugin_args(ATTACKS.get(n), config.profile,
                                                      dict(config.attack_args.get(n, {})))) for n in names}
    dataset = load_dataset(default_dataset(config), config.data_dir, columns=config.column_args)
    sizes = profile_split_sizes(config.profile, len(dataset.records), config.split_overrides)
    splits = make_splits(dataset, SplitSizes(**sizes), seed=derive_seed(config.seed, "splits"))
    out = Path(config.out) if config.out else Path("runs") / (
        f"{config.defense}-{dataset.name}-{config.profile}-s{config.seed}-{config.cell_id()[:8]}")
    return Plan(config, defense, attacks, dataset, splits, out, here=here_code(config, attacks))


def plan(config: RunConfig) -> Plan:
    """Validate ``config`` completely and load what the run needs, without side effects.

    Builds the defense and the attacks with checked parameters, loads the dataset, cuts the run's
    seeded splits (so impossible split sizes fail here) and checks the output directory.

    Raises:
        UsageError, DataError, ResultError: with messages that name the problem and the fix.
    """
    for role, spec in (("client", config.model), ("service", config.service_model)):
        check_model(spec, role=role)  # a model not installed here fails now, naming the step
    checked = _prepare(config)
    existing = check_out_dir(checked.out, config)
    # A result other code measured is not this run's: a sweep runs it again, reusing its fresh stages.
    checked.existing = existing if existing is not None and not staleness(existing, checked.here) else None
    return checked


def check_out_dir(out: Path, config: RunConfig) -> RunResult | None:
    """Return the finished result already in ``out`` for this exact run, if any.

    Raises:
        ResultError: when ``out`` holds a different run, a corrupt result, or unrelated files.
        UsageError: when ``out`` is a file, a device or a loop of links (:mod:`rapt_audit.api.outputs`).
    """
    folder_exists(out, name="output directory")
    path = out / RESULT_FILE
    if path.is_symlink() and not path.exists():  # a loop of links: neither a result nor "not empty"
        raise ResultError(f"{path} is not a readable result file ({why_unreadable(path)}); remove it")
    if path.exists():
        existing = read_result(path)
        # Its stored settings, recomputed canonically: a result written before ids were canonical is this run too.
        if not config.matches(existing.config):
            raise ResultError(
                f"output directory {out} holds a different run (defense {existing.defense.get('name')!r}, "
                f"cell {existing.cell_id}); choose another --out or delete {path}")
        if any(isinstance(o, AttackFailure) for o in existing.attacks.values()):
            return None  # some attacks failed there: this run is not finished, and a fixed plugin gets its turn
        return existing
    if out.is_dir() and any(p for p in out.iterdir() if not p.name.startswith(".")):
        raise ResultError(f"output directory {out} is not empty and holds no rapt-audit result; choose an empty "
                          "or new directory for --out")
    return None


def run(config: RunConfig, *, log: Log | None = None, progress: bool = False) -> RunResult:
    """Run one audit and write its result file.

    Args:
        config: The run configuration.
        log: Where progress lines go (default: nowhere).
        progress: Show progress bars on long steps.

    Returns:
        The result (also written to ``<out>/result.json``). When the output directory already holds
        this exact run and ``config.force`` is false, that result is returned without re-running; when
        some of its stages are stale (other code measured them) or some attacks failed, only those
        stages run again and the rest is reused (:mod:`~rapt_audit.pipeline.stage_reuse`).

    Raises:
        ResultError: when another process is using the output directory (or see :func:`plan`).
    """
    say = log or (lambda _msg: None)
    checked = plan(config)
    # Held from the check of ``out`` to the write of its result, so two processes never run into one
    # directory (the second fails at once, naming the first); a sweep's cells lock their own folders.
    with hold_out_dir(checked.out):
        remove_stray_temps(checked.out, RESULT_FILE)  # left by a killed run; never read, now removed
        existing = check_out_dir(checked.out, config)
        if existing is not None and not config.force:
            stale = staleness(existing, checked.here)
            if not stale:
                say(f"{checked.out} already holds this run; reusing it (pass --force to run again)")
                return existing
            say(f"{checked.out} holds this run, measured by other code for {', '.join(stale.components())}: "
                "re-running those stages and reusing the rest (pass --force to run everything again)")
        return _execute(checked, say=say, progress=progress,
                        reused=reusable_in(checked.out, config, checked.here))


def compute(config: RunConfig, *, log: Log | None = None, progress: bool = False,
            reused: StoredStages | None = None) -> RunResult:
    """Run one audit and return its result without writing anything to ``config.out``.

    The output directory is neither read, locked nor written (only the caches under
    ``RAPT_AUDIT_CACHE`` are), so this runs anywhere the package and the data are installed; the
    caller validates and writes the result (:func:`rapt_audit.pipeline.results.write_result`).
    The numbers are those :func:`run` would write for the same ``config``; ``reused``: the stages of a
    stored run of this cell to take as they are (a sweep's driver reads them, :func:`.stage_reuse.reusable_in`).

    Raises:
        UsageError, DataError: as :func:`plan` (the output directory aside).
    """
    return _measure(_prepare(config), say=log or (lambda _msg: None), progress=progress, reused=reused)


def _execute(checked: Plan, *, say: Log, progress: bool, reused: StoredStages) -> RunResult:
    """Run a checked plan and write its result (the caller holds the output directory's lock).

    ``reused``: the stages of an earlier run of this cell that are not run again. Interrupted
    during the attacks, the result of those that finished is written before the interrupt goes on.
    """

    def keep(partial: RunResult) -> str:
        write_result(partial, checked.out)
        kept = sum(not isinstance(o, AttackFailure) for o in partial.attacks.values())
        return (f"the {kept} attack(s) that finished are kept in {checked.out / RESULT_FILE}; rerun the same command "
                "to run only the others")

    result = _measure(checked, say=say, progress=progress, reused=reused, keep=keep)
    write_result(result, checked.out)
    say(f"wrote {checked.out / RESULT_FILE}")
    return result


def _measure(checked: Plan, *, say: Log, progress: bool, reused: StoredStages | None = None,
             keep: Callable[[RunResult], str] | None = None) -> RunResult:
    """Run a checked plan: fit, utility, release, attacks; return the result (nothing written by itself).

    ``keep`` is handed the result of the attacks that finished when an interrupt stops them, and returns
    what the interrupt, raised again, then says (``None``: the partial result is dropped).
    """
    config = checked.config
    device = resolve_device(config.device)
    ctx = RunContext(seed=config.seed, profile=config.profile, device=device,
                     precision=resolve_precision(config.precision, device), model=config.model,
                     service_model=config.service_model, cache_dir=default_cache_dir(), progress=progress,
                     data_dir=config.data_dir, cache_analyses=config.release_cache)
    fingerprint = model_fingerprint(config.model, cache_dir=ctx.cache_dir)
    if config.release_cache:
        ctx.text_releases = TextReleaseStore(ctx.cache_dir / "texts", ctx=ctx, model_fingerprint=fingerprint)
    # Samples the GPU of a CUDA run per stage (env.gpu); stopped however the run ends.
    with gpu_monitor(ctx.device) as gpu:
        return _measure_stages(checked, ctx, gpu, say=say, fingerprint=fingerprint, reused=reused or StoredStages(),
                               keep=keep)


def _measure_stages(checked: Plan, ctx: RunContext, gpu: GpuMonitor, *, say: Log, fingerprint: str,
                    reused: StoredStages, keep: Callable[[RunResult], str] | None) -> RunResult:
    """:func:`_measure`'s stages, each timed and its GPU use attributed to it by ``gpu`` (``fingerprint``:
    the model's; ``reused``, ``keep``: see :func:`_measure`)."""
    config = checked.config
    started, clock = datetime.now(timezone.utc), time.perf_counter()
    timings: dict[str, float] = {}
    dataset, splits = checked.dataset, checked.splits
    warnings = [SYNTHETIC_WARNING] if dataset.synthetic else []
    say(f"dataset {dataset.name}: " + ", ".join(f"{k}={v}" for k, v in splits.sizes().items()))

    def timed(stage: str, fn: Callable[[], Any]) -> Any:
        t0 = time.perf_counter()
        bar.set_description(stage)
        with gpu.stage(stage):
            value = fn()
        timings[stage] = round(time.perf_counter() - t0, 3)
        return value

    defense = checked.defense
    served = service_provenance(config, ctx)  # the service's model when it is not the client's (issue #63)
    ctx = defense_context(ctx, defense)  # a release of the service's input rows: the service's view (.roles)
    steps = 3 + len(checked.attacks)
    bar = _progress_bar(steps, enabled=ctx.progress)
    say(f"fitting defense {config.defense}")
    with defense_call(config.defense, "fit", defense):
        timed("defense.fit", lambda: defense.fit(splits.victim_train, ctx=ctx))
    bar.update(1)
    if dataset.has_labels and reused.utility is not None:  # its defense and core unchanged: not measured again
        say(f"utility of {config.defense}: reused, the code that measured it is unchanged")
        utility = reused.utility_estimates()
    elif dataset.has_labels:
        with defense_call(config.defense, "utility", defense):
            utility = check_utility(config.defense,
                                    timed("defense.utility", lambda: defense.utility(splits.victim_test, ctx=ctx)))
    else:
        utility = {}
        warnings.append(f"dataset {dataset.name} has no task labels, so utility was not measured")
    bar.update(1)
    # Built after fit and utility: the key holds what they depended on (calibrated η, customization).
    cached = cached_defense(defense, ctx=ctx, enabled=config.release_cache, fit_records=splits.victim_train,
                            utility_records=splits.victim_test if dataset.has_labels else None,
                            model_fingerprint=model_fingerprint(ctx.model, cache_dir=ctx.cache_dir),  # its view's
                            compute=checked_release(config.defense, defense))
    release = timed("defense.release", lambda: cached.release(splits.victim_test, ctx=ctx))
    victim_release = cached.last
    bar.update(1)
    outcomes, stop = run_attacks(
        checked.attacks, release_kinds=release.kinds, defense=config.defense, reused=reused.outcomes(), say=say,
        step=lambda: bar.update(1),
        run_one=lambda name, attack: bounded(
            name, attack, limit=config.attack_timeout, say=say,
            fit=lambda: timed(f"attack.{name}.fit", lambda: attack.fit(splits.attacker, cached, ctx=ctx)),
            score=lambda: timed(f"attack.{name}", lambda: attack.attack(release, splits.victim_test, ctx=ctx))))
    bar.close()
    threat_models = {n: threat_model_record(a) for n, a in checked.attacks.items()}
    # An interrupted run's worst case would be over some attacks only: none is written until all have run.
    worst = None if stop is not None else worst_case(outcomes, rng=ctx.rng("worst_case"),
                       reads_release=lambda n: "release" in (declared_threat_model(checked.attacks[n]) or
                                                             ThreatModel(knows=())).knows)
    if worst is not None:  # the defense's worst case, beside the attacks it is taken over (issue #39)
        outcomes[WORST_CASE] = worst
        threat_models[WORST_CASE] = WORST_CASE_THREAT.to_dict()
    env = environment()
    env.update({"seed": config.seed, "device": ctx.device, "precision": ctx.precision, "model": config.model,
                "model_fingerprint": fingerprint, **served,
                "data_fingerprint": dataset.fingerprint,
                "started_at": started.isoformat(timespec="seconds"),
                "wall_time_s": round(time.perf_counter() - clock, 3), "timings_s": timings, "gpu": gpu.summary(),
                "threads": current_threads(),
                "threat_models": threat_models,
                "release_cache": {"victim_test": victim_release, **cached.report(), **ctx.tallies(),
                                  **({"texts": ctx.text_releases.report()} if ctx.text_releases else {})}})
    env["code"] = checked.here.to_dict()  # per component (issue #62); the signature's code: is their shared part
    if reused:  # stages of an earlier run of this cell, on unchanged code: their stored seconds stand for them
        reused.record(env, timings)
    if (packed := analysis_pack.provenance(ctx)) is not None:  # spaCy absent: whose analyses the run read
        env["spacy_analyses"] = packed
    attack_settings = {n: get_params(a) for n, a in checked.attacks.items()}
    result = RunResult(
        signature=signature(dataset=dataset.name, data_fingerprint=dataset.fingerprint,
                            split_sizes=splits.sizes(), model=config.model,
                            model_fingerprint=env["model_fingerprint"], profile=config.profile,
                            attacks=attack_settings, package_version=__version__,
                            attack_args={n: dict(config.attack_args.get(n, {})) for n in checked.attacks},
                            code=checked.here.shared(), plugins=origins(ATTACKS, checked.attacks),
                            service=served.get("service_model", ""),
                            service_fingerprint=served.get("service_model_fingerprint", "")),
        cell_id=config.cell_id(), config=config.to_dict(),
        dataset={"name": dataset.name, "task": dataset.task, "synthetic": dataset.synthetic,
                 "source": dataset.source, "splits": splits.sizes(), "label_names": list(dataset.label_names),
                 "notes": _jsonable_notes(dataset.notes)},
        defense={"name": config.defense, **({"origin": o} if (o := DEFENSES.entry(config.defense).origin) else {}),
                 "params": get_params(defense), "exposes": sorted(defense.exposes),
                 "release_meta": _jsonable_notes(release.meta if reused.release_meta is None else reused.release_meta)},
        utility=utility, attacks=outcomes, env=env, warnings=warnings)
    if stop is not None:
        raise again(stop, keep(result) if keep is not None else "") from None
    return result


def _progress_bar(total: int, *, enabled: bool):  # noqa: ANN202 - tqdm
    """A tqdm bar over the run's stages (disabled when not on a terminal or when quiet)."""
    from tqdm.auto import tqdm  # lazy (tqdm)

    return tqdm(total=total, disable=not enabled, unit="step", leave=False)


def _jsonable_notes(notes: Any) -> dict[str, Any]:
    return to_jsonable(dict(notes))


def result_path(config: RunConfig) -> Path:
    """Where ``run(config)`` writes its result (without running it)."""
    return plan(config).out / RESULT_FILE


__all__ = ["Plan", "compute", "default_dataset", "plan", "read_result", "result_path", "run"]
