"""What text defenses release verbatim: unchanged units by category and entity type, sensitive strings and
named entities that go through as they were."""

from __future__ import annotations

import pytest

import rapt_audit
from rapt_audit.mechanisms import verbatim
from rapt_audit.mechanisms.calibration import ReplacementCount
from rapt_audit.mechanisms.verbatim import (
    describe_verbatim,
    entity_strings,
    sensitive_strings,
    verbatim_summary,
)

TEXT = "Call Ann on +44 20 7946 0958 or mail ann.lee@example.org about room 42, see www.example.org/x"


def test_summary_counts_units_and_sensitive_strings():
    count = ReplacementCount(perturbed=10, replaced=4, passed=5)
    count.count_category("noun", perturbed=10, replaced=4)
    count.count_category("numeral", passed=5)
    released = "call bob on +44 20 7946 0958 or mail someone about room 42 see elsewhere"
    summary = verbatim_summary([TEXT], [released], count)
    assert summary["units"] == 15 and summary["units_unchanged"] == 11
    assert summary["unchanged_share_by_category"] == {"noun": 0.6, "numeral": 1.0}
    sensitive = summary["sensitive_strings"]
    assert (sensitive["phone"]["found"], sensitive["phone"]["verbatim"]) == (1, 1)
    assert (sensitive["email"]["found"], sensitive["email"]["verbatim"]) == (1, 0)
    assert (sensitive["url"]["found"], sensitive["url"]["verbatim"]) == (1, 0)
    assert (sensitive["number"]["found"], sensitive["number"]["verbatim"]) == (1, 1)  # 42; the phone's digits are taken
    assert "1 of 1 phone" in describe_verbatim(summary) and "0 of 1 email" in describe_verbatim(summary)


def test_strings_match_as_words_whatever_the_spacing_and_case():
    """A tokenizer's re-spacing still leaks the string; a digit run inside a longer number is not the number."""
    counts = sensitive_strings(["mail ann.lee@example.org, room 42, id AB12345, ref 77XY"],
                               ["mail ANN. lee @ example. org, room 420, ab12345, ref 77"])
    assert counts["email"]["verbatim"] == 1
    assert counts["number"] == {"found": 3, "verbatim": 1, "verbatim_share": 1 / 3}  # a digit run counts with its word


def test_hostile_records_are_counted_right():
    """A 30,000-character word, 10,000 e-mails and phone numbers in one record (the speed of the same at
    100,000 is a benchmark: tests/benchmarks/test_bench_mechanisms.py)."""
    many = " ".join(f"n{i} {i * 7} x.y{i}@mail.org" for i in range(10_000))
    counts = sensitive_strings(["x" * 30_000, "ab" + "12x" * 10_000, many], ["x" * 30_000, "", many])
    assert counts["email"]["verbatim"] == counts["email"]["found"] == 10_000, counts
    assert counts["phone"]["verbatim"] + counts["number"]["verbatim"] > 10_000, counts


def test_an_email_match_starts_only_where_its_run_of_characters_starts():
    """What keeps the e-mail search linear: tried from inside a run of e-mail characters, the pattern fails
    at once. Without the look-behind each of a 100,000-character word's positions scans to its end."""
    email = verbatim.SENSITIVE["email"]
    text = "mail ab.cd+ef@mail.org now"
    start = text.index("ab")
    assert email.match(text, start).group() == "ab.cd+ef@mail.org"
    assert [email.match(text, i) for i in range(start + 1, text.index("@"))] == [None] * 7


def test_a_lookup_compares_only_at_its_rarest_word(monkeypatch):
    """Counted work: finding a string in a release compares word lists only where the string's rarest word
    occurs, so a record of n words costs n comparisons, not n² (searching from a frequent first word, or a
    substring search per string, is quadratic: 8 s for the 30,000 numbers of a 100,000-word text)."""
    compared = []

    class Counted(list):
        def __getitem__(self, index):
            if isinstance(index, slice):
                compared.append(index)
            return super().__getitem__(index)

    n = 2_000
    release = verbatim._Release(" ".join(f"the n{i}" for i in range(n)))  # "the" n times, each n{i} once
    monkeypatch.setattr(release, "words", Counted(release.words))
    assert all(release.holds(f"the n{i}") for i in range(n))
    assert not release.holds("n1 n2") and not release.holds("absent the")
    assert len(compared) == n + 1  # one comparison per string found; none for a word that never occurs


