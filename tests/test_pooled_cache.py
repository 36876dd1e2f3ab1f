"""The frozen encoder's clean pooled vectors kept on disk (issue 39 item 6: a benchmark's CAPE, DPNR and
encoder-client cells of every ε encode the same texts once)."""

from __future__ import annotations

import numpy as np
import pytest

from rapt_audit.api.types import Record


def _context(cache):
    from rapt_audit.pipeline.context import RunContext

    return RunContext(seed=3, profile="smoke", device="cpu", cache_dir=cache)


@pytest.fixture
def records():
    return [Record(uid=f"r/{i}", text=text) for i, text in enumerate(
        ["the film is a delight", "a dull , tired plot", "nothing works here", "warm and funny"])]


def test_a_new_run_reads_the_vectors_back_and_other_texts_or_a_broken_entry_are_encoded_again(
        warm_cache, records, monkeypatch):
    from rapt_audit.encoder import encode

    first = encode.cached_pooled(_context(warm_cache), records, tag="clean")
    entries = list((warm_cache / "pooled").glob("*.npy"))
    assert first.shape == (4, 384) and first.dtype == np.float32 and len(entries) == 1

    calls = []
    real = encode.encode_pooled
    monkeypatch.setattr(encode, "encode_pooled", lambda ctx, texts: calls.append(list(texts)) or real(ctx, texts))
    again = encode.cached_pooled(_context(warm_cache), records, tag="clean")  # a new run: nothing in memory
    assert calls == [] and np.array_equal(again, first)

    other = [Record(uid=r.uid, text=r.text + " !") for r in records]  # same uids, other texts
    changed = encode.cached_pooled(_context(warm_cache), other, tag="clean")
    assert calls == [[r.text for r in other]] and not np.array_equal(changed, first)

    entries[0].write_bytes(b"not an array")
    rebuilt = encode.cached_pooled(_context(warm_cache), records, tag="clean")
    assert len(calls) == 2 and np.array_equal(rebuilt, first)
