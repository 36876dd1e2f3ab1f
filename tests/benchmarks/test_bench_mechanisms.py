"""Speed and memory of the text mechanisms (pytest-benchmark; figures, not timed assertions).

Run: ``pytest tests/benchmarks -m benchmark --benchmark-enable``. Each benchmark stores its
throughput in ``extra_info`` so ``--benchmark-json`` keeps the figures quoted in the notes.
Targets (mechanism issue): t2t ≥ 12,000 tokens/s, pct2t ≥ 5,000 words/s including tagging,
warm set-up < 2 s, flat memory on a 100,000-word input.
"""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from rapt_audit.pipeline.context import RunContext

pytestmark = pytest.mark.benchmark


@pytest.fixture(scope="module")
def bctx(tmp_path_factory) -> RunContext:
    return RunContext(seed=0, profile="cpu", device="cpu", cache_dir=tmp_path_factory.mktemp("bench-cache"))


@pytest.fixture(scope="module")
def corpus() -> list[str]:
    from rapt_audit.data import load_dataset

    records = load_dataset("synthetic").records
    return [r.text for r in records] * 4


def test_t2t_token_throughput(benchmark, bctx, corpus):
    from rapt_audit.mechanisms.engines import token_engine

    engine = token_engine(bctx)
    n_tokens = sum(len(i) for i in engine.token_ids(corpus))
    rng = np.random.default_rng(0)
    benchmark(lambda: engine.privatize_texts(corpus, eta=100.0, rng=rng))
    if benchmark.stats:
        benchmark.extra_info["tokens"] = n_tokens
        benchmark.extra_info["tokens_per_s"] = n_tokens / benchmark.stats.stats.mean


def test_pct2t_word_throughput_including_tagging(benchmark, bctx, corpus):
    from rapt_audit.api.params import make_plugin
    from rapt_audit.api.plugins import DEFENSES, load

    load()
    defense = make_plugin(DEFENSES, "pct2t", {})
    defense.privatize(corpus[:10], eta=100.0, rng=np.random.default_rng(0), ctx=bctx)  # warm tables
    n_words = sum(len(t.split()) for t in corpus)
    benchmark(lambda: defense.privatize(corpus, eta=100.0, rng=np.random.default_rng(0), ctx=bctx))
    if benchmark.stats:
        benchmark.extra_info["words"] = n_words
        benchmark.extra_info["words_per_s"] = n_words / benchmark.stats.stats.mean


def test_warm_setup(benchmark, bctx):
    """Set-up of a new run once the embedding table and POS lexicon are cached on disk."""
    from rapt_audit.mechanisms.engines import pos_groups, token_engine

    token_engine(bctx), pos_groups(bctx)  # populate the disk caches

    def setup() -> None:
        fresh = RunContext(seed=0, profile="cpu", device="cpu", cache_dir=bctx.cache_dir)
        token_engine(fresh)
        pos_groups(fresh)

    benchmark.pedantic(setup, rounds=3, iterations=1)


def test_memory_is_flat_on_a_100k_word_input(bctx):
    """Peak traced memory of privatizing 100,000 words vs 10,000 words (chunked streaming)."""
    from rapt_audit.mechanisms.engines import token_engine

    engine = token_engine(bctx)
    words = ("the quick brown fox jumps over the lazy dog near paris " * 10_000).split()
    peaks = {}
    for n in (10_000, 100_000):
        text = " ".join(words[:n])
        tracemalloc.start()
        engine.privatize_texts([text], eta=100.0, rng=np.random.default_rng(0))
        peaks[n] = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    # Ten times the input may cost the per-token bookkeeping (ids, rows, strings: ~100 bytes per
    # token) but not per-token vectors (1.5 kB each at d = 384): 90,000 more tokens of vectors
    # would add over 130 MB.
    assert peaks[100_000] - peaks[10_000] < 40e6, peaks
    print(f"peak traced memory: 10k words {peaks[10_000] / 1e6:.1f} MB, 100k words {peaks[100_000] / 1e6:.1f} MB")


@pytest.mark.parametrize("n", [10_000, 100_000])
def test_verbatim_matching_on_hostile_records(benchmark, n):
    """Sensitive-string matching on a record of n e-mails and phone numbers and an n-character word, at
    two sizes: linear matching keeps the seconds per character flat (quadratic matching took minutes at
    100,000). Correctness and the counted work are in tests/test_verbatim.py."""
    from rapt_audit.mechanisms.verbatim import sensitive_strings

    many = " ".join(f"n{i} {i * 7} x.y{i}@mail.org" for i in range(n))
    originals, released = ["x" * (3 * n), "ab" + "12x" * n, many], ["x" * (3 * n), "", many]
    counts = benchmark.pedantic(sensitive_strings, args=(originals, released), rounds=1, iterations=1)
    assert counts["email"]["verbatim"] == n
    if benchmark.stats:
        characters = sum(map(len, originals)) + sum(map(len, released))
        benchmark.extra_info["characters"] = characters
        benchmark.extra_info["us_per_character"] = 1e6 * benchmark.stats.stats.mean / characters
