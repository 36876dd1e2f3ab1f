"""The on-disk release cache: exact round trips, keys that change with every input, hits, rebuilds."""

from __future__ import annotations

import json
import math
import os
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from rapt_audit.api.params import to_jsonable
from rapt_audit.api.types import Record, Release
from rapt_audit.pipeline.cache import CachedDefense, ReleaseStore, fitted_state, release_key
from rapt_audit.pipeline.config import RunConfig, build_config
from rapt_audit.pipeline.context import RunContext
from rapt_audit.pipeline.runner import run

SMALL = {"victim_train": 40, "victim_test": 30, "attacker_train": 60, "attacker_valid": 30}


def _records(n: int = 4, *, prefix: str = "r") -> list[Record]:
    return [Record(uid=f"{prefix}/{i}", text=f"alice met bob in paris {i}", label=i % 2) for i in range(n)]


def _rich_release() -> Release:
    rng = np.random.default_rng(0)
    tokens = (rng.normal(size=(3, 5)).astype(np.float32), np.zeros((0, 5), np.float32),
              rng.normal(size=(1, 5)).astype(np.float32))
    meta = {"mechanism": "test", "eta": "inf", "ratio": float("nan"), "big": float("inf"), "n": 3, "ok": True,
            "none": None, "np_float": np.float32(0.1), "np_int": np.int64(7), "np_bool": np.bool_(True),
            "vector": np.arange(4, dtype=np.int16), "pair": (1, "a", (2.5,)), "words": ["x", "y"],
            "nested": {"deeper": {"k": [1, {"z": np.float64(-0.0)}]}, "__odd": 1},
            "int_keys": {1: "one", (2, 3): "pair"}}
    return Release(uids=["a", "b", "c"], texts=["t one", "", "ünï cödé\n"], token_embeddings=tokens,
                   sequence_embeddings=rng.normal(size=(3, 4)), meta=meta)


def _same(a: object, b: object) -> bool:
    """Equal values of equal types, recursively (NaN equals NaN; arrays by dtype, shape and bytes)."""
    if type(a) is not type(b):
        return isinstance(a, dict) and isinstance(b, dict) and _same(dict(a), dict(b))
    if isinstance(a, np.ndarray):
        return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
    if isinstance(a, np.generic):
        return a.dtype == b.dtype and a.tobytes() == b.tobytes()
    if isinstance(a, float):
        return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) == math.copysign(1, b))
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    return a == b


def test_release_round_trips_exactly(tmp_path: Path) -> None:
    release = _rich_release()
    store = ReleaseStore(tmp_path)
    store.save("ab" * 32, release)
    back = store.load("ab" * 32, uids=release.uids)
    assert back is not None
    assert back.uids == release.uids and back.texts == release.texts
    assert _same(back.token_embeddings, release.token_embeddings)
    assert _same(back.sequence_embeddings, release.sequence_embeddings)
    assert _same(dict(back.meta), dict(release.meta))
    # What result.json stores of it is byte-identical too.
    jsonable = {k: v for k, v in release.meta.items() if k not in {"int_keys", "vector", "np_int", "np_bool", "np_float"}}
    assert json.dumps(to_jsonable({k: back.meta[k] for k in jsonable})) == json.dumps(to_jsonable(jsonable))


def test_sequence_only_and_empty_releases_round_trip(tmp_path: Path) -> None:
    store = ReleaseStore(tmp_path)
    for key, release in {"c" * 64: Release(uids=["a"], sequence_embeddings=np.ones((1, 2), np.float16)),
                         "d" * 64: Release(uids=[], token_embeddings=[], meta={})}.items():
        store.save(key, release)
        back = store.load(key, uids=release.uids)
        assert back is not None and back.kinds == release.kinds
        assert _same(back.sequence_embeddings, release.sequence_embeddings)
        assert back.token_embeddings == release.token_embeddings  # None, or the empty tuple


def test_a_release_that_cannot_be_stored_exactly_is_used_but_not_cached(tmp_path: Path) -> None:
    store = ReleaseStore(tmp_path)
    with pytest.warns(UserWarning, match="not cached"):
        store.save("e" * 64, Release(uids=["a"], texts=["x"], meta={"odd": {1, 2}}))
    assert store.load("e" * 64, uids=["a"]) is None


