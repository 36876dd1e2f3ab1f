"""Releases cached on disk by their signature, so re-running attacks or a report never re-privatizes.

A release is a deterministic function of the fitted defense and the records it privatizes, so its
key hashes everything that goes into either (:func:`fitted_state`, then :func:`release_key`):

* the cache format, the package version, the digests of the core's and of the defense's code (:func:`rapt_audit.api.components.release_code`:
  an edited mechanism is a new key, not a stale hit, while an edit to one defense keeps every other defense's
  entries) and the versions of numpy, torch and the like;
* the defense's name and parameters and, once fitted, its privacy parameter in force (``privacy_level``:
  the effective η of a dχ defense, the effective ε of a word-level sanitizer; calibrated in ``fit`` when
  the user gave a ``replacement`` target, which is why the key is only built from a fitted defense);
* what fit and utility saw: model spec and weights fingerprint, device, profile, run seed, the
  public calibration corpus, the victim-train records, and the victim-test records when utility ran
  (a text defense records its customization in the release meta);
* the released records themselves: their uid key, their number and a hash of their contents.

One entry is one ``.npz`` under ``<cache_dir>/releases/<key[:2]>/<key>.npz``, written atomically:
the arrays (token embeddings concatenated, sequence embeddings, arrays and numpy scalars found in
``meta``) and a JSON document (uids, texts, meta with tuples and non-string keys tagged) that
restores every field with its exact type and value, without pickle. An unreadable entry is rebuilt
after one warning; a release that cannot be stored exactly is simply not cached.

May import: :mod:`rapt_audit.api`, :mod:`rapt_audit.data`, :mod:`rapt_audit.encoder` and the
pipeline's own context and results.
"""

from __future__ import annotations

import hashlib
import json
import warnings
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from rapt_audit.api.errors import DataError
from rapt_audit.api.components import release_code
from rapt_audit.api.files import stable_hash, write_cache_atomic
from rapt_audit.api.params import get_params, to_jsonable
from rapt_audit.api.types import Record, Release, uid_key
from rapt_audit.api.version import __version__
from rapt_audit.data import load_dataset, resolve_data_dir
from rapt_audit.encoder.models import model_fingerprint as weights_of
from rapt_audit.pipeline.context import RunContext
from rapt_audit.pipeline.results import package_versions

#: Bumped whenever the entry layout or the key's ingredients change, so old entries are never read.
CACHE_FORMAT = 3  # 3: the code is the core's and the defense's component digests (issue #62); 2: ``privacy_level``
#: Marks a JSON object that encodes a value JSON has no exact form for (tuple, dict with odd keys, numpy).
_TAG = "__rapt_cache__"
_DOC = "__doc__"


def records_digest(records: Sequence[Record]) -> dict[str, Any]:
    """The identity of a batch of records: uid key, count and a hash of every field of every record."""
    digest = hashlib.sha256()
    for r in records:
        fields = [r.uid, r.text, r.text_pair, r.label, sorted(r.attributes.items()),
                  [[s.start, s.end, s.label] for s in r.entities]]
        digest.update(json.dumps(fields, ensure_ascii=True, default=str).encode("utf-8") + b"\n")
    return {"uid_key": uid_key(records), "count": len(records), "sha256": digest.hexdigest()}


def public_data_fingerprint(ctx: RunContext) -> dict[str, Any]:
    """The public text defenses calibrate and train denoisers on (WikiText-2 when present)."""
    root = resolve_data_dir(ctx.data_dir)
    try:
        wikitext = load_dataset("wikitext2", ctx.data_dir).fingerprint
    except DataError:
        wikitext = None
    return {"data_dir": str(root.resolve()) if root is not None else None, "wikitext2": wikitext}


def run_state(ctx: RunContext, *, model_fingerprint: str) -> dict[str, Any]:
    """What every cached release depends on from the run itself: package and library versions, the
    model and its weights, device, profile, seed and the public data (:func:`public_data_fingerprint`)."""
    return {"package_version": __version__, "packages": package_versions(), "model": ctx.model,
            "model_fingerprint": model_fingerprint, "device": ctx.device, "profile": ctx.profile, "seed": ctx.seed,
            "public_data": public_data_fingerprint(ctx)}


def fitted_state(defense: Any, *, ctx: RunContext, fit_records: Sequence[Record],
                 utility_records: Sequence[Record] | None, model_fingerprint: str) -> str:
    """The hash of everything a fitted defense's releases depend on; call it after ``fit`` and ``utility``.

    Args:
        defense: The fitted defense (a dataclass plugin).
        ctx: The run context.
        fit_records: The records ``fit`` saw (victim train).
        utility_records: The records ``utility`` saw (victim test), or None when it did not run.
        model_fingerprint: The weights fingerprint of ``ctx.model``.
    """
    privacy_level = getattr(defense, "privacy_level", None)  # the text defenses' η or ε in force (None: none)
    # The precision of the networks the defense trained (CAPE's projection, SnD's denoiser) changes its
    # releases; it is not in run_state, which the privatized texts share (they do not depend on it).
    state = {"format": CACHE_FORMAT, **run_state(ctx, model_fingerprint=model_fingerprint), "precision": ctx.precision,
             "code": release_code(type(defense)), "defense": defense.name, "params": get_params(defense),
             "privacy_level": to_jsonable(privacy_level(ctx)) if callable(privacy_level) else None,
             "fit_records": records_digest(fit_records),
             "utility_records": None if utility_records is None else records_digest(utility_records)}
    if ctx.service_model is not None:  # a service apart from the client's: its customization is in the release facts
        state["service"] = {"model": ctx.service_model,
                            "fingerprint": weights_of(ctx.service_model, cache_dir=ctx.cache_dir)}
    return stable_hash(state)


