"""The word-level sanitizers beside word-level T2T on the same words (pytest-benchmark).

Run: ``pytest tests/benchmarks/test_bench_word_mechanisms.py -m benchmark --benchmark-enable -n 0``. Each round
releases the same 12,000 words (the first 400 sentences of the public text: WikiText-2 where the data folder
is set, else the demo corpus) with warm tables, customized sets and indexes; ``extra_info`` holds words/s.
The cost of SanText and TEM grows with the number of *distinct* words (one row of |V| distances each),
CusText's with k; the noisy ones (Vickrey, Mahalanobis) cost T2T's search plus their own step.
"""

from __future__ import annotations

import time

import numpy as np
import pytest

pytestmark = pytest.mark.benchmark

SETTINGS = [("t2t", {"eta": 100.0, "unit": "word"}), ("santext", {"epsilon": 15.0}),
            ("santext", {"epsilon": 15.0, "plus": True}), ("tem", {"epsilon": 15.0}), ("custext", {"epsilon": 6.0}),
            ("vickrey", {"epsilon": 100.0}), ("mahalanobis", {"epsilon": 100.0})]


@pytest.fixture(scope="module")
def setting():
    """A run context and the words every mechanism releases."""
    import os

    from rapt_audit.api.plugins import load
    from rapt_audit.mechanisms.analyses import words
    from rapt_audit.pipeline.context import RunContext, default_cache_dir

    load()
    ctx = RunContext(seed=0, profile="cpu", device="cpu", cache_dir=default_cache_dir(),
                     data_dir=os.environ.get("RAPT_AUDIT_DATA"))
    units = [w for row in words(ctx, ctx.public_text()[1][:400]) for w, _ in row if not w.isspace()]
    return ctx, units


@pytest.mark.parametrize("name, params", SETTINGS, ids=[f"{n}-{'-'.join(map(str, p.values()))}" for n, p in SETTINGS])
def test_words_per_second(benchmark, setting, name, params):
    from rapt_audit.api.params import make_plugin
    from rapt_audit.api.plugins import DEFENSES
    from rapt_audit.mechanisms.engines import word_engine

    ctx, units = setting
    if name == "t2t":  # word-level T2T: the engine every word mechanism's table is built on
        engine = word_engine(ctx, "word")

        def release(rng: np.random.Generator) -> None:
            engine.privatize_words(units, ["word"] * len(units), eta=params["eta"], rng=rng)
    else:
        defense = make_plugin(DEFENSES, name, params)

        def release(rng: np.random.Generator) -> None:
            defense.release_words(units, epsilon=defense.epsilon, rng=rng, ctx=ctx)

    release(np.random.default_rng(0))  # warm: tables, sets, indexes, word vectors
    timings: list[float] = []

    def run() -> None:
        start = time.perf_counter()
        release(np.random.default_rng(1))
        timings.append(time.perf_counter() - start)

    benchmark.pedantic(run, rounds=3, iterations=1)
    benchmark.extra_info.update(words=len(units), distinct=len(set(units)),
                                words_per_s_best=round(len(units) / min(timings)))
