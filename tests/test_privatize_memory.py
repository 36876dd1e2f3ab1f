"""``rapt-audit privatize`` streams in constant memory (issue #29): nothing grows with the number of records.

The code before the issue failed all but the text and JSON Lines peaks: each batch length gave a search
width, and torch compiled and kept kernels for each (2.5 GB over 120,000 SST-2 records); CSV line numbers
were kept for every line, word vectors for up to 500,000 new words, and spaCy kept every new word's
strings. The 100,000-record peak memory measurement is
``tests/benchmarks/test_bench_privatize.py::test_memory_is_flat_from_10k_to_100k_records`` (slow).
"""

from __future__ import annotations

import csv
import io
import json
import tracemalloc

import numpy as np
import pytest

from rapt_audit.cli import main
from rapt_audit.encoder.vocab import EmbeddingSpace
from rapt_audit.mechanisms import privatize as engines
from rapt_audit.mechanisms.nn_exact import exact_nearest
from rapt_audit.mechanisms.nn_search import NearestNeighbourIndex
from rapt_audit.mechanisms.noise import dchi_noise
from rapt_audit.mechanisms.pos import load_tagger, ptb_tags

WORDS = "my landlord john smith in boston raised the rent again after i told him about my new job".split()


def test_searches_of_every_length_meet_few_kernel_shapes():
    """Batches of 1 to 300 units compile at most 16 bfloat16 product shapes, and every answer stays exact."""
    import torch  # lazy (torch)
    from torch.overrides import TorchFunctionMode  # lazy (torch)

    shapes: set[tuple[tuple[int, ...], ...]] = set()

    class Products(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
            if func is torch.matmul and args[0].dtype == torch.bfloat16:
                shapes.add((tuple(args[0].shape), tuple(args[1].shape)))
            return func(*args, **(kwargs or {}))

    rng = np.random.default_rng(0)
    table = rng.normal(size=(2048, 32)).astype(np.float32)
    index = NearestNeighbourIndex(table)
    for n in range(1, 301):
        clean = table[rng.integers(0, len(table), n)]
        seed = int(rng.integers(1 << 31))
        with Products():
            rows = engines.decode_noisy(lambda a, b: clean[a:b], n, eta=60.0, rng=np.random.default_rng(seed),
                                        index=index)
        noisy = dchi_noise(n, 32, 60.0, np.random.default_rng(seed), dtype=np.float32) + clean
        assert np.array_equal(rows, exact_nearest(table, noisy)), n
    assert len(shapes) <= 2 * 256 // 32, sorted(shapes)  # per width (a multiple of 32): the rows in full and the rest


def _input(tmp_path, fmt: str, n: int):
    """``n`` records of varied length in layout ``fmt`` (text lines, JSON Lines or CSV)."""
    texts = [" ".join(WORDS[(i * 7) % 11:(i * 7) % 11 + 3 + i % 5]) + f" {i}" for i in range(n)]
    path = tmp_path / f"in{n}.{fmt}"
    if fmt == "txt":
        path.write_text("".join(t + "\n" for t in texts), encoding="utf-8")
    elif fmt == "jsonl":
        path.write_text("".join(json.dumps({"id": i, "body": t}) + "\n" for i, t in enumerate(texts)), encoding="utf-8")
    else:
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerows([["id", "body"], *([i, t] for i, t in enumerate(texts))])
        path.write_text(buffer.getvalue(), encoding="utf-8")
    return path


@pytest.mark.parametrize("fmt", ["txt", "jsonl", "csv"])
def test_a_ten_times_longer_input_takes_no_more_memory(tmp_path, fmt):
    """Python's peak allocation privatizing 1,000 and 10,000 records with identity (whole command, sidecar too)."""
    layout = [] if fmt == "txt" else ["--format", fmt, "--field", "body"]

    def peak(n: int) -> int:
        src, out = _input(tmp_path, fmt, n), tmp_path / f"out{n}.{fmt}"
        tracemalloc.start()
        try:
            assert main(["privatize", str(src), "--defense", "identity", *layout, "--out", str(out), "--quiet"]) == 0
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    peak(10)  # modules and plugins loaded
    small, large = peak(1_000), peak(10_000)
    assert large < small * 1.1 + 32_768, (small, large)  # measured +3 to +7 % (longer ids); a line kept: 35 B


def test_word_vectors_stay_within_their_byte_budget(monkeypatch):
    """A stream of new words keeps at most VECTOR_CACHE_BYTES of vectors, and each vector is the same after a clear."""
    dim, vocabulary = 256, 500
    rng = np.random.default_rng(1)
    table = rng.normal(size=(vocabulary, dim)).astype(np.float32)
    space = EmbeddingSpace("test", tuple(f"t{i}" for i in range(vocabulary)), np.arange(vocabulary), table,
                           np.zeros(vocabulary, bool), frozenset(), None, table)

    def tokenizer(words, add_special_tokens=False):  # noqa: ANN001, ANN202 - two ids per word, from its digits
        return {"input_ids": [[int(w[1:]) % vocabulary, int(w[1:]) // vocabulary % vocabulary] for w in words]}

    monkeypatch.setattr(engines, "VECTOR_CACHE_BYTES", 64 * dim * 4, raising=False)  # 64 words
    engine = engines.WordEngine(space, tokenizer, space.tokens, {}, lambda group: None)
    for start in range(0, 2_000, 40):
        words = [f"w{i}" for i in range(start, start + 40)] + ["w3"]
        vectors = engine.word_vectors(words)
        assert len(engine._vector_cache) <= 64
        assert np.array_equal(vectors[-1], space.word_vector([3, 0]))


def test_tagging_new_words_leaves_spacys_vocabulary_as_it_was():
    """spaCy forgets the strings of the words a batch brought (its ``memory_zone``), and tags as before."""
    nlp = load_tagger()
    texts = [f"the tenant zorblax{i} paid quimby{i} in vrelk{i} ." for i in range(200)]
    ptb_tags(nlp, texts[:1])
    before = len(nlp.vocab.strings)
    rows = ptb_tags(nlp, texts)
    assert len(nlp.vocab.strings) == before
    assert [w for w, _, _ in rows[7]] == texts[7].split() and rows[7][0][2] == "DT"
