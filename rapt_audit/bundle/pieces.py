"""The model, data and rapt-audit pieces of an offline bundle, and the one way a piece is written.

* The encoder travels as fp16 (half the bytes): every float32 tensor of ``model.safetensors`` is
  rounded to float16, split into its high bytes (sign, exponent: compressible) and low bytes (random:
  stored as they are), next to the original file header and the tokenizer and config files. The
  target widens the values back to float32 (:func:`~rapt_audit.bundle.target.restore_weights`):
  every weight equals ``original.astype(float16).astype(float32)``.
* The data piece holds only the files the run reads. Which those are is not guessed from folder
  names: each dataset the run needs (:func:`datasets_needed`) is loaded by its own loader while an
  audit hook records the files it opens (:func:`files_read`).
* rapt-audit itself ships as its source tree in the installed layout, with a ``dist-info`` that
  carries its version and requirements.
"""

from __future__ import annotations

import hashlib
import importlib
import io
import json
import lzma
import os
import struct
import sys
import tarfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: the same parser from PyPI
    import tomli as tomllib

from rapt_audit.api.errors import DataError, ModelError, UsageError
from rapt_audit.api.plugins import ATTACKS, load
from rapt_audit.api.version import __version__
from rapt_audit.bundle.target import restore_weights, split_planes
from rapt_audit.data import DATASETS, is_file_dataset, resolve_data_dir
from rapt_audit.pipeline.config import RunConfig
from rapt_audit.pipeline.results import PACKED_FROM, git_sha
from rapt_audit.pipeline.runner import default_dataset

#: Files of a model folder that are weights (only ``model.safetensors`` ships, as fp16).
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".h5", ".onnx", ".msgpack", ".ot")
#: Public text every run may read: η calibration to a replacement rate, PCT2T's POS lexicon, pretraining's
#: default corpus, SnD's denoiser, and the key of the release cache (which fingerprints it).
PUBLIC = "wikitext2"
#: Attacks that train a tagger on CoNLL-2003 when the run's records carry no entity spans.
NER_TRAINING = "conll2003"
#: The folder of the ``rapt_audit`` package (this file is ``rapt_audit/bundle/pieces.py``).
CORE = Path(__file__).resolve().parent.parent


@dataclass
class Member:
    """One file of a piece: its path inside the tar, bytes and unix mode."""

    name: str
    data: bytes
    mode: int = 0o644


def xz_preset(text: str) -> int:
    """``"9e"`` → ``9 | lzma.PRESET_EXTREME``; ``"0"``-``"9"`` with an optional ``e``."""
    level, extreme = text.rstrip("e"), text.endswith("e")
    if not level.isdigit() or not 0 <= int(level) <= 9:
        raise UsageError(f"--preset {text!r}: use 0-9, optionally followed by e (9e: smallest, slowest)")
    return int(level) | (lzma.PRESET_EXTREME if extreme else 0)


def write_tar(path: Path, members: Iterable[Member], *, preset: int, x86: bool = False) -> int:
    """Write a reproducible ``.tar.xz`` (sorted, mtime 0, owner root); returns the members' total bytes.

    ``x86`` adds xz's BCJ filter, which makes the call addresses of x86 machine code repeat (shared
    libraries compress 1-2 % smaller; plain ``tar -xJf`` and Python's ``tarfile`` undo it).
    """
    buffer, raw = io.BytesIO(), 0
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for member in sorted(members, key=lambda m: m.name):
            info = tarfile.TarInfo(member.name)
            info.size, info.mode, info.mtime = len(member.data), member.mode, 0
            tar.addfile(info, io.BytesIO(member.data))
            raw += len(member.data)
    filters = [{"id": lzma.FILTER_X86}] if x86 else []
    blob = lzma.compress(buffer.getvalue(), format=lzma.FORMAT_XZ,
                         filters=[*filters, {"id": lzma.FILTER_LZMA2, "preset": preset}])
    path.write_bytes(blob)
    return raw


# --- the model -----------------------------------------------------------------------------------------------

def read_safetensors(path: Path) -> tuple[bytes, dict, bytes]:
    """``(the first 8 + n bytes verbatim, the parsed header, the data section)`` of a safetensors file."""
    blob = path.read_bytes()
    if len(blob) < 8:
        raise ModelError(f"{path} is not a safetensors file (too short)")
    (size,) = struct.unpack("<Q", blob[:8])
    try:
        header = json.loads(blob[8:8 + size])
    except ValueError:
        raise ModelError(f"{path} is not a safetensors file (unreadable header)") from None
    return blob[:8 + size], header, blob[8 + size:]