def release_key(state: str, records: Sequence[Record]) -> str:
    """The cache key of the release of ``records`` by the fitted defense whose state hash is ``state``."""
    return stable_hash({"state": state, "records": records_digest(records)})


def _encode(value: Any, arrays: dict[str, np.ndarray]) -> Any:
    """``value`` as JSON, its numpy parts moved into ``arrays``; TypeError for what cannot be exact."""
    kind = type(value)
    if value is None or kind in (bool, int, float, str):
        return value
    if kind is list:
        return [_encode(v, arrays) for v in value]
    if kind is tuple:
        return {_TAG: "tuple", "items": [_encode(v, arrays) for v in value]}
    if isinstance(value, Mapping):
        if all(type(k) is str for k in value) and _TAG not in value:
            return {k: _encode(v, arrays) for k, v in value.items()}
        return {_TAG: "dict", "items": [[_encode(k, arrays), _encode(v, arrays)] for k, v in value.items()]}
    if isinstance(value, (np.ndarray, np.generic)) and value.dtype != object:
        name = f"meta.{len(arrays)}"
        arrays[name] = np.asarray(value)
        return {_TAG: "scalar" if isinstance(value, np.generic) else "array", "name": name}
    raise TypeError(f"release meta holds a {kind.__name__}, which the release cache cannot store exactly")


_DECODERS: dict[str, Callable[[dict[str, Any], Any], Any]] = {
    "tuple": lambda doc, arrays: tuple(_decode(v, arrays) for v in doc["items"]),
    "dict": lambda doc, arrays: {_decode(k, arrays): _decode(v, arrays) for k, v in doc["items"]},
    "array": lambda doc, arrays: arrays[doc["name"]],
    "scalar": lambda doc, arrays: arrays[doc["name"]][()],
}


def _decode(value: Any, arrays: Any) -> Any:
    if isinstance(value, list):
        return [_decode(v, arrays) for v in value]
    if isinstance(value, dict):
        if _TAG in value:
            return _DECODERS[value[_TAG]](value, arrays)
        return {k: _decode(v, arrays) for k, v in value.items()}
    return value


def encode_release(release: Release, *, key: str) -> dict[str, np.ndarray]:
    """The arrays of one cache entry (the JSON document is the uint8 array ``__doc__``).

    Raises:
        TypeError: when some part of the release has no exact stored form (then it is not cached).
    """
    arrays: dict[str, np.ndarray] = {}
    doc: dict[str, Any] = {"format": CACHE_FORMAT, "key": key, "uids": list(release.uids),
                           "texts": None if release.texts is None else list(release.texts),
                           "meta": _encode(dict(release.meta), arrays), "token_lengths": None}
    tokens = release.token_embeddings
    if tokens is not None:
        if len({(a.dtype, a.shape[1:]) for a in tokens}) > 1 or any(a.dtype == object or a.ndim == 0 for a in tokens):
            raise TypeError("token embeddings of mixed dtype or width cannot be stored as one array")
        doc["token_lengths"] = [len(a) for a in tokens]
        arrays["token_embeddings"] = np.concatenate(tokens) if tokens else np.zeros(0, np.float32)
    if release.sequence_embeddings is not None:
        if np.asarray(release.sequence_embeddings).dtype == object:
            raise TypeError("sequence embeddings of dtype object cannot be stored without pickle")
        arrays["sequence_embeddings"] = np.asarray(release.sequence_embeddings)
    arrays[_DOC] = np.frombuffer(json.dumps(doc, ensure_ascii=True).encode("utf-8"), dtype=np.uint8)
    return arrays


def decode_release(arrays: Mapping[str, np.ndarray], *, key: str) -> Release:
    """Inverse of :func:`encode_release`; ValueError when the entry is of another format or key."""
    doc = json.loads(bytes(arrays[_DOC]).decode("utf-8"))
    if doc.get("format") != CACHE_FORMAT or doc.get("key") != key:
        raise ValueError(f"entry of format {doc.get('format')!r} and key {str(doc.get('key'))[:12]!r}")
    tokens = None
    if doc["token_lengths"] is not None:
        lengths = doc["token_lengths"]
        tokens = tuple(np.split(arrays["token_embeddings"], np.cumsum(lengths)[:-1])) if lengths else ()
    return Release(uids=doc["uids"], texts=doc["texts"], token_embeddings=tokens,
                   sequence_embeddings=arrays.get("sequence_embeddings"), meta=_decode(doc["meta"], arrays))


