#!/usr/bin/env python
"""Would an int8 screen speed up T2T's nearest-neighbour search? The measurement behind
``reports/benchmarks.md`` ("T2T throughput").

Prints, on this machine: the time of one product of MiniLM's regular vocabulary against 256
queries in float32, bfloat16 (the index's screen) and int8 (``torch._int_mm``, VNNI on x86); the
largest rounding error of a row in bfloat16 and in int8 with one scale per row; and, for 4,096 noisy
queries per η, the share that each screen's error would let the certificate settle with ``kc``
candidates. The proxy: a query is settled when its best exact score beats the ``kc+1``-th by more
than twice the screen's error bound ``‖q‖·max‖e − ẽ‖ + ‖q − q̃‖·max‖e‖`` (the same bound
``NearestNeighbourIndex`` certifies with).

    .venv/bin/python scripts/int8_screen_study.py
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import torch

from rapt_audit.encoder.vocab import embedding_space
from rapt_audit.mechanisms.noise import dchi_noise
from rapt_audit.pipeline.context import RunContext, default_cache_dir


def per_call_seconds(fn, rounds: int = 20) -> float:  # noqa: ANN001 - a product to time
    fn()
    start = time.perf_counter()
    for _ in range(rounds):
        fn()
    return (time.perf_counter() - start) / rounds


def int8_rows(x: torch.Tensor) -> torch.Tensor:
    """``x`` rounded to int8 with one scale per row, back in float32."""
    scale = x.abs().amax(1, keepdim=True) / 127
    return torch.round(x / scale).clamp(-127, 127) * scale


def main() -> None:
    table = torch.from_numpy(np.array(embedding_space(RunContext(cache_dir=Path(default_cache_dir()))).vectors,
                                      dtype=np.float32))
    queries = torch.randn(384, 256)
    as_int8 = lambda x: torch.round(x / (x.abs().max() / 127)).to(torch.int8)  # noqa: E731
    t8, q8 = as_int8(table).contiguous(), as_int8(queries).contiguous()
    t16, q16 = table.bfloat16(), queries.bfloat16()
    print(f"one product, {len(table):,} x 384 x 256: float32 {per_call_seconds(lambda: table @ queries) * 1e3:.1f} ms, "
          f"bfloat16 {per_call_seconds(lambda: t16 @ q16) * 1e3:.1f} ms, "
          f"int8 {per_call_seconds(lambda: torch._int_mm(t8, q8)) * 1e3:.1f} ms")
    err16 = (table.bfloat16().float() - table).norm(dim=1).max().item()
    err8 = (int8_rows(table) - table).norm(dim=1).max().item()
    print(f"largest row error in norm: bfloat16 {err16:.4f}, int8 per row {err8:.4f}")
    rng, n = np.random.default_rng(0), 4096
    e64, e_max = table.double(), table.norm(dim=1).max().item()
    half_sq = 0.5 * (e64 ** 2).sum(1)
    for eta in (50, 100, 175):
        q = torch.from_numpy(table.numpy()[rng.integers(0, len(table), n)]
                             + dchi_noise(n, table.shape[1], eta, rng, dtype=np.float32))
        best = torch.topk(q.double() @ e64.T - half_sq, 33, dim=1).values
        norm_q = q.norm(dim=1).double()
        slack8 = norm_q * err8 + (int8_rows(q) - q).norm(dim=1).double() * e_max
        slack16 = norm_q * err16 + (q.bfloat16().float() - q).norm(dim=1).double() * e_max
        for kc in (8, 16, 32):
            gap = best[:, 0] - best[:, kc]
            print(f"eta={eta} kc={kc}: settled with int8 {(gap > 2 * slack8).double().mean():.3f}, "
                  f"bfloat16 {(gap > 2 * slack16).double().mean():.3f}")


if __name__ == "__main__":
    main()
