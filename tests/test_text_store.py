"""Stored privatized texts: read back exactly, keyed by the mechanism (not the training), rebuilt when damaged."""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

import pytest

from rapt_audit.api.params import make_plugin
from rapt_audit.api.plugins import DEFENSES, load
from rapt_audit.api.types import Record
from rapt_audit.encoder import models
from rapt_audit.pipeline.context import RunContext
from rapt_audit.pipeline.text_store import TextReleaseStore

RECORDS = [Record(uid=f"s/{i}", text=f"alice met bob in paris on day {i} and they talked", label=i % 2)
           for i in range(6)]


@pytest.fixture(autouse=True)
def _warm(tmp_path: Path, seed_pos_cache) -> None:
    """Each test's cache folder starts with the session's embedding table and POS lexicon (tests/conftest.py):
    what is tested here is the text store."""
    seed_pos_cache(tmp_path)


def _context(tmp_path: Path, seed: int = 3) -> RunContext:
    ctx = RunContext(seed=seed, profile="smoke", device="cpu", cache_dir=tmp_path)
    ctx.text_releases = TextReleaseStore(tmp_path / "texts", ctx=ctx, model_fingerprint="test-weights")
    return ctx


def _defense(name: str = "t2t", **params: object):  # noqa: ANN202 - a defense plugin
    load()
    return make_plugin(DEFENSES, name, dict(params))


def _privatize(defense, ctx: RunContext,  # noqa: ANN001 - a defense plugin
               monkeypatch: pytest.MonkeyPatch) -> tuple[list[str], object, int]:
    """The defense's privatization of RECORDS through the store, and how often it really privatized."""
    calls = []
    original = type(defense).privatize

    def counting(self, texts, **kwargs):  # noqa: ANN001, ANN003, ANN202
        calls.append(len(texts))
        return original(self, texts, **kwargs)

    monkeypatch.setattr(type(defense), "privatize", counting)
    texts, count = defense.privatize_records(RECORDS, ctx)
    monkeypatch.undo()
    return texts, count, len(calls)


@pytest.mark.parametrize("name", ["t2t", "pct2t"])
def test_second_defense_reads_the_texts_back_exactly(name: str, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    ctx = _context(tmp_path)
    texts, count, calls = _privatize(_defense(name, eta=20.0), ctx, monkeypatch)
    assert calls == 1 and ctx.text_releases.report() == {"hit": 0, "miss": 1}
    assert texts != [r.text for r in RECORDS]  # η = 20 replaces words, so equality below is not trivial
    again, again_count, calls = _privatize(_defense(name, eta=20.0), ctx, monkeypatch)
    assert calls == 0 and ctx.text_releases.report() == {"hit": 1, "miss": 1}
    assert again == texts and again_count == count
    fresh, fresh_count, _ = _privatize(_defense(name, eta=20.0), RunContext(seed=3, profile="smoke"), monkeypatch)
    assert fresh == texts and fresh_count == count  # what a run without the store releases


def test_training_parameters_share_texts_and_mechanism_parameters_do_not(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    ctx = _context(tmp_path)
    _privatize(_defense("rapt", eta=20.0, plain_tokens=3), ctx, monkeypatch)
    for training in ({"lr": 0.5}, {"method": "lora"}, {"epochs": 7, "precision": "bf16"}, {"rec_weight": 0.1},
                     {"reconstruction": False}, {"rec_vocab": "vocabulary"}):
        _, _, calls = _privatize(_defense("rapt", eta=20.0, plain_tokens=3, **training), ctx, monkeypatch)
        assert calls == 0, f"{training} changes only the service's training, yet the texts were privatized again"
    for mechanism in ({"eta": 21.0}, {"plain_tokens": 4}, {"categories": ("noun",)}):
        params = {"eta": 20.0, "plain_tokens": 3, **mechanism}
        _, _, calls = _privatize(_defense("rapt", **params), ctx, monkeypatch)
        assert calls == 1, f"{mechanism} changes the release, yet stored texts were read"
    _, _, calls = _privatize(_defense("rapt", eta=20.0, plain_tokens=3), _context(tmp_path, seed=4), monkeypatch)
    assert calls == 1  # another run seed draws other noise


@pytest.mark.parametrize("damage", [b"", b"not gzip", gzip.compress(b'{"format": "rapt-audit/privatized-texts/1"}'),
                                    None], ids=["empty", "not-gzip", "no-texts", "one-text-short"])
def test_damaged_entry_is_privatized_again_with_one_warning(damage: bytes | None, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    ctx = _context(tmp_path)
    texts, count, _ = _privatize(_defense(eta=20.0), ctx, monkeypatch)
    (entry,) = (tmp_path / "texts").rglob("*.json.gz")
    if damage is None:  # a well-formed entry holding one text too few
        doc = json.loads(gzip.decompress(entry.read_bytes()))
        damage = gzip.compress(json.dumps({**doc, "texts": doc["texts"][:-1]}).encode("utf-8"))
    entry.write_bytes(damage)
    with pytest.warns(UserWarning, match="privatizing them again"):
        again, again_count, calls = _privatize(_defense(eta=20.0), ctx, monkeypatch)
    assert calls == 1 and again == texts and again_count == count
    assert _privatize(_defense(eta=20.0), ctx, monkeypatch)[2] == 0  # rebuilt: read back next time


def test_auto_device_needs_no_torch_where_the_machine_shows_no_gpu(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    monkeypatch.setattr(models, "GPU_TRACES", (str(tmp_path / "nvidiactl"),))
    assert models.no_gpu_here() and models.resolve_device("auto") == "cpu"
    (tmp_path / "nvidiactl").touch()  # a driver is there: only torch can say whether CUDA works
    assert not models.no_gpu_here()
    (tmp_path / "nvidiactl").unlink()
    monkeypatch.setattr(sys, "platform", "darwin")  # no such traces to read there
    assert not models.no_gpu_here()
