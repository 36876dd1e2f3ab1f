"""Shared fixtures: offline flags, a small run context, the synthetic corpus, data-dir detection."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# No test may reach a model hub: set the offline flags before anything imports transformers.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip ``gpu`` tests when torch sees no CUDA device."""
    if not any("gpu" in item.keywords for item in items):
        return
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Keep on-disk caches of a test session out of the user's home directory."""
    monkeypatch.setenv("RAPT_AUDIT_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))


@pytest.fixture
def ctx(tmp_path: Path):
    """A smoke-profile run context on CPU."""
    from rapt_audit.pipeline.context import RunContext

    return RunContext(seed=7, profile="smoke", device="cpu", cache_dir=tmp_path / "cache")


@pytest.fixture(scope="session")
def synthetic_splits():
    """Small disjoint splits of the synthetic demo corpus."""
    from rapt_audit.data import SplitSizes, load_dataset, make_splits

    dataset = load_dataset("synthetic")
    return make_splits(dataset, SplitSizes(60, 40, 60, 30), seed=1)


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """The real data directory (``$RAPT_AUDIT_DATA``); skips the test when it is not available."""
    value = os.environ.get("RAPT_AUDIT_DATA")
    if not value or not Path(value).is_dir():
        pytest.skip("RAPT_AUDIT_DATA is not set to the shared data directory")
    return Path(value)
