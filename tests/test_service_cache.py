"""The customized service is stored and read back (issue #29: a cell run again does not train again).

Rejects: a cache that returns other weights than training wrote (the numbers would move), a key that
misses something the weights depend on (here the precision and the training texts), and an entry
that stores the frozen backbone (a prompt-tuned service would cost 90 MB a cell).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from rapt_audit.pipeline.config import RunConfig
from rapt_audit.pipeline.runner import compute


def _run(precision: str = "fp32", eta: float = 75):
    return compute(RunConfig(defense="t2t", attacks="random_guess", profile="smoke", dataset="synthetic",
                             precision=precision, defense_args={"eta": eta, "method": "prompt", "epochs": 1},
                             data_args={"victim_train": 60, "victim_test": 30}))


@pytest.fixture()
def cache(warm_cache, tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("RAPT_AUDIT_CACHE", str(warm_cache))
    return tmp_path / "cache" / "services"


def _services(result) -> dict[str, int]:
    return result.env["release_cache"]["services"]


def test_a_run_again_reads_the_service_back_with_identical_numbers(cache):
    first, again = _run(), _run()
    assert [_services(r) for r in (first, again)] == [{"hit": 0, "miss": 1}, {"hit": 1, "miss": 0}]
    assert first.utility == again.utility  # the very weights: every estimate and interval equal
    entries = list(cache.glob("*.pt"))
    assert len(entries) == 1 and entries[0].stat().st_size < 1_000_000  # prompt and head, not the encoder


def test_other_precision_or_other_texts_train_again(cache):
    _run()
    assert _services(_run(precision="bf16")) == {"hit": 0, "miss": 1}
    assert _services(_run(eta=60)) == {"hit": 0, "miss": 1}
    assert len(list(cache.glob("*.pt"))) == 3


def test_a_damaged_entry_is_trained_again_with_a_warning(cache):
    first = _run()
    for entry in cache.glob("*.pt"):
        entry.write_bytes(b"not a torch file")
    with pytest.warns(UserWarning, match="cannot be read"):
        again = _run()
    assert _services(again) == {"hit": 0, "miss": 1}
    assert first.utility == again.utility