def test_entities_count_by_type_with_their_words():
    entities = [[("PERSON", "Ann Lee"), ("GPE", "Boston"), ("PERSON", "Ann Lee"), ("DATE", "3 May")],
                [("PERSON", "Bob"), ("ORG", "#")]]
    released = ["ann lee moved to paris on 3 june", "bob called"]
    by_type = entity_strings(entities, released)
    assert by_type["PERSON"] == {"found": 2, "verbatim": 2, "verbatim_share": 1.0, "words": 3, "words_unchanged": 3}
    assert by_type["GPE"]["verbatim"] == 0 and by_type["DATE"] == {
        "found": 1, "verbatim": 0, "verbatim_share": 0.0, "words": 2, "words_unchanged": 1}  # "3" went through
    assert by_type["ORG"]["found"] == 0  # no word to look for
    summary = verbatim_summary(["x", "y"], released, ReplacementCount(perturbed=4, replaced=2), entities=entities)
    assert summary["unchanged_share_by_entity"] == {"DATE": 0.5, "GPE": 0.0, "PERSON": 1.0}
    assert "2 of 4 named entities verbatim (PERSON 2 of 2)" in describe_verbatim(summary)


def test_spacy_finds_the_entities_with_the_taggers_pipeline():
    from rapt_audit.mechanisms.pos import entity_mentions, load_tagger

    nlp = load_tagger()
    mentions = entity_mentions(nlp, ["John Smith moved to Boston in May 2021 and joined Google.", "", "\x00 😀"])
    assert {("PERSON", "John Smith"), ("GPE", "Boston"), ("ORG", "Google")} <= set(mentions[0])
    assert mentions[1:] == [[], []]
    assert nlp("John Smith lives in Boston").ents == ()  # tagging does not pay for the NER


def test_dropped_and_passed_units_are_counted():
    """unk_policy=drop removes units (counted, and not unchanged); PCT2T passes an emoji it tags PUNCT in the clear."""
    _, dropped = rapt_audit.privatize(["I love 😀 pizza 👍🏽"], "t2t", eta=50, unk_policy="drop", seed=1)
    assert dropped["units"]["dropped"] == 2
    count = ReplacementCount(perturbed=3, replaced=3, dropped=2)
    assert verbatim_summary(["a"], ["b"], count)["units"] == 5
    passed, record = rapt_audit.privatize(["I love 👍 pizza"], "pct2t", eta=50, seed=1)
    assert "👍" in passed[0] and record["units"]["by_category"]["punctuation"]["passed"] == 1


def test_privatize_reports_what_went_through():
    kept, record = rapt_audit.privatize([TEXT], "pct2t", eta="inf")
    assert kept == [TEXT]
    assert all(c["verbatim"] == c["found"] == 1 for c in record["sensitive_strings_verbatim"].values())
    _, noisy = rapt_audit.privatize([TEXT] * 5, "t2t", eta=1, seed=1)
    counts = noisy["sensitive_strings_verbatim"]
    assert counts["number"]["found"] == 5 and counts["number"]["verbatim"] < 5  # eta = 1 replaces almost every token


@pytest.mark.usefixtures("_pos_template")  # PCT2T's lexicon joins `ctx`'s cache folder (tests/conftest.py)
def test_text_release_records_the_verbatim_summary(ctx, synthetic_splits):
    from rapt_audit.api.params import make_plugin
    from rapt_audit.api.plugins import DEFENSES, load

    load()
    defense = make_plugin(DEFENSES, "pct2t", {"eta": "inf"}).fit(synthetic_splits.victim_train, ctx=ctx)
    verbatim = defense.release(synthetic_splits.victim_test, ctx=ctx).meta["verbatim"]
    assert verbatim["units_unchanged_share"] == 1.0 and verbatim["units"] > 100
    assert set(verbatim["unchanged_share_by_category"]) >= {"noun", "verb", "determiner"}
    assert verbatim["entities"]["PERSON"]["found"] > 10 and all(c["verbatim_share"] == 1.0 for c in verbatim["entities"].values())
    assert set(verbatim["unchanged_share_by_entity"].values()) == {1.0}
    noisy = make_plugin(DEFENSES, "pct2t", {"eta": 1}).fit(synthetic_splits.victim_train, ctx=ctx)
    leaked = noisy.release(synthetic_splits.victim_test[:15], ctx=ctx).meta["verbatim"]
    assert leaked["entities"]["PERSON"]["verbatim_share"] < 0.5 and leaked["unchanged_share_by_entity"]["PERSON"] < 0.5


def test_report_shows_the_unchanged_share():
    from pathlib import Path

    from rapt_audit.reporting.collect import Collection, Loaded
    from rapt_audit.reporting.report import build_report
    from tests.result_factory import fake_result

    plain = fake_result(eta=25)
    assert "released unchanged" not in build_report(Collection(results=[Loaded(Path("a"), plain)])).html
    text = fake_result(eta=75)
    text.defense["release_meta"]["verbatim"] = {"units_unchanged_share": 0.8125, "entities": {
        "PERSON": {"found": 10, "verbatim": 7}, "GPE": {"found": 5, "verbatim": 5}}}
    page = build_report(Collection(results=[Loaded(Path("a"), plain), Loaded(Path("b"), text)])).html
    assert "released unchanged" in page and "81.2 %" in page and "—" in page
    assert "named entities 12 of 15" in page