class _Spy:
    """A fitted defense stand-in that counts its privatizations."""

    name = "spy"
    exposes = frozenset({"texts"})

    def __init__(self) -> None:
        self.calls = 0

    def release(self, records, *, ctx):  # noqa: ANN001, ANN201 - the defense protocol
        self.calls += 1
        return Release(uids=[r.uid for r in records], texts=[r.text.upper() for r in records], meta={"eta": 1.5})


@pytest.mark.parametrize("damage", [b"", b"not a zip file", None])
def test_corrupt_entry_is_rebuilt_with_one_warning(tmp_path: Path, damage: bytes | None) -> None:
    spy, records, ctx = _Spy(), _records(), RunContext(cache_dir=tmp_path)
    cached = CachedDefense(spy, store=ReleaseStore(tmp_path), state="s" * 64)
    first = cached.release(records, ctx=ctx)
    path = next(tmp_path.rglob("*.npz"))
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2] if damage is None else damage)  # None: a truncated entry
    with pytest.warns(UserWarning, match="unreadable") as caught:
        again = cached.release(records, ctx=ctx)
    assert len(caught) == 1 and spy.calls == 2 and again.texts == first.texts
    assert cached.release(records, ctx=ctx).texts == first.texts and spy.calls == 2  # rebuilt entry is read
    assert dict(cached.counts) == {"miss": 2, "hit": 1}


def test_wrapper_hits_per_batch_and_delegates_everything_else(tmp_path: Path) -> None:
    spy, ctx = _Spy(), RunContext(cache_dir=tmp_path)
    cached = CachedDefense(spy, store=ReleaseStore(tmp_path), state="s" * 64)
    assert cached.name == "spy" and cached.exposes == frozenset({"texts"})
    for batch in (_records(prefix="a"), _records(prefix="b"), _records(prefix="a")):
        assert cached.release(batch, ctx=ctx).uids == tuple(r.uid for r in batch)
    assert spy.calls == 2 and cached.last == "hit"
    off = CachedDefense(spy, store=None, state=None)
    off.release(_records(prefix="a"), ctx=ctx)
    assert spy.calls == 3 and off.last == "off"


def test_key_changes_with_every_input(tmp_path: Path) -> None:
    from rapt_audit.defenses.t2t import T2TDefense

    train, released = _records(prefix="train"), _records(prefix="aux")
    base = {"ctx": RunContext(seed=1, cache_dir=tmp_path), "fit_records": train, "utility_records": None,
            "model_fingerprint": "f" * 64}

    def key(defense=None, records=released, **changes):  # noqa: ANN001, ANN202
        return release_key(fitted_state(defense or T2TDefense(eta=50.0), **{**base, **changes}), records)

    reference = key()
    assert key() == reference  # deterministic
    edited = [r if i else replace(r, text=r.text + "!") for i, r in enumerate(train)]
    variants = {
        "param": key(T2TDefense(eta=60.0)),
        "other param": key(T2TDefense(eta=50.0, unk_policy="drop")),
        "seed": key(ctx=RunContext(seed=2, cache_dir=tmp_path)),
        "profile": key(ctx=RunContext(seed=1, profile="cpu", cache_dir=tmp_path)),
        "model": key(model_fingerprint="e" * 64),
        "fit data": key(fit_records=edited),
        "utility data": key(utility_records=train),
        "released records": key(records=released[:-1]),
        "released text": key(records=[replace(released[0], text="other")] + released[1:]),
    }
    assert reference not in variants.values() and len(set(variants.values())) == len(variants)


