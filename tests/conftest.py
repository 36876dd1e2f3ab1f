"""Shared fixtures: offline flags, a small run context, the synthetic corpus, data-dir detection."""

from __future__ import annotations

import functools
import os
import re
import shutil
from pathlib import Path
from typing import Callable

import pytest

# No test may reach a model hub: set the offline flags before anything imports transformers.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")


#: Most workers ``-n auto`` (addopts) starts: each holds the model and a test's trainings (about 1.5 GB).
MAX_WORKERS = 4


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """The number of pytest-xdist workers ``-n auto`` starts: one per core, at most :data:`MAX_WORKERS`.

    None (the tests run in this process) where that would mislead or cost: on one core; with
    ``--benchmark-enable``, whose timings need the machine to themselves (pytest-benchmark also refuses
    to time under xdist); and for ``gpu`` tests, which share one device and measure its memory.
    """
    from rapt_audit.encoder.threads import available_cores

    markexpr = str(config.getoption("markexpr", "") or "")
    wants_gpu = re.search(r"(?<!not )\bgpu\b", markexpr) is not None
    cores = int(available_cores())
    if config.getoption("benchmark_enable", False) or wants_gpu or cores < 2:
        return 0
    return min(cores, MAX_WORKERS)


def pytest_configure(config: pytest.Config) -> None:
    """A worker of ``pytest -n N`` (pytest-xdist) computes with its share of the cores, as a sweep's
    ``--jobs N`` worker does: N processes that each spin a thread per core slow one another about
    tenfold on two cores (rapt_audit.encoder.threads)."""
    workers = os.environ.get("PYTEST_XDIST_WORKER_COUNT")
    if workers:
        from rapt_audit.encoder.threads import available_cores, set_threads, thread_share

        set_threads(thread_share(available_cores(), int(workers)))


#: The files that take longest, in the order workers take them (pytest-xdist's ``--dist loadfile`` hands files
#: out in collection order, the next one to a worker whose file is nearly done): longest first, so that the last
#: files handed out are short and the workers finish together (on two cores a 20 s file handed out last kept
#: one worker busy 15 s after the other stopped). The largest file that needs PCT2T's lexicon comes first, so
#: one worker builds the template (about 50 s on its one core with WikiText-2 in the data folder) while the
#: other runs files that need nothing; the others that need it come after one such file. Every file not
#: listed keeps its collection order, after these. Measured core-seconds (2026-11-28, two workers, no data
#: folder) are in reports/benchmarks.md; re-rank when a file's cost changes much.
LONGEST_FILES = ("test_conformance.py", "test_attacks_inference.py", "test_local_sweep.py", "test_mechanisms.py",
                 "test_docs_commands.py", "test_attacks_inversion.py", "test_ray_sweep.py", "test_privacy_audit.py",
                 "test_benchmark.py", "test_plugin_examples.py", "test_report.py", "test_hostile_results.py",
                 "test_vocab_nn.py", "test_pretraining.py", "test_embedding_service.py", "test_word_mechanisms.py",
                 "test_service_cache.py", "test_bayes_inversion.py", "test_selection.py", "test_privatize_memory.py",
                 "test_bundle.py", "test_word_mechanism_audit.py", "test_cold_start.py", "test_hostile_text.py",
                 "test_release_cache.py", "test_examples.py", "test_plugin_isolation.py", "test_identity_method.py")
