"""Embedding space (regular vocabulary, disk cache) and exact-in-effect nearest-neighbour search.

The real MiniLM model is loaded once for the module (~10 s); everything else is fast.
"""

from __future__ import annotations

import re
import types
import warnings

from pathlib import Path

import numpy as np
import pytest

from rapt_audit.mechanisms.nn_exact import exact_nearest
from rapt_audit.mechanisms.engines import nearest_index
from rapt_audit.mechanisms.nn_search import NearestNeighbourIndex

SPECIALS = ("[CLS]", "[SEP]", "[PAD]", "[MASK]", "[UNK]")
ETAS = (25, 75, 125, 175)


def dchi(n: int, d: int, eta: float, rng: np.random.Generator) -> np.ndarray:
    """dχ noise: Gamma(d, 1/eta) radius times a uniform direction (rapt_audit.mechanisms.noise when present)."""
    try:
        from rapt_audit.mechanisms.noise import dchi_noise
    except ImportError:  # pragma: no cover - the module is written concurrently
        g = rng.standard_normal((n, d))
        return (g / np.linalg.norm(g, axis=1, keepdims=True) * rng.gamma(d, 1.0 / eta, size=(n, 1))).astype(np.float32)
    return dchi_noise(n, d, eta, rng, dtype=np.float32)


@pytest.fixture(scope="module")
def minilm():
    from rapt_audit.encoder.models import load_model

    return load_model("minilm")


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("vocab-cache")


@pytest.fixture(scope="module")
def space(minilm, cache_dir):
    from rapt_audit.encoder.vocab import load_embedding_space

    return load_embedding_space(minilm, cache_dir=cache_dir)  # cold: builds and writes the cache


@pytest.fixture(scope="module")
def index(space):
    return NearestNeighbourIndex(space.vectors)


# --- embedding space -------------------------------------------------------------------------------


def test_regular_tokens_exclude_specials_and_unused(space, minilm):
    tokens = set(space.tokens)
    assert not tokens & set(SPECIALS)
    assert not any(re.fullmatch(r"\[unused\d+\]", t) for t in tokens)
    assert set(minilm.tokenizer.all_special_ids) <= space.excluded_ids
    assert len(space.tokens) == 29523 == 30522 - 5 - 994  # bert-base-uncased: 5 specials, 994 [unused]
    assert len(space.excluded_ids) == 999 and not set(space.token_ids.tolist()) & space.excluded_ids
    assert space.unk_id == 100 and space.dim == 384
    assert np.all(np.diff(space.token_ids) > 0)  # model-id order
    assert space.vectors.dtype == np.float32 and space.vectors.flags.c_contiguous
    assert space.all_vectors.shape == (30522, 384)
    np.testing.assert_array_equal(space.vectors, space.all_vectors[space.token_ids])
    vocab = minilm.tokenizer.get_vocab()
    assert all(vocab[t] == i for t, i in zip(space.tokens[::997], space.token_ids[::997]))


def test_continuation_pieces_flagged(space):
    expected = np.array([t.startswith("##") for t in space.tokens])
    np.testing.assert_array_equal(space.is_continuation, expected)
    flags = dict(zip(space.tokens, space.is_continuation))
    assert flags["##s"] and not flags["the"] and not flags["#"]
    assert int(space.is_continuation.sum()) == 5828


def test_rows_of_maps_ids_and_marks_non_regular(space, minilm):
    np.testing.assert_array_equal(space.rows_of(space.token_ids), np.arange(len(space.tokens)))
    np.testing.assert_array_equal(space.rows_of([101, 102, 0, 103, 100, 1]), [-1] * 6)
    the = minilm.tokenizer.convert_tokens_to_ids("the")
    assert space.tokens[space.rows_of([the])[0]] == "the"
    assert space.rows_of(np.array([], dtype=np.int64)).shape == (0,)
    with pytest.raises(ValueError, match="token ids"):
        space.rows_of([30522])


def test_word_vector_is_mean_of_sub_tokens(space, minilm):
    ids = minilm.tokenizer("unbelievably", add_special_tokens=False)["input_ids"]
    assert len(ids) > 1
    expected = space.all_vectors[ids].astype(np.float64).mean(axis=0)
    vec = space.word_vector(ids)
    assert vec.dtype == np.float32 and vec.shape == (384,)
    np.testing.assert_allclose(vec, expected, rtol=1e-6, atol=1e-7)
    np.testing.assert_array_equal(space.word_vector([100]), space.all_vectors[100])  # [UNK] works
    with pytest.raises(ValueError):
        space.word_vector([])


def test_arrays_are_read_only(space):
    with pytest.raises(ValueError):
        space.vectors[0, 0] = 1.0