@pytest.mark.parametrize("defense", ["t2t", "santext"])
def test_key_holds_the_calibrated_privacy_parameter(defense: str, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """η (dχ) or ε (a word-level sanitizer) calibrated in fit from a ``replacement`` target enters the key, not
    just the target."""
    from rapt_audit.defenses._dchi_text import DchiTextDefense
    from rapt_audit.defenses._word_mechanism import WordMechanismDefense
    from rapt_audit.defenses.santext import SanTextDefense
    from rapt_audit.defenses.t2t import T2TDefense

    base, method, cls = {"t2t": (DchiTextDefense, "effective_eta", T2TDefense),
                         "santext": (WordMechanismDefense, "effective_epsilon", SanTextDefense)}[defense]
    args = {"ctx": RunContext(cache_dir=tmp_path), "fit_records": _records(), "utility_records": None,
            "model_fingerprint": "f" * 64}
    monkeypatch.setattr(base, method, lambda self, ctx: 42.0)
    first = fitted_state(cls(replacement=0.3), **args)
    monkeypatch.setattr(base, method, lambda self, ctx: 43.0)
    assert fitted_state(cls(replacement=0.3), **args) != first


def test_config_switch_and_cli_flag() -> None:
    from rapt_audit.cli.main import build_parser

    assert RunConfig().release_cache is True
    off = build_config(sets=["release_cache=false"])
    assert off.release_cache is False and off.cell_id() == RunConfig().cell_id()
    args = build_parser().parse_args(["run", "--no-release-cache", "--force"])
    assert args.release_cache is False and args.force is True
    assert not hasattr(build_parser().parse_args(["run"]), "release_cache")


def _numbers(result) -> dict:  # noqa: ANN001
    doc = result.to_dict()
    for entry in doc["attacks"].values():  # whether a trained net was read back is provenance, not a number
        (entry.get("details") or {}).pop("model_from_cache", None)
    return {"utility": doc["utility"], "attacks": doc["attacks"], "release_meta": doc["defense"]["release_meta"]}


@pytest.mark.parametrize(("defense", "attacks"), [("t2t", "attribute_gender"),
                                                  ("embedding", "mlp_inversion,whitebox")])
def test_second_run_reads_releases_from_disk(defense: str, attacks: str, tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    from rapt_audit.api.plugins import DEFENSES, load

    load()
    cls = DEFENSES.get(defense)
    original, calls = cls.release, []

    def spy(self, records, *, ctx):  # noqa: ANN001, ANN202
        calls.append(len(records))
        return original(self, records, ctx=ctx)

    monkeypatch.setattr(cls, "release", spy)
    # The session's cache keeps its embedding tables; only its releases start empty.
    shutil.rmtree(Path(os.environ["RAPT_AUDIT_CACHE"]) / "releases", ignore_errors=True)
    shutil.rmtree(Path(os.environ["RAPT_AUDIT_CACHE"]) / "texts", ignore_errors=True)
    config = RunConfig(defense=defense, attacks=attacks, dataset="synthetic", profile="smoke", seed=5,
                       device="cpu", out=str(tmp_path / "run"), data_args=SMALL)
    first = run(config)
    texts = first.env["release_cache"].pop("texts", None)  # a text defense's own store (tests/test_text_store.py)
    first.env["release_cache"].pop("services", None)  # the trained service's store (tests/test_service_cache.py)
    assert calls and first.env["release_cache"] == {"victim_test": "miss", "enabled": True,
                                                   "hit": first.env["release_cache"]["hit"], "miss": len(calls)}
    privatized = len(calls)
    second = run(replace(config, force=True))
    assert len(calls) == privatized  # nothing privatized again: every release came from disk
    second_texts = second.env["release_cache"].pop("texts", None)
    second.env["release_cache"].pop("services", None)
    assert second.env["release_cache"] == {"victim_test": "hit", "enabled": True,
                                           "hit": privatized + first.env["release_cache"]["hit"], "miss": 0}
    if defense == "t2t":  # utility's victim-train and victim-test texts: privatized once, then read back
        assert texts is not None and texts["miss"] >= 2 and second_texts == {"hit": 2, "miss": 0}
    else:  # a defense that releases vectors stores no texts
        assert texts == second_texts == {"hit": 0, "miss": 0}
    assert _numbers(second) == _numbers(first)
    third = run(replace(config, force=True, release_cache=False))
    assert len(calls) > privatized and third.env["release_cache"]["victim_test"] == "off"
    assert "texts" not in third.env["release_cache"]
    assert _numbers(third) == _numbers(first)
