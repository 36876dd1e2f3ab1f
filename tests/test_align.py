"""Alignment of original and released units."""

from rapt_audit.mechanisms.align import align, aligned_pairs


def test_equal_length_is_positional():
    assert align(["a", "b", "c"], ["x", "b", "y"]) == [0, 1, 2]


def test_unequal_length_pairs_matching_blocks():
    # "un ##bel" merged into one released word: the shared tail still aligns.
    original = ["it", "is", "un", "##bel", "good"]
    released = ["it", "is", "unbel", "good"]
    assert align(original, released) == [0, 1, 2, None, 3]
    assert aligned_pairs(original, released) == [(0, 0), (1, 1), (2, 2), (4, 3)]


def test_empty_inputs():
    assert align([], ["a"]) == [] and align(["a"], []) == [None]
