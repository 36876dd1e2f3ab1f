"""The user's side starts without torch, and spaCy's analyses of clean texts are cached for audits.

* The nearest-neighbour index answers its first ``cold_queries`` queries with numpy's float64
  search, which must give exactly the rows the torch index gives.
* Privatizing a short text with T2T or PCT2T in a fresh process never imports torch (spaCy's tagger
  is loaded with torch hidden), and the tags are the same as with torch present.
* An audit stores the POS tags and entities of the texts it analyses; a corrupt entry is rebuilt
  with a warning; the user's side stores nothing.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

from rapt_audit.mechanisms.analyses import analysis_path, pos_tags, text_entities
from rapt_audit.mechanisms.engines import tagger
from rapt_audit.mechanisms import nn_search
from rapt_audit.mechanisms.nn_exact import Float64Search
from rapt_audit.mechanisms.nn_exact import exact_nearest
from rapt_audit.mechanisms.nn_search import NearestNeighbourIndex
from rapt_audit.mechanisms.noise import dchi_noise
from rapt_audit.mechanisms.pos import entity_mentions, tag_texts
from rapt_audit.pipeline.context import RunContext

TEXTS = ["my landlord john smith in boston raised the rent again .",
         "She called Dr. Mary Jones at Acme Corp in Paris on Monday about the test results.",
         "  two  spaces, a tab\there and an e-mail: bob@example.com  "]


@pytest.fixture(scope="module")
def table() -> np.ndarray:
    return np.random.default_rng(0).normal(size=(3000, 24)).astype(np.float32)


def noisy_queries(table: np.ndarray, n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    clean = table[rng.integers(0, len(table), n)]
    return clean + dchi_noise(n, table.shape[1], 8.0, rng, dtype=np.float32)


def test_cold_queries_give_the_rows_of_the_torch_index(table, monkeypatch):
    monkeypatch.setattr(nn_search, "_torch_loaded", lambda: False)  # as in a fresh user-side process
    queries = noisy_queries(table, 300, seed=1)
    cold = NearestNeighbourIndex(table, cold_queries=400)
    warm = NearestNeighbourIndex(table)
    np.testing.assert_array_equal(cold.search(queries[:250]), warm.search(queries[:250]))
    assert not cold._built and cold.cold_queries == 150  # answered by numpy, budget spent
    # A call larger than what is left builds the torch index; later calls use it.
    np.testing.assert_array_equal(cold.search(queries), warm.search(queries))
    assert cold._built and cold._cold is None
    np.testing.assert_array_equal(cold.search(queries[:10]), exact_nearest(table, queries[:10]))


def test_cold_index_builds_torch_for_top_k_and_checks_its_budget(table):
    queries = noisy_queries(table, 5, seed=2)
    cold = NearestNeighbourIndex(table, cold_queries=100)
    rows, _ = cold.search_topk(queries, 3)
    assert cold._built and rows.shape == (5, 3)
    # Once torch is imported anyway (as in this test process), the cold start would save nothing.
    assert nn_search._torch_loaded()
    warm = NearestNeighbourIndex(table, cold_queries=100)
    warm.search(queries)
    assert warm._built and warm.cold_queries == 100
    with pytest.raises(ValueError, match="cold_queries"):
        NearestNeighbourIndex(table, cold_queries=-1)


def test_float64_search_breaks_ties_to_the_lowest_row():
    table = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0]], dtype=np.float32)
    assert Float64Search(table).nearest(np.array([[1.0, 0.0], [0.5, 0.5]]))[0] == 0
    assert list(Float64Search(table).nearest(np.array([[0.5, 0.5]]))) == [0]  # equidistant from all: lowest


@pytest.mark.parametrize("defense", ["t2t", "pct2t"])
def test_a_short_text_is_privatized_without_importing_torch(defense, session_cache_with_lexicon):
    from rapt_audit.user_side.privatizer import privatize

    # The session's folder holds the embedding table and PCT2T's lexicon, built once a test run
    # (tests/conftest.py); the user side's own entries are still built here, as on a machine's first start.
    privatize(TEXTS[1], defense, eta=100)  # the first start on a machine fills the caches (it needs torch)
    code = ("import sys\n"
            "from rapt_audit.user_side.privatizer import privatize\n"
            f"out, record = privatize({TEXTS[0]!r}, {defense!r}, eta=100, seed=3)\n"
            "print(out[0])\n"
            "print('torch' in sys.modules)\n")
    cache = os.environ["RAPT_AUDIT_CACHE"]  # the test session's (tests/conftest.py)
    env = {"RAPT_AUDIT_CACHE": cache, "PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    released, torch_loaded = done.stdout.splitlines()[-2:]
    assert torch_loaded == "False"
    assert released.strip()
    ctx = RunContext(cache_dir=Path(cache))  # the user's text is never written to disk
    assert not any(analysis_path(ctx, kind, [TEXTS[0]]).exists() for kind in ("tags", "entities"))


def test_spacy_tags_the_same_with_torch_hidden(synthetic_splits):
    import torch  # noqa: F401 - the in-process tagger below runs with torch present

    texts = [r.text for r in synthetic_splits.victim_train] + TEXTS
    nlp = tagger(RunContext())
    want = [[repr(w) for w in row] for row in tag_texts(nlp, texts)], entity_mentions(nlp, texts)
    code = ("import json, sys\n"
            "from rapt_audit.mechanisms.pos import entity_mentions, load_tagger, tag_texts\n"
            "texts = json.loads(sys.stdin.read())\n"
            "nlp = load_tagger()\n"
            "assert 'torch' not in sys.modules\n"
            "tags = [[repr(w) for w in row] for row in tag_texts(nlp, texts)]\n"
            "print(json.dumps([tags, entity_mentions(nlp, texts)]))\n")
    done = subprocess.run([sys.executable, "-c", code], input=json.dumps(texts), capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    got_tags, got_entities = json.loads(done.stdout)
    assert got_tags == want[0]
    assert [[tuple(m) for m in row] for row in got_entities] == want[1]


def test_audits_cache_tags_and_entities_and_rebuild_a_corrupt_entry(tmp_path):
    ctx = RunContext(cache_dir=tmp_path, cache_analyses=True)
    nlp = tagger(ctx)
    tags, entities = pos_tags(ctx, TEXTS), text_entities(ctx, TEXTS)
    assert tags == tag_texts(nlp, TEXTS) and entities == entity_mentions(nlp, TEXTS)
    path = analysis_path(ctx, "tags", TEXTS)
    assert path.exists() and analysis_path(ctx, "entities", TEXTS).exists()
    assert pos_tags(ctx, TEXTS) == tags  # read back

    # An entry that no longer rebuilds its texts (here: another text's words) is analysed again.
    doc = json.loads(gzip.decompress(path.read_bytes()))
    doc["rows"][0] = doc["rows"][1]
    path.write_bytes(gzip.compress(json.dumps(doc).encode()))
    with pytest.warns(UserWarning, match="do not match their texts"):
        assert pos_tags(ctx, TEXTS) == tags
    path.write_bytes(b"not gzip")
    with pytest.warns(UserWarning, match="analysing them again"):
        assert pos_tags(ctx, TEXTS) == tags
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert pos_tags(ctx, TEXTS) == tags  # the rebuilt entry is read without a warning


def test_runs_without_the_analysis_cache_store_nothing(tmp_path: Path):
    ctx = RunContext(cache_dir=tmp_path, cache_analyses=False)
    assert pos_tags(ctx, TEXTS) == tag_texts(tagger(ctx), TEXTS)
    assert text_entities(ctx, TEXTS) == entity_mentions(tagger(ctx), TEXTS)
    assert not (tmp_path / "analyses").exists()


def test_the_tagger_loads_with_torch_when_a_spacy_plugin_needs_it():
    # A plugin that imports torch while the model loads (simulated): the hidden torch makes it fail,
    # and the tagger is loaded again with torch visible.
    code = ("import sys\n"
            "sys.modules['torch'] = None\n"
            "import spacy\n"
            "del sys.modules['torch']\n"
            "real = spacy.load\n"
            "def load(*args, **kwargs):\n"
            "    if sys.modules.get('torch', 0) is None:\n"
            "        raise ImportError('import of torch halted; None in sys.modules')\n"
            "    return real(*args, **kwargs)\n"
            "spacy.load = load\n"
            "from rapt_audit.mechanisms.pos import load_tagger, tag_texts\n"
            "print([w.upos for w in tag_texts(load_tagger(), ['she called her doctor'])[0]])\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["['PRON',", "'VERB',", "'PRON',", "'NOUN']"]