FILE_ORDER = {name: rank - len(LONGEST_FILES) for rank, name in enumerate(LONGEST_FILES)}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Order files by :data:`FILE_ORDER` (a stable sort: tests keep their order inside a file); skip ``gpu``
    tests when torch sees no CUDA device."""
    items.sort(key=lambda item: FILE_ORDER.get(item.path.name, 0))
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

#: The template folders' names (:func:`_built_once`): the embedding table; the table and PCT2T's lexicon.
EMBEDDING_TEMPLATE, POS_TEMPLATE = "template-cache", "template-pos-cache"


def _built_once(tmp_path_factory: pytest.TempPathFactory, name: str, build: Callable[[Path], None]) -> Path:
    """A cache folder ``name`` built by ``build`` once per test run, whatever the number of workers.

    Under pytest-xdist the folder sits beside the workers' own temporary folders, where every worker of the run
    sees it: the first worker to need it builds it while the others wait on its lock, then all read it (PCT2T's
    lexicon takes 17 – 50 s on a worker's one core; built in each worker it cost the run that much twice).
    """
    from filelock import FileLock

    base = tmp_path_factory.getbasetemp()
    folder = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / name
    built = folder.with_name(f"{name}.built")  # beside it: seed_cache copies the folder's entries only
    with FileLock(str(folder.with_name(f"{name}.lock"))):
        if not built.exists():
            if folder.exists():  # a build that died half-way: start again from nothing
                shutil.rmtree(folder)
            folder.mkdir(parents=True)
            build(folder)
            built.touch()
    return folder


@pytest.fixture(scope="session")
def _embedding_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A cache folder with the model's weights fingerprint and embedding table, built once per test run."""
    from rapt_audit.mechanisms.engines import embedding_space
    from rapt_audit.pipeline.context import RunContext

    return _built_once(tmp_path_factory, EMBEDDING_TEMPLATE, lambda folder: embedding_space(RunContext(cache_dir=folder)))


@pytest.fixture(scope="session")
def _pos_template(tmp_path_factory: pytest.TempPathFactory, _embedding_template: Path) -> Path:
    """A cache folder with the embedding table and PCT2T's POS lexicon and its vectors (17 s to build on one
    core from the demo corpus, about 50 s with WikiText-2 in the data folder; once per test run). A folder of its own: a worker seeding from the embedding template never meets a
    lexicon half-written by another worker."""
    from rapt_audit.mechanisms.engines import pos_candidates
    from rapt_audit.pipeline.context import RunContext

    def build(folder: Path) -> None:
        seed_cache(_embedding_template, folder)
        pos_candidates(RunContext(cache_dir=folder))
        if os.environ.get("RAPT_AUDIT_DATA"):
            # Public text shapes the lexicon (WikiText-2 from the data folder, else the demo corpus), and tests
            # run both ways (a subprocess or a command without the folder): keep the other lexicon too. A few
            # seconds: the vocabulary's own tags, most of the cost, are kept in this process (pos._isolated_tags).
            with pytest.MonkeyPatch.context() as patch:
                patch.delenv("RAPT_AUDIT_DATA")
                pos_candidates(RunContext(cache_dir=folder))

    return _built_once(tmp_path_factory, POS_TEMPLATE, build)


def _richest_template(embedding_template: Path) -> Path:
    """The POS template where this run has built it already, else the embedding template."""
    pos = embedding_template.with_name(POS_TEMPLATE)
    return pos if pos.with_name(f"{POS_TEMPLATE}.built").exists() else embedding_template


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
                if target.exists():  # seeded before (the session's own folder), or built there: same key, same entry
                    continue
                target.parent.mkdir(parents=True, exist_ok=True)
                try:
                    os.link(source, target)
                except OSError:
                    shutil.copy2(source, target)
    return folder


@pytest.fixture
def warm_cache(tmp_path: Path, _embedding_template: Path) -> Path:
    """A test's own cache folder (``tmp_path / "cache"``) that already holds the embedding table: for tests
    whose subject is not how the table is built. PCT2T's lexicon joins where the run has built it."""
    return seed_cache(_richest_template(_embedding_template), tmp_path / "cache")


@pytest.fixture
def warm_pos_cache(tmp_path: Path, _pos_template: Path) -> Path:
    """:func:`warm_cache` with PCT2T's POS lexicon and its vectors (tests of PCT2T and RAPT)."""
    return seed_cache(_pos_template, tmp_path / "cache")


@pytest.fixture(scope="session")
def seed_warm_cache(_embedding_template: Path) -> Callable[[Path], Path]:
    """Seeds a given cache folder as :func:`warm_cache` does (for module-scoped folders)."""
    return lambda folder: seed_cache(_richest_template(_embedding_template), folder)


@pytest.fixture(scope="session")
def seed_pos_cache(_pos_template: Path) -> Callable[[Path], Path]:
    """Seeds a given cache folder as :func:`warm_pos_cache` does (for module-scoped contexts and folders
    that are not ``tmp_path / "cache"``)."""
    return functools.partial(seed_cache, _pos_template)


@pytest.fixture(scope="session")
def session_cache_with_lexicon(tmp_path_factory: pytest.TempPathFactory, seed_pos_cache: Callable[[Path], Path]
                               ) -> Path:
    """The session's cache folder (``RAPT_AUDIT_CACHE``, see ``_isolated_cache``) seeded with the embedding table
    and PCT2T's lexicon, as on a machine that has run once: for tests of the user's side and of documented
    commands whose subject is not how these are built (that is tested in test_vocab_nn, test_user_cache and
    test_cold_start's analyses, from empty folders)."""
    return seed_pos_cache(tmp_path_factory.getbasetemp() / "cache")


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


#: The width of :func:`small_service`'s vectors (MiniLM's are 384 wide): it tells at once which model made a vector.
SERVICE_WIDTH = 64


@pytest.fixture(scope="session")
def small_service(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A second model folder for a service apart from the client (issue #63): MiniLM's tokenizer and
    architecture, 64 wide and two layers deep, its own random weights; no second download needed."""
    import torch
    from transformers import AutoConfig, AutoModel

    from rapt_audit.encoder.models import resolve_model_path

    source = Path(resolve_model_path("minilm"))
    folder = tmp_path_factory.mktemp("service-model")
    config = AutoConfig.from_pretrained(source, hidden_size=SERVICE_WIDTH, num_attention_heads=2,
                                        num_hidden_layers=2, intermediate_size=128)
    torch.manual_seed(63)
    AutoModel.from_config(config).save_pretrained(folder, safe_serialization=True)
    for name in ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"):
        if (source / name).is_file():
            shutil.copy(source / name, folder / name)
    return str(folder)