def test_cache_round_trip(space, minilm, cache_dir, monkeypatch):
    from rapt_audit.encoder import vocab

    files = sorted(p.name for p in (cache_dir / "embeddings" / minilm.fingerprint[:16]).iterdir())
    assert files == [f"space-v{vocab.FORMAT_VERSION}.json", f"space-v{vocab.FORMAT_VERSION}.npz"]

    def no_build(model):  # a warm load must come from disk
        raise AssertionError("rebuilt despite a warm cache")

    monkeypatch.setattr(vocab, "build_embedding_space", no_build)
    warm = vocab.load_embedding_space(minilm, cache_dir=cache_dir)
    assert warm is not space and warm.tokens == space.tokens
    for name in ("token_ids", "vectors", "is_continuation", "all_vectors"):
        np.testing.assert_array_equal(getattr(warm, name), getattr(space, name))
        assert getattr(warm, name).dtype == getattr(space, name).dtype
    assert warm.excluded_ids == space.excluded_ids and warm.unk_id == space.unk_id
    assert warm.model_fingerprint == minilm.fingerprint


def test_corrupt_cache_is_rebuilt(space, minilm, tmp_path):
    from rapt_audit.encoder import vocab

    vocab.load_embedding_space(minilm, cache_dir=tmp_path)
    npz, meta = vocab._cache_paths(tmp_path, minilm.fingerprint)
    meta.write_text("{not json", encoding="utf-8")
    again = vocab.load_embedding_space(minilm, cache_dir=tmp_path)
    assert again.tokens == space.tokens
    npz.write_bytes(b"garbage")
    assert vocab.load_embedding_space(minilm, cache_dir=tmp_path).tokens == space.tokens


def test_a_space_read_twice_from_the_same_files_is_read_once_and_a_replaced_entry_again(space, minilm, tmp_path):
    from rapt_audit.encoder import vocab

    vocab.load_embedding_space(minilm, cache_dir=tmp_path)  # built and stored
    first = vocab.load_embedding_space(minilm, cache_dir=tmp_path)
    assert vocab.load_embedding_space(minilm, cache_dir=tmp_path) is first  # the same files: read once
    linked = tmp_path / "other"  # another cache folder hard-linked to the same files, as the tests' are
    for path in vocab._cache_paths(tmp_path, minilm.fingerprint):
        target = vocab._cache_paths(linked, minilm.fingerprint)[path.suffix == ".json"]
        target.parent.mkdir(parents=True, exist_ok=True)
        target.hardlink_to(path)
    assert vocab.load_embedding_space(minilm, cache_dir=linked) is first
    vocab._save(space, tmp_path)  # the entry replaced (by rename): read again
    again = vocab.load_embedding_space(minilm, cache_dir=tmp_path)
    assert again is not first and again.tokens == first.tokens


def test_embedding_space_shared_per_run(ctx, minilm):
    from rapt_audit.encoder.vocab import embedding_space

    ctx.shared(("encoder", ctx.model, ctx.device), lambda: minilm)  # reuse the loaded model
    first = embedding_space(ctx)
    assert embedding_space(ctx) is first and len(first.tokens) == 29523


def test_warm_space_is_read_without_the_encoder(space, cache_dir, monkeypatch):
    """A warm cache serves the run's space by weights fingerprint alone: the encoder is never loaded."""
    from rapt_audit.encoder.vocab import embedding_space
    from rapt_audit.pipeline.context import RunContext

    ctx = RunContext(cache_dir=cache_dir)
    monkeypatch.setattr(RunContext, "encoder", lambda self: pytest.fail("the encoder was loaded"))
    warm = embedding_space(ctx)
    assert warm.tokens == space.tokens
    np.testing.assert_array_equal(warm.all_vectors, space.all_vectors)


def test_fast_tokenizer_matches_the_hugging_face_tokenizer(minilm):
    """The engines' tokenizer (tokenizer.json, no transformers) gives the model tokenizer's ids and strings."""
    from rapt_audit.data import load_dataset
    from rapt_audit.encoder.models import FastTokenizer, resolve_model_path

    fast = FastTokenizer(Path(resolve_model_path("minilm")) / "tokenizer.json")
    texts = [r.text for r in load_dataset("synthetic").records[:300]]
    texts += ["Ünïcödé café — naïve 😀 [MASK] [UNK] ##ing   spaces\ttab", "", "  ", "e-mail: a.b@c.de, 3.14%!"]
    ids = fast(texts, add_special_tokens=False)["input_ids"]
    assert ids == list(minilm.tokenizer(texts, add_special_tokens=False)["input_ids"])
    for row in ids[:50] + ids[-4:]:
        pieces = minilm.tokenizer.convert_ids_to_tokens(row)
        assert fast.convert_tokens_to_string(pieces) == minilm.tokenizer.convert_tokens_to_string(pieces)