def encode_model(folder: Path) -> tuple[list[Member], bytes, dict]:
    """The fp16 copy of the model in ``folder``: the members of ``model.tar.xz``, the low bytes, and facts.

    Float32 tensors whose values overflow float16 (|x| > 65504) stay float32, as do other dtypes.

    Raises:
        ModelError: when the folder has no ``model.safetensors``.
    """
    import numpy as np  # lazy (numpy)

    weights = folder / "model.safetensors"
    if not weights.is_file():
        raise ModelError(f"{folder} has no model.safetensors; the bundle carries the encoder's weights in safetensors "
                         "form only")
    head, header, data = read_safetensors(weights)
    entries = sorted(((k, v) for k, v in header.items() if k != "__metadata__"), key=lambda kv: kv[1]["data_offsets"])
    halves, raws, tensors, max_error = [], [], [], 0.0
    for name, info in entries:
        start, end = info["data_offsets"]
        codec = "raw"
        if info["dtype"] == "F32":
            values = np.frombuffer(data[start:end], dtype="<f4")
            with np.errstate(over="ignore"):
                half = values.astype("<f2")
            if np.array_equal(np.isfinite(half), np.isfinite(values)):
                finite = np.isfinite(values)
                if finite.any():
                    max_error = max(max_error, float(np.abs(half[finite].astype("<f4") - values[finite]).max()))
                codec, shape = "fp16", info["shape"]
                if len(shape) == 2:  # a matrix column by column: its high bytes repeat more (0.5 % smaller)
                    codec, half = "fp16T", np.ascontiguousarray(half.reshape(shape).T)
                halves.append(half.tobytes())
        if codec == "raw":
            raws.append(data[start:end])
        tensors.append([name, codec, start, end, info["shape"]])
    low, high = split_planes(b"".join(halves), 2)
    raw = b"".join(raws)
    meta = {"file": weights.name, "data_bytes": len(data), "tensors": tensors}
    restored = restore_weights(meta, head, high, low, raw)  # the target's bytes, hashed here to be checked there
    members = [Member("weights.json", json.dumps(meta).encode("utf-8")), Member("header.bin", head),
               Member("high.bin", high), Member("raw.bin", raw)]
    for path in sorted(folder.rglob("*")):
        relative = path.relative_to(folder)
        if path.is_file() and not path.name.endswith(WEIGHT_SUFFIXES) and not any(
                p.startswith(".") for p in relative.parts):
            members.append(Member(f"files/{relative.as_posix()}", path.read_bytes()))
    facts = {"fingerprint_restored": hashlib.sha256(restored).hexdigest(), "fp32_bytes": len(head) + len(data),
             "tensors_fp16": sum(t[1] != "raw" for t in tensors), "tensors_kept": sum(t[1] == "raw" for t in tensors),
             "max_abs_rounding_error": max_error}
    return members, low, facts


# --- the data ------------------------------------------------------------------------------------------------

_recording: list[list[str]] = []
_hooked = False


def _audit(event: str, args: tuple) -> None:
    """Audit hook: while :func:`files_read` records, note the path of every file opened."""
    if _recording and event == "open" and isinstance(args[0], (str, bytes, os.PathLike)):
        _recording[-1].append(os.fsdecode(args[0]))


def files_read(action: Callable[[], Any]) -> list[str]:
    """The paths of the files opened while ``action`` runs (an audit hook, added once per process)."""
    global _hooked
    if not _hooked:
        sys.addaudithook(_audit)
        _hooked = True
    _recording.append([])
    try:
        action()
    finally:
        opened = _recording.pop()
    return list(dict.fromkeys(opened))


def datasets_needed(configs: Sequence[RunConfig], data_dir: Path | None) -> dict[str, str]:
    """Dataset name → why the run reads it: its own dataset(s), public text, CoNLL-2003 for trained NER attacks.

    Raises:
        UsageError: for a run on a file outside the data folder (``--dataset PATH``, ``pretrain_corpus=PATH``).
    """
    if data_dir is None:
        return {}
    load()
    needed: dict[str, str] = {}
    for config in configs:
        name = default_dataset(config)
        if is_file_dataset(name):
            raise UsageError(f"--dataset {name}: a bundle carries datasets of the data folder only; run on a built-in "
                             "dataset, or pack your file's folder as the data folder (--data-dir)")
        if config.defense_args.get("pretrain_corpus"):
            raise UsageError("pretrain_corpus=PATH names a file outside the data folder, which a bundle does not carry; "
                             "leave it unset to pretrain on WikiText-2")
        needed.setdefault(name, "the run's dataset")
        corpus = config.defense_args.get("public_corpus")
        if corpus:
            needed.setdefault(str(corpus), "the defense's public corpus")
        for attack in ATTACKS.select(config.attacks):
            tags = ATTACKS.entry(attack).tags
            if "ner" in tags and "off-the-shelf" not in tags:
                needed.setdefault(NER_TRAINING, f"training data of the {attack} attack")
    if (data_dir / PUBLIC).is_dir():
        needed.setdefault(PUBLIC, "public text (η calibration, the POS lexicon, pretraining, SnD's denoiser, "
                                  "the release-cache key)")
    return needed


