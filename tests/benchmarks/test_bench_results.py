"""Reading result files that keep their per-record outcomes (pytest-benchmark).

Run: ``pytest tests/benchmarks/test_bench_results.py -m benchmark --benchmark-enable``. A paper-profile
result keeps 17,055 outcomes for each of about a dozen measures (issue #38 keeps them for paired
comparisons), and a benchmark folder holds hundreds; ``reports/benchmarks.md`` quotes the figure
(``read_s_best``) before and after the per-record arrays left jsonschema's item-by-item check.
"""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from rapt_audit.api.types import AttackResult, Estimate, PerRecord
from rapt_audit.pipeline.results import read_result, write_result
from tests.result_factory import fake_result

pytestmark = pytest.mark.benchmark

RECORDS = 17_055  # one part of SST-2 at the paper profile


def _estimate(rng: np.random.Generator, den: int | None) -> Estimate:
    dens = rng.integers(1, 30, RECORDS) if den is None else np.full(RECORDS, den)
    parts = PerRecord(tuple(float(x) for x in rng.binomial(dens, 0.4)), tuple(float(x) for x in dens))
    return Estimate(parts.value, parts.value - 0.01, parts.value + 0.01, RECORDS, "bootstrap-percentile",
                    per_record=parts)


@pytest.fixture(scope="module")
def paper_sized_result(tmp_path_factory):
    """A result with utility accuracy and five attacks of two measures each, every one keeping its outcomes."""
    rng = np.random.default_rng(0)
    base = fake_result()
    attacks = {name: AttackResult(_estimate(rng, None), {"token_accuracy": _estimate(rng, None)}, {"records": RECORDS})
               for name in ("whitebox", "mlp_inversion", "bayes_inversion", "ae_inversion", "random_guess")}
    result = replace(base, utility={**base.utility, "accuracy": _estimate(rng, 1)}, attacks=attacks)
    folder = tmp_path_factory.mktemp("paper-result")
    write_result(result, folder)
    return folder


def test_read_a_paper_sized_result(benchmark, paper_sized_result):
    size = (paper_sized_result / "result.json").stat().st_size
    timings = []

    def read():
        import time

        start = time.perf_counter()
        read_result(paper_sized_result)
        timings.append(time.perf_counter() - start)

    benchmark.pedantic(read, rounds=5, iterations=1)
    benchmark.extra_info.update(read_s_best=round(min(timings), 4), file_mib=round(size / 2**20, 2))
    assert json.loads((paper_sized_result / "result.json").read_text(encoding="utf-8"))["attacks"]
