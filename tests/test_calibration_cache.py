"""η calibrated for a replacement target is stored on disk and read back (issue #29: work shared across cells)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rapt_audit.api.params import make_plugin
from rapt_audit.api.plugins import DEFENSES, load
from rapt_audit.pipeline.context import RunContext

load()


def _calibrate(ctx: RunContext, **params) -> tuple[float, dict]:
    defense = make_plugin(DEFENSES, "t2t", {"replacement": 0.3, **params})
    return defense.effective_eta(ctx), defense._calibration


def _refuse(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
    raise AssertionError("find_eta ran although the calibration was stored")


def test_calibrated_eta_is_read_back_and_keyed_by_the_target(warm_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import rapt_audit.defenses._calibrated as calibrated  # noqa: PLC0415 - the module whose find_eta a stored η must not call

    # The search itself is tested in test_mechanisms (a target met on fresh noise); here an η that no default
    # could give stands for its result, so that what is read back can only be what was stored.
    with monkeypatch.context() as patch:
        patch.setattr(calibrated, "find_eta", lambda counter, target, *, seed: 57.375)
        ctx = RunContext(seed=3, profile="smoke", device="cpu", cache_dir=warm_cache)
        eta, record = _calibrate(ctx)
    assert eta == 57.375 and record["calibrated_eta"] == 57.375
    assert ctx.tallies()["calibration"] == {"hit": 0, "miss": 1}
    again = RunContext(seed=3, profile="smoke", device="cpu", cache_dir=warm_cache)
    with monkeypatch.context() as patch:
        patch.setattr(calibrated, "find_eta", _refuse)
        assert _calibrate(again) == (eta, record)  # the very η, and the same record in the release
    assert again.tallies()["calibration"] == {"hit": 1, "miss": 0}

    calls = []
    monkeypatch.setattr(calibrated, "find_eta", lambda counter, target, *, seed: calls.append(target) or 42.0)
    other_seed = RunContext(seed=4, profile="smoke", device="cpu", cache_dir=warm_cache)
    assert _calibrate(other_seed)[0] == 42.0 and calls == [0.3]  # the seed draws other noise: computed
    assert _calibrate(again, replacement=0.5)[0] == 42.0 and calls == [0.3, 0.5]  # another target: computed
    assert _calibrate(again, unit="word")[0] == 42.0 and len(calls) == 3  # another mechanism: computed


def test_a_damaged_entry_is_computed_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import rapt_audit.defenses._calibrated as calibrated  # noqa: PLC0415

    calls = []
    monkeypatch.setattr(calibrated, "find_eta", lambda counter, target, *, seed: calls.append(target) or 42.0)
    ctx = RunContext(seed=3, profile="smoke", device="cpu", cache_dir=tmp_path / "cache")
    assert _calibrate(ctx)[0] == 42.0
    (entry,) = (tmp_path / "cache" / "calibration").iterdir()
    entry.write_bytes(b"not gzip")
    fresh = RunContext(seed=3, profile="smoke", device="cpu", cache_dir=tmp_path / "cache")
    assert _calibrate(fresh)[0] == 42.0 and len(calls) == 2 and fresh.tallies()["calibration"] == {"hit": 0, "miss": 1}