def data_members(names: Mapping[str, str], data_dir: Path) -> tuple[list[Member], dict[str, list[str]]]:
    """The files each dataset's loader reads under ``data_dir`` (relative paths), with the dataset's SOURCE.md.

    ``SOURCE.md`` carries the dataset's licence terms, which travel with research data.

    Raises:
        DataError: when a loader fails (a missing file is named by it).
    """
    root = data_dir.resolve()
    members: dict[str, Member] = {}
    listing: dict[str, list[str]] = {}
    for name in names:
        loader = DATASETS.get(name)
        opened = files_read(lambda loader=loader: loader(data_dir))
        inside = [Path(p).resolve() for p in opened if root in Path(p).resolve().parents]
        if not inside:
            raise DataError(f"dataset {name!r} read no file under {data_dir}; is it a generated dataset? leave it out")
        folders = {p.relative_to(root).parts[0] for p in inside}
        extra = [root / f / "SOURCE.md" for f in sorted(folders) if (root / f / "SOURCE.md").is_file()]
        listing[name] = [p.relative_to(root).as_posix() for p in inside]
        for path in [*inside, *extra]:
            relative = path.relative_to(root).as_posix()
            members.setdefault(relative, Member(relative, path.read_bytes()))
    return list(members.values()), listing


def resolve_data(configs: Sequence[RunConfig], explicit: Sequence[str] | None) -> tuple[Path | None, dict[str, str]]:
    """The pack-time data folder (``--data-dir`` of the run, else ``$RAPT_AUDIT_DATA``) and the datasets to ship."""
    data_dir = resolve_data_dir(configs[0].data_dir) if configs else resolve_data_dir(None)
    if explicit is not None:
        if explicit and data_dir is None:
            raise UsageError("--data names datasets but there is no data folder: set RAPT_AUDIT_DATA or pass "
                             "--data-dir in the run's arguments")
        for name in explicit:
            DATASETS.get(name)  # an unknown name fails with did-you-mean
        return data_dir, {name: "named with --data" for name in explicit}
    return data_dir, datasets_needed(configs, data_dir)


# --- rapt-audit itself ----------------------------------------------------------------------------------------

def _tree(folder: Path, prefix: str) -> list[Member]:
    return [Member(f"{prefix}/{p.relative_to(folder).as_posix()}", p.read_bytes())
            for p in sorted(folder.rglob("*")) if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"]


def package_members(requires: Sequence[str]) -> list[Member]:
    """rapt-audit's modules in the installed layout (plugins under ``rapt_audit/``), and its ``dist-info``."""
    load()  # imports the built-in plugin packages, wherever they lie
    importlib.import_module("rapt_audit.benchmarks")  # the shipped benchmark files (`benchmark run NAME`)
    core = CORE
    members = {m.name: m for m in _tree(core, "rapt_audit")}
    for package in ("rapt_audit.attacks", "rapt_audit.defenses", "rapt_audit.benchmarks"):
        folder = Path(sys.modules[package].__file__).resolve().parent
        if core not in folder.parents:  # a checkout keeps attacks/, defenses/ and benchmarks/ beside the core
            members.update({m.name: m for m in _tree(folder, f"rapt_audit/{folder.name}")})
    sha = git_sha()  # the run there records it as env.git_sha (its copy is no git checkout)
    if sha:
        members[f"rapt_audit/{PACKED_FROM}"] = Member(f"rapt_audit/{PACKED_FROM}", f"{sha}\n".encode("utf-8"))
    info = f"rapt_audit-{__version__}.dist-info"
    lines = ["Metadata-Version: 2.1", "Name: rapt-audit", f"Version: {__version__}",
             *[f"Requires-Dist: {r}" for r in requires]]
    members[f"{info}/METADATA"] = Member(f"{info}/METADATA", ("\n".join(lines) + "\n").encode("utf-8"))
    members[f"{info}/entry_points.txt"] = Member(f"{info}/entry_points.txt",
                                                 b"[console_scripts]\nrapt-audit = rapt_audit.cli:main\n")
    return list(members.values())


def project_requirements() -> list[str]:
    """rapt-audit's requirements: ``pyproject.toml`` of a checkout (current), else the installed metadata."""
    pyproject = CORE.parent / "pyproject.toml"
    if pyproject.is_file():
        return list(tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]["dependencies"])
    return [r for r in metadata.requires("rapt-audit") or [] if "extra ==" not in r]


def clock() -> Callable[[], float]:
    """Seconds since this call (timings of the packing steps)."""
    start = time.monotonic()
    return lambda: round(time.monotonic() - start, 1)
