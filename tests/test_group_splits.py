"""Issue #61: a run's four parts are disjoint by group, and no victim-test record lies inside another part's."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rapt_audit.api.types import Record
from rapt_audit.data import Dataset, SplitSizeError, SplitSizes, load_dataset, make_splits
from rapt_audit.data import overlap
from rapt_audit.data.overlap import group_key, inside, whole_texts
from rapt_audit.pipeline.config import profile_split_sizes
from rapt_audit.pipeline.context import derive_seed
from tests.test_data import FIRST_FILE, real

PARTS = ("victim_train", "victim_test", "attacker_train", "attacker_valid")


def grouped(groups: list[int | None]) -> Dataset:
    """One record per entry, its group the entry (None: its own group), every text distinct and whole."""
    return Dataset("grouped", tuple(Record(uid=f"r{i}", text=f"text{i}", group=None if g is None else f"g{g}")
                                    for i, g in enumerate(groups)))


def owner_parts(splits) -> dict[tuple[bool, str], set[str]]:
    parts: dict[tuple[bool, str], set[str]] = {}
    for name in PARTS:
        for record in getattr(splits, name):
            parts.setdefault(group_key(record), set()).add(name)
    return parts


sizes_strategy = st.one_of(st.none(), st.integers(1, 12))


@settings(max_examples=200, deadline=None)
@given(groups=st.lists(st.one_of(st.none(), st.integers(0, 8)), min_size=8, max_size=60),
       sizes=st.tuples(sizes_strategy, sizes_strategy, sizes_strategy, st.one_of(st.none(), st.integers(0, 12))),
       seed=st.integers(0, 2**32 - 1))
def test_a_group_never_straddles_parts(groups: list[int | None], sizes: tuple, seed: int) -> None:
    dataset = grouped(groups)
    try:
        splits = make_splits(dataset, SplitSizes(*sizes), seed=seed)
    except SplitSizeError:
        return  # sizes beyond the dataset: refused with the one line, nothing to check
    except Exception as err:  # an empty part is refused too (DataError); anything else is a bug
        assert "is empty; give it a positive size" in str(err)
        return
    assert all(len(p) == 1 for p in owner_parts(splits).values())
    for name, size in zip(PARTS, sizes):
        if size is not None:
            assert len(getattr(splits, name)) <= size
    assert splits == make_splits(dataset, SplitSizes(*sizes), seed=seed)  # the seed decides everything


def test_one_record_groups_keep_the_row_cut() -> None:
    """With every record its own group, the cut is the old row cut: a seeded permutation, parts in order."""
    import numpy as np

    dataset = grouped([None] * 40)
    order = np.random.default_rng(7).permutation(40)
    splits = make_splits(dataset, SplitSizes(10, 5, 10, 5), seed=7)
    cut = [dataset.records[i] for i in order]
    assert splits.victim_train + splits.victim_test + splits.attacker_train + splits.attacker_valid == tuple(cut[:30])
    even = make_splits(dataset, SplitSizes(), seed=7)
    assert even.sizes() == dict.fromkeys(PARTS, 10) and even.victim_train == tuple(cut[:10])


def test_overflowing_group_is_cut_and_the_rest_left_out() -> None:
    dataset = grouped([0] * 6 + [None] * 20)
    splits = make_splits(dataset, SplitSizes(4, 4, 4, 4), seed=0)
    assert splits.sizes() == dict.fromkeys(PARTS, 4)
    assert all(len(p) == 1 for p in owner_parts(splits).values())


def test_victim_test_holds_whole_texts_of_one_group_only() -> None:
    records = (Record("a", "the film is good", group="s1"), Record("b", "the film", group="s1"),
               Record("c", "a good film", group="s2"), Record("d", "a good film", group="s3"),
               Record("e", "bad", group="s4"))
    assert overlap.testable_uids(records) == {"a", "e"}
    wholes, first = whole_texts(r.text for r in records)
    assert wholes == ["the film is good", "a good film", "bad"] and first["the film"] == 0
    with pytest.raises(SplitSizeError, match="data.victim_test"):
        make_splits(Dataset("tiny", records), SplitSizes(1, 3, 1, 0), seed=0)


def test_whole_texts_long_and_short_agree() -> None:
    """Texts longer than the window limit are searched as strings; the answer is the same."""
    long = " ".join(f"w{i}" for i in range(100))
    texts = [long, "w3 w4 w5", "w3 w4", "w99", "w9", "x w3"]
    wholes, first = whole_texts(texts)
    assert wholes == [long, "x w3"] and first["w3 w4"] == 0 and first["w9"] == 0
    assert inside([Record("v", "w9")], [Record("o", long)]) == [True]
    assert inside([Record("v", "w")], [Record("o", long)]) == [False]  # whole words only


def test_user_file_names_its_group(tmp_path) -> None:
    path = tmp_path / "rows.csv"
    path.write_text("text,author\n" + "".join(f"post {i},a{i % 5}\n" for i in range(40)), encoding="utf-8")
    dataset = load_dataset(str(path), columns={"group": "author"})
    assert dataset.records[3].group == "a3" and dataset.notes["columns"]["group"] == "author"
    assert dataset.fingerprint != load_dataset(str(path)).fingerprint  # the mapping is in the fingerprint
    splits = make_splits(dataset, SplitSizes(16, 8, 8, 8), seed=1)
    assert all(len(p) == 1 for p in owner_parts(splits).values())


BUILT_IN = ("sst2", "qqp", "conll2003", "trustpilot", "trustpilot_uk", "blogs", "wikitext2")


@pytest.mark.parametrize("name", ("synthetic", *BUILT_IN))
def test_no_victim_test_record_inside_another_part(name: str) -> None:
    """Counted as scripts/sst2_overlap.py counts it, at the smoke and cpu profiles, two seeds each."""
    dataset = load_dataset(name) if name == "synthetic" else real(name, FIRST_FILE[name])
    for profile in ("smoke", "cpu"):
        for seed in (0, 1):
            sizes = profile_split_sizes(profile, len(dataset.records), {})
            splits = make_splits(dataset, SplitSizes(**sizes), seed=derive_seed(seed, "splits"))
            others = splits.victim_train + splits.attacker_train + splits.attacker_valid
            assert sum(inside(splits.victim_test, others)) == 0, (name, profile, seed)
            assert all(len(p) == 1 for p in owner_parts(splits).values())


def test_sst2_paper_profile_tests_whole_sentences_only() -> None:
    dataset = real("sst2", FIRST_FILE["sst2"])
    sizes = profile_split_sizes("paper", len(dataset.records), {})
    splits = make_splits(dataset, SplitSizes(**sizes), seed=derive_seed(0, "splits"))
    others = splits.victim_train + splits.attacker_train + splits.attacker_valid
    assert sum(inside(splits.victim_test, others)) == 0
    assert all(r.text == r.group for r in splits.victim_test)  # a whole sentence is its own group's name
    assert len({r.group for r in dataset.records}) == 7754
    assert len(splits.victim_test) == 7754 // 4
