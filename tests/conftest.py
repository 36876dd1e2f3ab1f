"""Shared fixtures: offline flags, a small run context, the synthetic corpus, data-dir detection."""

from __future__ import annotations

import functools
import os
import shutil
from pathlib import Path
from typing import Callable

import pytest

# No test may reach a model hub: set the offline flags before anything imports transformers.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")


def pytest_configure(config: pytest.Config) -> None:
    """A worker of ``pytest -n N`` (pytest-xdist) computes with its share of the cores, as a sweep's
    ``--jobs N`` worker does: N processes that each spin a thread per core slow one another about
    tenfold on two cores (rapt_audit.encoder.threads)."""
    workers = os.environ.get("PYTEST_XDIST_WORKER_COUNT")
    if workers:
        from rapt_audit.encoder.threads import available_cores, set_threads, thread_share

        set_threads(thread_share(available_cores(), int(workers)))


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


#: The cache entries every run builds first, keyed by what they are built from (the weights, the words and
#: public text tagged, the tagger), so a copy of them answers exactly as a build would.
TEMPLATE_ENTRIES = ("fingerprints", "embeddings", "pos")


@pytest.fixture(scope="session")
def _embedding_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A cache folder with the model's weights fingerprint and embedding table, built once per test session."""
    from rapt_audit.mechanisms.engines import embedding_space
    from rapt_audit.pipeline.context import RunContext

    folder = tmp_path_factory.mktemp("template-cache")
    embedding_space(RunContext(cache_dir=folder))
    return folder


@pytest.fixture(scope="session")
def _pos_template(_embedding_template: Path) -> Path:
    """The same folder with PCT2T's POS lexicon and its vectors too (about 20 s to build, once)."""
    from rapt_audit.mechanisms.engines import pos_candidates
    from rapt_audit.pipeline.context import RunContext

    pos_candidates(RunContext(cache_dir=_embedding_template))
    return _embedding_template


def seed_cache(template: Path, folder: Path) -> Path:
    """``folder`` with :data:`TEMPLATE_ENTRIES` of ``template`` hard-linked in (copied where links fail).

    Cache entries are only ever replaced by rename (``write_cache_atomic``), never rewritten in place, so a
    test cannot change the template through its links; a test that damages entries on purpose, or tests
    how they are built, starts from an empty folder instead.
    """
    for entry in TEMPLATE_ENTRIES:
        for source in sorted((template / entry).rglob("*")):
            if source.is_file():
                target = folder / source.relative_to(template)
                target.parent.mkdir(parents=True, exist_ok=True)
                try:
                    os.link(source, target)
                except OSError:
                    shutil.copy2(source, target)
    return folder


@pytest.fixture
def warm_cache(tmp_path: Path, _embedding_template: Path) -> Path:
    """A test's own cache folder (``tmp_path / "cache"``) that already holds the embedding table: for tests
    whose subject is not how the table is built. PCT2T's lexicon joins where the session has built it."""
    return seed_cache(_embedding_template, tmp_path / "cache")


@pytest.fixture
def warm_pos_cache(tmp_path: Path, _pos_template: Path) -> Path:
    """:func:`warm_cache` with PCT2T's POS lexicon and its vectors (tests of PCT2T and RAPT)."""
    return seed_cache(_pos_template, tmp_path / "cache")


@pytest.fixture(scope="session")
def seed_pos_cache(_pos_template: Path) -> Callable[[Path], Path]:
    """Seeds a given cache folder as :func:`warm_pos_cache` does (for module-scoped contexts and folders
    that are not ``tmp_path / "cache"``)."""
    return functools.partial(seed_cache, _pos_template)


@pytest.fixture
def ctx(warm_cache: Path):
    """A smoke-profile run context on CPU, its cache folder seeded with the embedding table."""
    from rapt_audit.pipeline.context import RunContext

    return RunContext(seed=7, profile="smoke", device="cpu", cache_dir=warm_cache)


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
