"""The customized service is stored and read back (issue #29: a cell run again does not train again).

Rejects: a cache that returns other weights than training wrote (the numbers would move), a key that
misses something the weights depend on (here the precision and the training texts), and an entry
that stores the frozen backbone (a prompt-tuned service would cost 90 MB a cell).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from rapt_audit.pipeline.config import RunConfig
from rapt_audit.pipeline.runner import compute


def _run(precision: str = "fp32", eta: float = 75):
    return compute(RunConfig(defense="t2t", attacks="random_guess", profile="smoke", dataset="synthetic",
                             precision=precision, defense_args={"eta": eta, "method": "prompt", "epochs": 1},
                             data_args={"victim_train": 30, "victim_test": 20, "attacker_train": 30,
                                        "attacker_valid": 20}))  # what is stored and read, not the numbers


@pytest.fixture(scope="module")
def first_runs(tmp_path_factory, seed_warm_cache):
    """A run, then the same run again, in one cache folder (the embedding table seeded in): the service is
    trained once and read back once; the later tests start from a copy of that folder."""
    folder = seed_warm_cache(tmp_path_factory.mktemp("first") / "cache")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("RAPT_AUDIT_CACHE", str(folder))
        return folder, (_run(), _run())


@pytest.fixture()
def cache(first_runs, tmp_path, monkeypatch) -> Path:
    """This test's cache folder: a copy (not links: a test damages its entries) of the folder the first
    service was stored in."""
    shutil.copytree(first_runs[0], tmp_path / "cache")
    monkeypatch.setenv("RAPT_AUDIT_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache" / "services"


def _services(result) -> dict[str, int]:
    return result.env["release_cache"]["services"]


def test_a_run_again_reads_the_service_back_with_identical_numbers(first_runs):
    folder, (first, again) = first_runs
    assert [_services(r) for r in (first, again)] == [{"hit": 0, "miss": 1}, {"hit": 1, "miss": 0}]
    assert first.utility == again.utility  # the very weights: every estimate and interval equal
    entries = list((folder / "services").glob("*.pt"))
    assert len(entries) == 1 and entries[0].stat().st_size < 1_000_000  # prompt and head, not the encoder


def test_other_precision_or_other_texts_train_again(cache):
    assert _services(_run(precision="bf16")) == {"hit": 0, "miss": 1}
    assert _services(_run(eta=60)) == {"hit": 0, "miss": 1}
    assert len(list(cache.glob("*.pt"))) == 3


def test_a_damaged_entry_is_trained_again_with_a_warning(first_runs, cache):
    first = first_runs[1][0]
    for entry in cache.glob("*.pt"):
        entry.write_bytes(b"not a torch file")
    with pytest.warns(UserWarning, match="cannot be read"):
        again = _run()
    assert _services(again) == {"hit": 0, "miss": 1}
    assert first.utility == again.utility