def _fake_model(matrix: np.ndarray, vocab: dict[str, int], specials: list[int]):
    import torch

    embedding = torch.nn.Embedding(*matrix.shape)
    with torch.no_grad():
        embedding.weight.copy_(torch.from_numpy(matrix))
    tokenizer = types.SimpleNamespace(get_vocab=lambda: dict(vocab), all_special_ids=specials, unk_token_id=1,
                                      added_tokens_decoder={})
    return types.SimpleNamespace(model=types.SimpleNamespace(get_input_embeddings=lambda: embedding),
                                 tokenizer=tokenizer, fingerprint="f" * 64)


def test_build_validates_matrix_and_warns_on_duplicates():
    from rapt_audit.encoder.vocab import build_embedding_space

    vocab = {"[PAD]": 0, "[UNK]": 1, "[unused0]": 2, "a": 3, "##b": 4, "c": 5}
    matrix = np.random.default_rng(0).standard_normal((6, 4)).astype(np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        space = build_embedding_space(_fake_model(matrix, vocab, [0, 1]))
    assert space.tokens == ("a", "##b", "c") and space.excluded_ids == {0, 1, 2}
    np.testing.assert_array_equal(space.is_continuation, [False, True, False])
    matrix[5] = matrix[3]
    with pytest.warns(UserWarning, match="share an embedding row"):
        build_embedding_space(_fake_model(matrix, vocab, [0, 1]))
    matrix[4, 2] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        build_embedding_space(_fake_model(matrix, vocab, [0, 1]))


# --- nearest-neighbour search ----------------------------------------------------------------------


def test_random_queries_match_exact(space, index):
    rng = np.random.default_rng(1)
    scale = space.vectors.std()
    queries = np.concatenate([rng.standard_normal((400, 384)) * scale * s for s in (0.5, 2.0, 20.0)]).astype(np.float32)
    np.testing.assert_array_equal(index.search(queries), exact_nearest(space.vectors, queries))


def test_noisy_queries_match_exact(space, index):
    rng = np.random.default_rng(2)
    batches = []
    for eta in ETAS:
        clean = space.vectors[rng.integers(0, len(space.tokens), 800)]
        batches.append(clean + dchi(800, 384, eta, rng))
    queries = np.concatenate(batches)
    before = index.fallbacks
    got, want = index.search(queries), exact_nearest(space.vectors, queries)
    assert (got == want).mean() == 1.0
    assert index.fallbacks - before < 0.03 * len(queries)  # the certificate rarely fails on realistic noise


def test_searches_from_several_threads_match_exact(space, index):
    """Each thread screens into its own score buffer: blocks searched at once never read another's scores."""
    from concurrent.futures import ThreadPoolExecutor

    rng = np.random.default_rng(5)
    clean = space.vectors[rng.integers(0, len(space.tokens), (4, 1_500))]
    batches = [c + dchi(len(c), 384, 75, rng) for c in clean]
    with ThreadPoolExecutor(max_workers=4) as pool:
        got = list(pool.map(index.search, batches))
    for rows, queries in zip(got, batches):
        np.testing.assert_array_equal(rows, exact_nearest(space.vectors, queries))


def test_float64_and_float32_screen_and_extreme_queries(space, index):
    rng = np.random.default_rng(3)
    q64 = space.vectors[rng.integers(0, len(space.tokens), 300)].astype(np.float64) + rng.standard_normal((300, 384)) * 0.05
    extreme = np.stack([np.zeros(384), -1e3 * space.vectors.mean(axis=0), np.full(384, 1e25), space.vectors[7]])
    queries = np.concatenate([q64, extreme])
    want = exact_nearest(space.vectors, queries)
    np.testing.assert_array_equal(index.search(queries), want)
    exact32 = NearestNeighbourIndex(space.vectors[:5000], screen="float32")
    np.testing.assert_array_equal(exact32.search(queries), exact_nearest(space.vectors[:5000], queries))
    assert index.search(space.vectors[7])[0] == 7  # a 1-D query is one query


def test_all_negative_scores():
    # Positive table, negative queries: every screened score is negative (integer-view max path).
    rng = np.random.default_rng(4)
    table = rng.random((3000, 32)).astype(np.float32) + 0.1
    queries = -rng.random((200, 32)).astype(np.float32) * 5
    np.testing.assert_array_equal(NearestNeighbourIndex(table).search(queries), exact_nearest(table, queries))


def test_ties_resolve_to_lowest_row():
    rng = np.random.default_rng(5)
    table = rng.standard_normal((3000, 16)).astype(np.float32)
    table[2500] = table[40]
    table[2999] = table[40]
    for screen in ("bfloat16", "float32"):
        index = NearestNeighbourIndex(table, screen=screen)
        assert index.search(table[[2500, 40, 2999]]).tolist() == [40, 40, 40]
        rows, dist = index.search_topk(table[2999], 4)
        assert rows[0, :3].tolist() == [40, 2500, 2999] and dist[0, :3].tolist() == [0.0, 0.0, 0.0]
    small = np.array([[1.0, 0.0], [-1.0, 0.0], [0.0, 3.0]], dtype=np.float32)  # equidistant from the origin
    assert NearestNeighbourIndex(small).search(np.zeros((1, 2)))[0] == 0 == exact_nearest(small, np.zeros((1, 2)))[0]


def test_search_topk_ordering(space, index):
    rng = np.random.default_rng(6)
    queries = space.vectors[rng.integers(0, len(space.tokens), 50)] + dchi(50, 384, 100, rng)
    rows, dist = index.search_topk(queries, 5)
    assert rows.shape == dist.shape == (50, 5) and dist.dtype == np.float32
    t64, q64 = space.vectors.astype(np.float64), queries.astype(np.float64)
    full = np.sqrt(np.maximum((q64**2).sum(1)[:, None] + (t64**2).sum(1) - 2 * q64 @ t64.T, 0))
    np.testing.assert_array_equal(rows, np.argsort(full, axis=1, kind="stable")[:, :5])
    np.testing.assert_allclose(dist, np.take_along_axis(full, rows, axis=1), rtol=1e-6)
    assert np.all(np.diff(dist, axis=1) >= 0)
    with pytest.raises(ValueError, match="k must"):
        index.search_topk(queries, 0)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_queries_raise(index, bad):
    queries = np.zeros((4, 384), dtype=np.float32)
    queries[2, 5] = bad
    with pytest.raises(ValueError, match="NaN or infinite.*row 2"):
        index.search(queries)
    with pytest.raises(ValueError, match="NaN or infinite"):
        index.search_topk(queries, 2)
    with pytest.raises(ValueError, match="NaN or infinite"):
        NearestNeighbourIndex(queries)


def test_bad_shapes_and_empty_input(index):
    assert index.search(np.empty((0, 384), dtype=np.float32)).shape == (0,)
    with pytest.raises(ValueError, match="384 columns"):
        index.search(np.zeros((2, 10)))
    with pytest.raises(ValueError, match="screen"):
        NearestNeighbourIndex(np.eye(3), screen="float16")


def test_nearest_index_shared_per_key(ctx):
    table = np.eye(4, dtype=np.float32)
    first = nearest_index(ctx, "eye", table)
    assert nearest_index(ctx, "eye", table) is first and nearest_index(ctx, "other", table) is not first


def test_an_index_over_a_read_only_table_is_shared_by_the_runs_of_a_process_and_a_writable_ones_is_not(ctx, tmp_path):
    from rapt_audit.pipeline.context import RunContext

    other_run = RunContext(seed=1, profile="smoke", device="cpu", cache_dir=tmp_path)
    writable = np.eye(4, dtype=np.float32)
    assert nearest_index(other_run, "eye", writable) is not nearest_index(ctx, "eye", writable)
    frozen = np.eye(5, dtype=np.float32)
    frozen.flags.writeable = False  # as the embedding space's tables are
    shared = nearest_index(ctx, "frozen", frozen)
    assert nearest_index(other_run, "frozen", frozen) is shared
    copy = frozen.copy()
    copy.flags.writeable = False  # equal, but another table: its own index
    assert nearest_index(RunContext(seed=2, profile="smoke", device="cpu", cache_dir=tmp_path), "frozen", copy) is not shared


def test_block_size_follows_the_device():
    table = np.random.default_rng(3).normal(size=(500, 16)).astype(np.float32)
    assert NearestNeighbourIndex(table).block_size == 256
    # A cold index builds nothing, so its device's defaults can be read without CUDA.
    assert NearestNeighbourIndex(table, device="cuda", cold_queries=1).block_size == 4096
    assert NearestNeighbourIndex(table, block_size=7).block_size == 7


@pytest.mark.gpu
def test_the_cuda_index_gives_the_exact_rows():
    from rapt_audit.mechanisms.noise import dchi_noise

    rng = np.random.default_rng(4)
    table = rng.normal(size=(20_000, 96)).astype(np.float32)
    queries = table[rng.integers(0, len(table), 10_000)] + dchi_noise(10_000, 96, 10.0, rng, dtype=np.float32)
    index = NearestNeighbourIndex(table, device="cuda")
    np.testing.assert_array_equal(index.search(queries), exact_nearest(table, queries))
    rows, _ = index.search_topk(queries[:200], 4)
    scores = queries[:200].astype(np.float64) @ table.T.astype(np.float64) - 0.5 * (table.astype(np.float64) ** 2).sum(1)
    np.testing.assert_array_equal(rows, np.argsort(-scores, axis=1, kind="stable")[:, :4])