class ReleaseStore:
    """Releases on disk under ``root``, one ``.npz`` per key."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def path(self, key: str) -> Path:
        """Where the entry of ``key`` lives."""
        return self.root / key[:2] / f"{key}.npz"

    def load(self, key: str, *, uids: Sequence[str]) -> Release | None:
        """The cached release of ``key`` (for records ``uids``), or None when absent or unreadable."""
        path = self.path(key)
        if not path.is_file():
            return None
        try:
            # Our own handle: np.load leaves its file open when the zip is damaged.
            with path.open("rb") as handle, np.load(handle, allow_pickle=False) as data:
                release = decode_release({name: data[name] for name in data.files}, key=key)
            if release.uids != tuple(uids):
                raise ValueError("its uids are not those of the records asked for")
        except Exception as exc:  # noqa: BLE001 - a truncated zip, a bad CRC, bad JSON...: every kind is rebuilt
            warnings.warn(f"release cache entry {path} is unreadable ({type(exc).__name__}: {exc}); "
                          "rebuilding it", stacklevel=2)
            return None
        return release

    def save(self, key: str, release: Release) -> None:
        """Store ``release`` under ``key`` atomically; warn (and go on) when it cannot be stored."""
        try:
            arrays = encode_release(release, key=key)
        except TypeError as exc:
            warnings.warn(f"release not cached ({exc}); it is used, only not stored", stacklevel=2)
            return
        # The one cache writer: a folder that cannot be written (read-only, or below a file) warns once and the
        # run goes on from memory, as privatize does, rather than failing after the defense was fitted.
        write_cache_atomic(self.path(key), lambda handle: np.savez(handle, **arrays))


class CachedDefense:
    """A fitted defense whose ``release`` goes through a :class:`ReleaseStore`; all else is the defense's.

    The runner hands this to the attacks too, so their adaptive releases are cached as well.

    Attributes:
        defense: The wrapped, fitted defense.
        compute: How a release missing from the store is made (default: the defense's ``release``; the
            runner passes one that checks the defense's contract, :func:`~rapt_audit.pipeline.contracts.checked_release`).
        counts: How many releases came from the cache (``hit``) and how many were computed (``miss``).
        last: ``hit``, ``miss`` or ``off`` (no store) for the most recent release.
    """

    def __init__(self, defense: Any, *, store: ReleaseStore | None, state: str | None,
                 compute: Callable[[Sequence[Record], RunContext], Release] | None = None) -> None:
        self.defense = defense
        self.compute = compute or (lambda records, ctx: defense.release(records, ctx=ctx))
        self.store = store
        self.state = state
        self.counts: Counter[str] = Counter()
        self.last = "off"

    def __getattr__(self, name: str) -> Any:
        # Called only for names the wrapper lacks: the defense's name, exposes, parameters, methods.
        if name.startswith("__") or name == "defense":
            raise AttributeError(name)
        return getattr(self.defense, name)

    def release(self, records: Sequence[Record], *, ctx: RunContext) -> Release:
        """The cached release of ``records``, or the defense's (then stored)."""
        if self.store is None or self.state is None:
            return self.compute(records, ctx)
        key = release_key(self.state, records)
        release = self.store.load(key, uids=[r.uid for r in records])
        self.last = "hit" if release is not None else "miss"
        self.counts[self.last] += 1
        if release is None:
            release = self.compute(records, ctx)
            self.store.save(key, release)
        return release

    def report(self) -> dict[str, Any]:
        """Counts for ``result.json`` (``env.release_cache``)."""
        return {"enabled": self.store is not None, "hit": self.counts["hit"], "miss": self.counts["miss"]}


def cached_defense(defense: Any, *, ctx: RunContext, enabled: bool, fit_records: Sequence[Record],
                   utility_records: Sequence[Record] | None, model_fingerprint: str,
                   compute: Callable[[Sequence[Record], RunContext], Release] | None = None) -> CachedDefense:
    """Wrap a fitted defense so that its releases are cached under ``ctx.cache_dir / "releases"``.

    Args:
        defense: The defense, already fitted (and its utility measured when it was).
        ctx: The run context.
        enabled: False bypasses the cache (nothing is read or written).
        fit_records: The records ``fit`` saw.
        utility_records: The records ``utility`` saw, or None.
        model_fingerprint: The weights fingerprint of ``ctx.model``.
        compute: How a release the store lacks is made (see :class:`CachedDefense`).
    """
    if not enabled:
        return CachedDefense(defense, store=None, state=None, compute=compute)
    state = fitted_state(defense, ctx=ctx, fit_records=fit_records, utility_records=utility_records,
                         model_fingerprint=model_fingerprint)
    return CachedDefense(defense, store=ReleaseStore(Path(ctx.cache_dir) / "releases"), state=state, compute=compute)


__all__ = ["CACHE_FORMAT", "CachedDefense", "ReleaseStore", "cached_defense", "decode_release", "encode_release",
           "fitted_state", "records_digest", "release_key", "run_state"]
