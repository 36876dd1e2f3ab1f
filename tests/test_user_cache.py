"""The on-disk cache of the user's set-up: fingerprints, lexicons, a folder that cannot be written."""

from __future__ import annotations

import json
import os
import warnings

import pytest

from rapt_audit.api import files
from rapt_audit.encoder.models import resolve_model_path, weights_fingerprint


def test_fingerprint_is_remembered_and_equals_the_hash(tmp_path):
    path = resolve_model_path("minilm")
    plain = weights_fingerprint(path)
    assert weights_fingerprint(path, cache_dir=tmp_path) == plain  # cold: hashed, then stored
    [entry] = (tmp_path / "fingerprints").iterdir()
    assert entry.read_text(encoding="ascii") == plain
    entry.write_text("not a digest", encoding="ascii")  # a damaged entry is hashed again
    assert weights_fingerprint(path, cache_dir=tmp_path) == plain


def test_fingerprint_key_follows_the_file(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    weights = model / "model.safetensors"
    weights.write_bytes(b"one")
    first = weights_fingerprint(str(model), cache_dir=tmp_path / "cache")
    weights.write_bytes(b"two, longer")  # new size and time: a new key, hashed afresh
    second = weights_fingerprint(str(model), cache_dir=tmp_path / "cache")
    assert first != second and second == weights_fingerprint(str(model))


def test_corrupt_lexicon_cache_is_rebuilt(tmp_path):
    from rapt_audit.mechanisms.pos import CATEGORIES, vocabulary_lexicon

    class Token:
        tag_ = "NN"

    def nlp_pipe(words, batch_size):  # a stand-in tagger that calls every word a noun
        return [[Token()] for _ in words]

    nlp = type("Tagger", (), {"pipe": staticmethod(nlp_pipe)})()
    cache = tmp_path / "lexicon.json"
    cache.write_text('{"noun": [1, 2]}', encoding="utf-8")  # not a lexicon
    lexicon = vocabulary_lexicon(lambda: nlp, ["apple", "river"], cache_file=cache)
    assert lexicon["noun"] == ["apple", "river"] and set(lexicon) == set(CATEGORIES)
    assert json.loads(cache.read_text(encoding="utf-8")) == lexicon  # rewritten
    cache.write_text("{truncated", encoding="utf-8")
    assert vocabulary_lexicon(lambda: nlp, ["apple"], cache_file=cache)["noun"] == ["apple"]


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root writes to read-only folders")
def test_read_only_cache_folder_works_from_memory_with_one_warning(tmp_path, monkeypatch):
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o500)
    monkeypatch.setattr(files, "_warned_unwritable", False)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            assert files.write_cache_atomic(folder / "a" / "x.bin", lambda h: h.write(b"1")) is False
            assert files.write_cache_atomic(folder / "y.bin", lambda h: h.write(b"2")) is False
    finally:
        folder.chmod(0o700)
    assert len(caught) == 1 and "RAPT_AUDIT_CACHE" in str(caught[0].message)


def test_unwritable_cache_still_privatizes(tmp_path, monkeypatch):
    """A cache path that is a file (so nothing can be created under it): privatize still works."""
    from rapt_audit.user_side.privatizer import Privatizer

    blocker = tmp_path / "cache"
    blocker.write_text("a file, not a folder", encoding="utf-8")
    monkeypatch.setenv("RAPT_AUDIT_CACHE", str(blocker))
    monkeypatch.setattr(files, "_warned_unwritable", False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        outputs = list(Privatizer("t2t", {"eta": "inf"}).stream(["the rent is due"]))
    assert outputs == ["the rent is due"]
    assert sum("cannot be written" in str(w.message) for w in caught) == 1
