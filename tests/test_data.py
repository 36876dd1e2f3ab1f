"""Tests of the dataset loaders, load_dataset and make_splits.

Real-data tests read the shared datasets from ``$RAPT_AUDIT_DATA`` (never from the repository) and
skip with the reason when it is unset or a file is absent. Expected counts come from each folder's
SOURCE.md.
"""

from __future__ import annotations

import collections
import hashlib
import json
import os
from pathlib import Path

import pytest

from rapt_audit.api.errors import DataError, UnknownNameError
from rapt_audit.data import DATASETS, Dataset, SplitSizes, assert_disjoint, load_dataset, make_splits
from rapt_audit.data import synthetic as synthetic_module
from rapt_audit.data.base import fingerprint_files
from rapt_audit.data.trustpilot import equal_frequency_bins, load_tp_uk_jsonl, rapt_age_bin

REAL = ("sst2", "qqp", "trustpilot", "trustpilot_uk", "conll2003", "blogs", "wikitext2")
FIRST_FILE = {"sst2": "sst2/train.tsv", "qqp": "qqp/dev.tsv", "trustpilot": "trustpilot/tp_us_hovy2020/train.csv",
              "trustpilot_uk": "trustpilot/tp_uk_pos", "conll2003": "conll2003/train.txt",
              "blogs": "blog_authorship/msgs404u.csv", "wikitext2": "wikitext2/valid.txt", "tp_uk_raw": "tp_uk.jsonl"}
#: First 16 hex digits of sha256 over the synthetic (text, label, attributes): a golden value.
SYNTHETIC_DIGEST = "c8d27f8c0190d222"


def real(name: str, *files: str) -> Dataset:
    """Load a real dataset from $RAPT_AUDIT_DATA, skipping with the reason when it is not there."""
    root = os.environ.get("RAPT_AUDIT_DATA")
    if not root:
        pytest.skip("RAPT_AUDIT_DATA is not set; real-data tests need the shared data directory")
    for relative in files:
        if not (Path(root) / relative).exists():
            pytest.skip(f"{relative} is absent under RAPT_AUDIT_DATA={root}")
    return load_dataset(name)


def assert_roughly_equal_bins(dataset: Dataset, attribute: str = "age", tolerance: float = 0.45) -> None:
    counts = collections.Counter(r.attributes[attribute] for r in dataset.records)
    share = len(dataset.records) / len(dataset.attribute_values[attribute])
    assert set(counts) == set(dataset.attribute_values[attribute])
    assert all(abs(c - share) <= tolerance * share for c in counts.values()), counts


# --- registry, load_dataset, errors --------------------------------------------------------------

def test_all_loaders_registered() -> None:
    assert set(REAL) | {"synthetic", "tp_uk_raw"} <= set(DATASETS.names())
    with pytest.raises(UnknownNameError, match="sst2"):
        load_dataset("sst3")


def test_load_dataset_memoises() -> None:
    assert load_dataset("synthetic") is load_dataset("synthetic")


