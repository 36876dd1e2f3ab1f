"""Pack what an offline GPU machine needs to run one rapt-audit command into a folder of limited size.

``rapt-audit bundle --out DIR -- run ARGS...`` writes these files (MiB measured for ``run --defense rapt
--attacks all --dataset sst2 --profile paper`` with Python 3.12 wheels: 58.5 in all, limit 60):

=====================  ======  =======================================================================
``model-low.bin``      21.7    the low bytes of the encoder's fp16 values (random bits: stored as they are)
``model.tar.xz``       15.4    their high bytes, the weight file's header, the tokenizer and config files
``wheels.tar.xz``      19.6    the contents of the wheels the GPU image lacks (spaCy, en_core_web_sm,
                               thinc and companions, seqeval, jsonschema), trimmed (:mod:`.wheels`)
``data.tar.xz``        1.7     only the data files the run reads (:mod:`.pieces`)
``analyses.tar.xz``            with ``--no-spacy`` only: spaCy's analyses of every text the run reads and the
                               vocabulary lexicon, made here (:mod:`.analyses`); the wheels then lack
                               spaCy, its model and companions (about 19 MiB less), and ``ner_spacy`` is skipped
``rapt_audit.tar.xz``  0.2     this package's source, installed layout
``unbundle.py``                the target side (:mod:`.target`), which ``run.sh`` runs
``manifest.json``              every piece's sha256 and size, the command, both model fingerprints, versions
=====================  ======  =======================================================================

There, ``sh DIR/run.sh`` verifies, installs, restores and runs, and leaves one results tar and a log
in ``$OUT``. The restored weights equal the fp16-rounded original, so their fingerprint differs from
the original's: results made from a bundle carry ``model:minilm@<restored fingerprint>`` in their
signature and are compared only with each other, never silently with fp32 results. The folder is
built beside ``--out`` and renamed into place once it is complete and within its size limit.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shlex
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from rapt_audit.api.errors import DataError, UsageError
from rapt_audit.api.files import write_atomic
from rapt_audit.api.outputs import check_out_folder
from rapt_audit.api.version import __version__
from rapt_audit.bundle import analyses as bundle_analyses, target as bundle_target, wheels as bundle_wheels
from rapt_audit.bundle.pieces import (
    Member,
    clock,
    data_members,
    encode_model,
    package_members,
    project_requirements,
    resolve_data,
    write_tar,
    xz_preset,
)
from rapt_audit.encoder.models import ALIASES, resolve_model_path, weights_fingerprint
from rapt_audit.pipeline.config import RunConfig
from rapt_audit.pipeline.context import default_cache_dir

MIB = 1 << 20
#: The default size limit: what the GPU machines of this project take in one upload, with room to spare.
DEFAULT_MAX_MIB = 60.0
RUN_SH = """#!/bin/sh
# Run the rapt-audit command packed in this bundle, offline, with nothing but python3 {python}:
#   sh run.sh [--out DIR] [--work DIR] [--check] [-- RAPT-AUDIT ARGS]
# Results: DIR (default $OUT) gets rapt-audit-results.tar.gz and rapt-audit-bundle.log.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
exec "${{PYTHON:-python3}}" "$here/unbundle.py" "$@"
"""


def pack(*, out: Path, command: Sequence[str], configs: Sequence[RunConfig], model_dir: Path | None = None,
         python: str = "3.12", wheels_from: Path | None = None, include: Sequence[str] = (),
         provided: Sequence[str] | None = None, data: Sequence[str] | None = None,
         max_mib: float = DEFAULT_MAX_MIB, preset: str = "9e", strip: bool = True, force: bool = False,
         pack_command: str = "rapt-audit bundle", dry_run: bool = False, no_spacy: bool = False,
         log: Callable[[str], None] = print) -> dict:
    """Write the bundle for ``rapt-audit COMMAND`` into ``out``; returns its manifest.

    Args:
        out: The bundle folder: new or empty, or with ``force`` an earlier bundle (its ``manifest.json``);
            a folder of anything else is refused (:func:`rapt_audit.api.outputs.check_out_folder`).
        command: The rapt-audit arguments to run there (``["run", "--defense", "rapt", ...]``).
        configs: The run configurations ``command`` makes (one per sweep cell), for the data it reads.
        model_dir: The model folder (default: where ``minilm`` resolves to, the configured model).
        python: The target's Python, ``MAJOR.MINOR``; wheels are chosen for it.
        wheels_from: Ship exactly the wheels in this folder instead of resolving and downloading them.
        include: Distributions to ship even though the GPU image is taken to have them.
        provided: Distributions the image has (default :data:`bundle_wheels.STOCK`).
        data: Dataset names to ship instead of those inferred from ``configs``.
        max_mib: The size limit of the whole folder.
        preset: xz preset of the compressed pieces (``9e`` smallest; ``0`` fastest, for tests).
        strip: Remove debug sections of shared libraries (needs binutils' ``strip``).
        force: Replace an existing ``out``.
        pack_command: How this bundle was made, repeated in messages on the target.
        dry_run: Print what would be packed (model, distributions, data files) and return ``{}``: nothing
            is downloaded, compressed or written.
        no_spacy: Ship spaCy's analyses of the run's texts (made here) instead of spaCy and its model.

    Raises:
        UsageError: for bad options or an existing ``out``.
        DataError: when a piece cannot be made, or the bundle exceeds ``max_mib`` (each piece's size listed).
    """
    elapsed, level = clock(), xz_preset(preset)
    out = Path(out)
    # The output rule: a new or empty folder, or (with --force) an earlier bundle, by its manifest's format.
    if check_out_folder(out, name="--out", index=bundle_target.MANIFEST, schema=bundle_target.FORMAT, key="format",
                        what="bundle") and not force:
        raise UsageError(f"--out {out} holds a bundle already; choose a new folder or pass --force to replace it")
    spec = _model_spec(configs)
    model_dir = Path(model_dir or resolve_model_path(spec))
    data_dir, datasets = resolve_data(configs, data)
    for what, path in (("the model", model_dir), ("--wheels-from", wheels_from), ("the data folder", data_dir)):
        if path is not None and out.exists() and Path(os.path.realpath(path)).is_relative_to(os.path.realpath(out)):
            raise UsageError(f"{what} {path} lies inside --out {out}, which the bundle replaces; choose another --out")
    data_files, listing = data_members(datasets, data_dir) if datasets else ([], {})
    if no_spacy and not configs:
        raise UsageError("--no-spacy packs spaCy's analyses of the texts a `run` or `benchmark run` reads; the command "
                         "after -- is neither, so pack it with spaCy (leave out --no-spacy)")
    needed = [n for n in bundle_wheels.NEEDED if not (no_spacy and n in bundle_wheels.SPACY)]
    dists = _distributions(python=python, wheels_from=wheels_from, include=include, provided=provided, needed=needed)
    if dry_run:
        texts = bundle_analyses.texts_to_pack(configs, datasets, data_dir) if no_spacy else None
        log(_plan(command, model_dir, python, dists, datasets, data_files, max_mib, texts))
        return {}
    wheels = (bundle_wheels.wheels_in(Path(wheels_from), python) if wheels_from is not None else bundle_wheels.fetch(
        dists, python=python, cache=default_cache_dir() / "bundle-wheels" / f"cp{python.replace('.', '')}", log=log))
    staged = bundle_wheels.stage(wheels, strip=strip, log=log)
    analyses, analyses_facts = [], None
    if no_spacy:
        with tempfile.TemporaryDirectory(prefix="rapt-audit-analyses-") as staging:
            analyses, analyses_facts = bundle_analyses.build(configs, datasets, data_dir, staging=Path(staging), log=log)
    model_members, low, model_facts = encode_model(model_dir)
    log(f"staged in {elapsed()} s; compressing (xz preset {preset})")
    partial = out.parent / f".{out.name}.partial"
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    try:
        pieces = _write_pieces(partial, level=level, model=model_members, low=low, staged=staged,
                               data=data_files, rapt=package_members(_requirements(no_spacy)), analyses=analyses)
        manifest = _manifest(pieces, command=command, python=python, pack_command=pack_command, staged=staged,
                             model_dir=model_dir, model_facts=model_facts, datasets=datasets, listing=listing,
                             data_dir=data_dir, provided=provided, max_mib=max_mib, seconds=elapsed(),
                             analyses=analyses_facts)
        manifest["total_bytes"] = 0
        for _ in range(5):  # the manifest states the folder's total, its own size included: settle the digits
            _write_scripts(partial, manifest)
            total = sum(p.stat().st_size for p in partial.iterdir())
            if total == manifest["total_bytes"]:
                break
            manifest["total_bytes"] = total
        if total > max_mib * MIB:
            smallest = "" if preset == "9e" else f"pack with --preset 9e (smallest; this was {preset}), "
            raise DataError(f"the bundle is {total / MIB:.2f} MiB, over --max-mib {max_mib:g}:\n{size_table(manifest)}\n"
                            f"To fit: {smallest}leave out what the run does not need (--data NAMES, --provided DIST), or "
                            "raise --max-mib if your upload limit allows")
        if out.exists():
            shutil.rmtree(out)
        partial.rename(out)
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    log(size_table(manifest))
    log(f"bundle written to {out} in {elapsed()} s ({total / MIB:.2f} MiB of {max_mib:g}); on the GPU machine: "
        f"sh {out.name}/run.sh")
    return manifest


def _model_spec(configs: Sequence[RunConfig]) -> str:
    """The run's model, which must be the embedded one (a bundle restores it as the ``minilm`` package)."""
    specs = {c.model for c in configs} or {"minilm"}
    other = sorted(s for s in specs if ALIASES.get(s.lower()) != ALIASES["minilm"])
    if other:
        raise UsageError(f"--model {other[0]}: a bundle carries the embedded model only (minilm); drop --model")
    services = sorted({c.service_model for c in configs if c.service_model is not None})
    if services:  # mpnet's 438 MB of weights cannot travel in a call's 64 MiB (issue #63 item 6)
        raise UsageError(f"--service-model {services[0]}: a bundle carries the embedded model only (minilm), so the "
                         "service there is the client's model; drop --service-model (or [service] model)")
    return "minilm"


def _requirements(no_spacy: bool) -> list[str]:
    """rapt-audit's requirements as its packed metadata states them (the target checks each): without
    spaCy and its model when the bundle carries their analyses instead."""
    left_out = bundle_wheels.SPACY if no_spacy else ()
    return [r for r in project_requirements() if canonicalize_name(Requirement(r).name) not in left_out]


def _distributions(*, python: str, wheels_from: Path | None, include: Sequence[str],
                   provided: Sequence[str] | None, needed: Sequence[str]) -> list[tuple[str, str]]:
    """``(name, version)`` to ship: the wheels of ``--wheels-from``, else the closure of what the image lacks."""
    if wheels_from is not None:
        return [bundle_wheels.wheel_name(w)[:2] for w in bundle_wheels.wheels_in(Path(wheels_from), python)]
    stock = bundle_wheels.STOCK if provided is None else frozenset(canonicalize_name(p) for p in provided)
    extra = {canonicalize_name(i) for i in include}
    return bundle_wheels.closure(tuple(needed) + tuple(sorted(extra)), provided=stock - extra,
                                 python=python)


def _plan(command: Sequence[str], model_dir: Path, python: str, dists: list[tuple[str, str]],
          datasets: dict[str, str], data_files: list[Member], max_mib: float, texts: list[str] | None) -> str:
    """``--dry-run``: what the bundle would hold."""
    data = [f"  {name}: {why}" for name, why in datasets.items()] or ["  none (the run uses the demo corpus)"]
    raw = sum(len(m.data) for m in data_files) / MIB
    if texts is not None:
        words = sum(len(t.split()) for t in texts)
        data.append(f"analyses (--no-spacy): {len(texts):,} texts, {words:,} words, tagged here in about "
                    f"{words / bundle_analyses.WORDS_PER_SECOND / 60:.0f} min; ner_spacy is skipped there")
    return "\n".join([
        "bundle plan (--dry-run: nothing was downloaded, compressed or written)",
        f"run there: rapt-audit {shlex.join(command)}",
        f"model: {model_dir} as an fp16 copy, restored to fp32 there",
        f"wheels for Python {python} ({len(dists)}): {', '.join(f'{n}=={v}' for n, v in dists)}",
        f"data: {len(data_files)} files, {raw:.2f} MiB before compression", *data,
        f"limit: {max_mib:g} MiB, checked once the pieces are compressed",
        "nothing was run or written"])


def _write_pieces(folder: Path, *, level: int, model: list[Member], low: bytes, staged: bundle_wheels.Staged,
                  data: list[Member], rapt: list[Member], analyses: list[Member]) -> dict[str, dict]:
    """Write every piece (the compressed ones side by side: xz releases the GIL); name → raw bytes and what."""
    jobs = {
        "model.tar.xz": (model, "the encoder's fp16 high bytes, header, tokenizer and config files"),
        "wheels.tar.xz": ([Member(n, d, m) for n, (d, m) in staged.files.items()],
                          "the wheels the GPU image lacks, trimmed"),
        "data.tar.xz": (data, "the data files the run reads"),
        "rapt_audit.tar.xz": (rapt, "rapt-audit's source"),
    }
    if analyses:
        jobs["analyses.tar.xz"] = (analyses, "spaCy's analyses of the run's texts and the vocabulary lexicon")
    with ThreadPoolExecutor(max_workers=len(jobs)) as pool:
        raws = {name: pool.submit(write_tar, folder / name, members, preset=level, x86=name == "wheels.tar.xz")
                for name, (members, _) in jobs.items()}
        (folder / "model-low.bin").write_bytes(low)
        pieces = {name: {"raw_bytes": future.result(), "what": jobs[name][1]} for name, future in raws.items()}
    pieces["model-low.bin"] = {"raw_bytes": len(low), "what": "the encoder's fp16 low bytes (random: stored as they are)"}
    for name, piece in pieces.items():
        path = folder / name
        piece.update(bytes=path.stat().st_size, sha256=bundle_target.sha256_file(path))
    return dict(sorted(pieces.items()))


def _manifest(pieces: dict, *, command: Sequence[str], python: str, pack_command: str, staged: bundle_wheels.Staged,
              model_dir: Path, model_facts: dict, datasets: dict, listing: dict, data_dir: Path | None,
              provided: Sequence[str] | None, max_mib: float, seconds: float, analyses: dict | None) -> dict:
    """What the target checks and what a reader of the results needs to know about the bundle."""
    ident = hashlib.sha256(json.dumps({k: v["sha256"] for k, v in pieces.items()}).encode("utf-8")).hexdigest()[:12]
    return {
        "format": bundle_target.FORMAT, "id": ident, "rapt_audit_version": __version__, "python": python,
        "command": list(command), "pack_command": pack_command, "max_mib": max_mib,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "packed_on": platform.platform(),
        "pack_seconds": seconds, "pieces": pieces,
        "model": {"spec": "minilm", "piece": "model.tar.xz", "low_piece": "model-low.bin", "source": str(model_dir),
                  "stored_dtype": "float16", "restored_dtype": "float32",
                  "fingerprint_original": weights_fingerprint(str(model_dir)), **model_facts,
                  "note": "the restored weights are the fp16-rounded original: results made from this bundle carry "
                          "fingerprint_restored in their signature and are comparable only with results made from it"},
        "wheels": {"piece": "wheels.tar.xz", "stripped": staged.stripped, "dropped": list(
                   bundle_wheels.DROPPED) + [f"spacy/lang/* but {', '.join(bundle_wheels.SPACY_LANGS)}"],
                   "provided_by_the_image": sorted(bundle_wheels.STOCK if provided is None else provided),
                   "distributions": staged.wheels, "shuffled": staged.shuffled},
        "rapt_audit": {"piece": "rapt_audit.tar.xz"},
        "analyses": analyses and {"piece": "analyses.tar.xz", **analyses},
        "data": {"piece": "data.tar.xz", "packed_from": str(data_dir) if data_dir else None,
                 "datasets": {name: {"why": why, "files": listing.get(name, [])} for name, why in datasets.items()}},
    }


def _write_scripts(folder: Path, manifest: dict) -> None:
    """Write ``run.sh`` (the one command), ``unbundle.py`` (the target side) and the manifest."""
    source = Path(bundle_target.__file__).read_bytes()
    write_atomic(folder / "unbundle.py", lambda h: h.write(source))
    run_sh = RUN_SH.format(python=manifest["python"]).encode("utf-8")
    write_atomic(folder / "run.sh", lambda h: h.write(run_sh))
    (folder / "run.sh").chmod(0o755)
    text = json.dumps(manifest, indent=1).encode("utf-8")
    write_atomic(folder / bundle_target.MANIFEST, lambda h: h.write(text))


def size_table(manifest: dict) -> str:
    """One line per piece: stored size, size before compression, what it holds; then the total."""
    lines = [f"{'piece':<20} {'MiB':>8} {'raw MiB':>9}  holds"]
    for name, piece in manifest["pieces"].items():
        lines.append(f"{name:<20} {piece['bytes'] / MIB:>8.2f} {piece['raw_bytes'] / MIB:>9.2f}  {piece['what']}")
    total = manifest.get("total_bytes") or sum(p["bytes"] for p in manifest["pieces"].values())
    lines.append(f"{'total (all files)':<20} {total / MIB:>8.2f} {'':>9}  limit {manifest['max_mib']:g} MiB")
    return "\n".join(lines)