@pytest.mark.parametrize("name", REAL + ("tp_uk_raw",))
def test_missing_data_dir_raises(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RAPT_AUDIT_DATA", raising=False)
    with pytest.raises(DataError, match="RAPT_AUDIT_DATA") as err:
        load_dataset(name)
    assert FIRST_FILE[name] in str(err.value)


@pytest.mark.parametrize("name", REAL + ("tp_uk_raw",))
def test_missing_file_names_file_and_dir(name: str, tmp_path: Path) -> None:
    with pytest.raises(DataError) as err:
        load_dataset(name, tmp_path)
    assert FIRST_FILE[name] in str(err.value) and str(tmp_path) in str(err.value)


# --- synthetic -------------------------------------------------------------------------------------

def test_synthetic_is_deterministic_and_well_formed() -> None:
    first, second = synthetic_module.load(None), synthetic_module.load(None)
    assert first.records == second.records and first.fingerprint == second.fingerprint
    assert first.synthetic and len(first.records) == 600 and first.has_labels and first.has_entities
    digest = hashlib.sha256(json.dumps([(r.text, r.label, dict(r.attributes)) for r in first.records]).encode())
    # Golden values: bump VERSION in synthetic.py (and these) when the generator changes on purpose.
    assert first.fingerprint == "f91895ec84188aa8ef37d95169fd7cb66b5c2de16ba31be0414ff5a2d7546a97"
    assert digest.hexdigest()[:16] == SYNTHETIC_DIGEST
    assert collections.Counter(r.label for r in first.records) == {0: 300, 1: 300}
    cells = collections.Counter((r.attributes["gender"], r.attributes["age"]) for r in first.records)
    assert len(cells) == 12 and set(cells.values()) == {50}
    lists = {"PER": synthetic_module.PERSONS, "LOC": synthetic_module.PLACES, "ORG": synthetic_module.COMPANIES}
    for record in first.records:
        assert sorted(s.label for s in record.entities) == ["LOC", "ORG", "PER"]
        for span in record.entities:
            assert record.text[span.start:span.end] in lists[span.label]



def test_synthetic_attributes_carry_signal() -> None:
    pytest.importorskip("sklearn")
    from sklearn.feature_extraction.text import CountVectorizer
    from sklearn.linear_model import LogisticRegression

    records = synthetic_module.generate()
    train, test = records[:400], records[400:]
    vectorizer = CountVectorizer()
    features = vectorizer.fit_transform([r.text for r in train])
    test_features = vectorizer.transform([r.text for r in test])
    for attribute in ("gender", "age"):
        truth = [r.attributes[attribute] for r in test]
        model = LogisticRegression(max_iter=1000).fit(features, [r.attributes[attribute] for r in train])
        accuracy = sum(p == t for p, t in zip(model.predict(test_features), truth)) / len(truth)
        majority = max(collections.Counter(truth).values()) / len(truth)
        assert accuracy > majority + 0.2, (attribute, accuracy, majority)


# --- splits ----------------------------------------------------------------------------------------

def test_make_splits_disjoint_deterministic_and_checked() -> None:
    dataset = load_dataset("synthetic")
    sizes = SplitSizes(victim_train=200, victim_test=100, attacker_train=150)
    splits = make_splits(dataset, sizes, seed=3)
    assert splits.sizes() == {"victim_train": 200, "victim_test": 100, "attacker_train": 150, "attacker_valid": 150}
    assert_disjoint(splits.victim_train, splits.victim_test, splits.attacker_train, splits.attacker_valid)
    assert make_splits(dataset, sizes, seed=3) == splits
    assert make_splits(dataset, sizes, seed=4).victim_train != splits.victim_train
    assert sum(make_splits(dataset, SplitSizes(), seed=0).sizes().values()) == 600
    with pytest.raises(DataError, match="600 records"):
        make_splits(dataset, SplitSizes(victim_train=500, victim_test=200), seed=0)


# --- helpers ---------------------------------------------------------------------------------------

def test_equal_frequency_bins_and_rapt_bins() -> None:
    edges, labels = equal_frequency_bins(list(range(12)))
    assert edges == [0, 2, 4, 6, 8, 10, 11] and labels[0] == "0-1" and labels[-1] == "10-11"
    assert equal_frequency_bins([5] * 10) == ([5, 5], ["5-5"])  # ties collapse bins
    assert [rapt_age_bin(y) for y in (1955, 1956, 1963, 1964, 1985, 1986)] == [
        "born_<=1955", "born_1956-1963", "born_1956-1963", "born_1964-1971", "born_1979-1985", "born_>=1986"]


def test_tp_uk_jsonl_layout(tmp_path: Path) -> None:
    users = [{"user_id": str(i), "gender": "FM"[i % 2], "birth_year": 1950 + 3 * i,
              "reviews": [{"text": [f"Review {i} part one.", "Part two."], "rating": str(1 + i % 5),
                           "date": "2013-05-01T10:00:00.000+00:00", "title": "t"}]} for i in range(12)]
    no_gender = {"text": ["no gender"], "rating": "5", "date": "2013-01-01"}
    users.append({"user_id": "x", "gender": None, "birth_year": 1970, "reviews": [no_gender]})
    path = tmp_path / "tp_uk.jsonl"
    path.write_text("\n".join(json.dumps(u) for u in users) + "\n", encoding="utf-8")
    dataset = load_tp_uk_jsonl(path)
    assert len(dataset.records) == 12 and dataset.notes["skipped_reviews"] == 1
    first = dataset.records[0]
    assert first.text == "Review 0 part one.\nPart two." and first.label == 0
    assert dict(first.attributes) == {"gender": "female", "age": dataset.attribute_values["age"][-1],
                                      "age_rapt": "born_<=1955"}
    assert len(dataset.attribute_values["age"]) == 6 and dataset.notes["age_bin_edges"][-1] == 63
    (tmp_path / "trustpilot").mkdir()
    path.rename(tmp_path / "trustpilot" / "tp_uk.jsonl")
    assert len(load_dataset("tp_uk_raw", tmp_path).records) == 12


# --- real data -------------------------------------------------------------------------------------

def test_sst2() -> None:
    dataset = real("sst2", "sst2/train.tsv", "sst2/dev.tsv")
    assert dataset.notes["split_counts"] == {"train": 67349, "dev": 872}
    labels = collections.Counter((r.uid.split("/")[1], r.label) for r in dataset.records)
    assert labels == {("train", 0): 29780, ("train", 1): 37569, ("dev", 0): 428, ("dev", 1): 444}
    assert dataset.records[0].uid == "sst2/train/0"
    assert dataset.records[0].text == "hide new secretions from the parental units"
    assert dataset.label_names == ("negative", "positive")


def test_qqp() -> None:
    dataset = real("qqp", "qqp/dev.tsv", "qqp/test.tsv")
    assert dataset.notes["split_counts"] == {"dev": 10000, "test": 10000}
    assert collections.Counter(r.label for r in dataset.records) == {0: 10000, 1: 10000}
    first = dataset.records[0]
    assert (first.uid, first.text, first.text_pair) == (
        "qqp/dev/0", "How do I get funding for my web based startup idea ?", "How do I get seed funding pre product ?")
    assert all(r.text_pair for r in dataset.records)


def test_trustpilot_us() -> None:
    dataset = real("trustpilot", "trustpilot/tp_us_hovy2020/train.csv", "trustpilot/tp_us_hovy2020/test.csv")
    assert dataset.notes["split_counts"] == {"train": 4996, "test": 403}  # 8 empty train texts skipped
    assert not dataset.has_labels and dataset.attribute_values["gender"] == ("female", "male")
    gender = collections.Counter((r.uid.split("/")[1], r.attributes["gender"]) for r in dataset.records)
    assert gender[("test", "male")] == 201 and gender[("test", "female")] == 202
    assert len(dataset.attribute_values["age"]) == 6 and len(dataset.notes["age_bin_edges"]) == 7
    assert_roughly_equal_bins(dataset)


def test_trustpilot_uk_pos() -> None:
    dataset = real("trustpilot_uk", "trustpilot/tp_uk_pos")
    assert len(dataset.records) == 600 and sum(len(r.text.split()) for r in dataset.records) == 11279
    cells = collections.Counter((r.attributes["age"], r.attributes["gender"]) for r in dataset.records)
    assert set(cells.values()) == {150} and len(cells) == 4


def test_conll2003_counts_and_spans() -> None:
    dataset = real("conll2003", "conll2003/train.txt", "conll2003/valid.txt", "conll2003/test.txt")
    assert dataset.notes["split_counts"] == {"train": 14041, "valid": 3250, "test": 3453}
    tokens = collections.Counter()
    mentions = collections.Counter()
    for record in dataset.records:
        split = record.uid.split("/")[1]
        tokens[split] += len(record.text.split(" "))
        mentions.update((split, s.label) for s in record.entities)
    assert tokens == {"train": 203621, "valid": 51362, "test": 46435}
    assert [mentions[("train", t)] for t in ("PER", "LOC", "ORG", "MISC")] == [6600, 7140, 6321, 3438]
    assert [mentions[("valid", t)] for t in ("PER", "LOC", "ORG", "MISC")] == [1842, 1837, 1341, 922]
    assert [mentions[("test", t)] for t in ("PER", "LOC", "ORG", "MISC")] == [1617, 1668, 1661, 702]
    first, second = dataset.records[0], dataset.records[1]
    assert first.uid == "conll2003/train/0" and first.text == "EU rejects German call to boycott British lamb ."
    assert [(first.text[s.start:s.end], s.label) for s in first.entities] == [
        ("EU", "ORG"), ("German", "MISC"), ("British", "MISC")]
    assert [(second.text[s.start:s.end], s.label) for s in second.entities] == [("Peter Blackburn", "PER")]
    assert dataset.label_names == () and all(r.label is None for r in dataset.records[:100])


def test_blogs() -> None:
    dataset = real("blogs", "blog_authorship/msgs404u.csv", "blog_authorship/msgs100u.csv")
    assert len(dataset.records) == 2392 + 741 - 5 - 18 and dataset.notes["n_authors"] == 501
    assert set(dataset.attribute_values) == {"gender", "age"}  # the author is not a private attribute
    authors = dataset.notes["author_by_uid"]
    assert all(authors[r.uid] == r.uid.split("/")[1] for r in dataset.records)
    assert_roughly_equal_bins(dataset)


def test_wikitext2() -> None:
    dataset = real("wikitext2", "wikitext2/valid.txt", "wikitext2/test.txt")
    assert len(dataset.records) > 15000 and not dataset.has_labels
    # Headings (" = Title = ") are dropped; table legends such as "= National record" are text.
    assert all(r.text.strip() and not (r.text.startswith("= ") and r.text.endswith(" =")) for r in dataset.records)
    assert dataset.records[0].text.startswith("Homarus gammarus , known as the European lobster")


def test_fingerprints_are_stable() -> None:
    dataset = real("qqp", "qqp/dev.tsv", "qqp/test.tsv")
    root = Path(os.environ["RAPT_AUDIT_DATA"])
    assert DATASETS.get("qqp")(root).fingerprint == dataset.fingerprint
    assert dataset.fingerprint == fingerprint_files([root / "qqp/dev.tsv", root / "qqp/test.tsv"])
    tp = real("trustpilot", "trustpilot/tp_us_hovy2020/train.csv")
    assert DATASETS.get("trustpilot")(root).fingerprint == tp.fingerprint != dataset.fingerprint
