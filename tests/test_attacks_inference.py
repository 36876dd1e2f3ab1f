"""Attribute inference and NER extraction attacks: IOB helpers, scoring, sanity checks, bad input.

Everything runs on the synthetic corpus (planted attribute cues, gold PER/LOC/ORG spans) with the
smoke profile, except the last test, which needs the real data (``RAPT_AUDIT_DATA``).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

import rapt_audit.attacks.attribute as attribute
import rapt_audit.attacks.ner as ner
from rapt_audit.api.errors import DataError
from rapt_audit.api.types import AttackerData, Record, Release, Skip, Span
from rapt_audit.attacks._ner_tags import iob_labels, spans_to_tags, tags_to_entities, tags_to_spans, tokenize_words
from rapt_audit.data import SplitSizes, load_dataset, make_splits
from rapt_audit.pipeline.context import RunContext
from rapt_audit.scoring.classification import accuracy_estimate, label_scores, macro_f1


@pytest.fixture(scope="module", autouse=True)
def _one_torch_thread():
    # CI runners share their 2 cores: torch's spinning worker threads then made NER fine-tuning
    # steps 5-10x slower than one thread in our measurements. Restored after this module.
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def mctx(tmp_path_factory: pytest.TempPathFactory, seed_warm_cache) -> RunContext:
    # data_dir points at an empty folder so no test depends on (or silently uses) $RAPT_AUDIT_DATA; the cache holds
    # the session's embedding table (tests/conftest.py), built once a test run rather than here.
    empty = tmp_path_factory.mktemp("no-data")
    cache = seed_warm_cache(tmp_path_factory.mktemp("cache"))
    return RunContext(seed=11, profile="smoke", device="cpu", cache_dir=cache, data_dir=str(empty))


@pytest.fixture(scope="module")
def splits():
    return make_splits(load_dataset("synthetic"), SplitSizes(40, 150, 250, 100), seed=3)


@pytest.fixture(scope="module")
def identity(splits, mctx):
    from rapt_audit.defenses.identity import IdentityDefense

    return IdentityDefense().fit(splits.victim_train, ctx=mctx)


def _strip(records, *, entities=False, attributes=()):
    return tuple(dataclasses.replace(r, entities=() if entities else r.entities,
                                     attributes={k: v for k, v in r.attributes.items() if k not in attributes})
                 for r in records)


def _in_unit_interval(result) -> bool:
    p = result.empirical_privacy
    return 0.0 <= p.ci_low <= p.value <= p.ci_high <= 1.0


# --- IOB helpers ---------------------------------------------------------------------------------

def test_spans_tags_round_trip_on_conll_like_sentence():
    text = "U.S. envoy Peter Blackburn met EU and UN officials in New York ."
    spans = [Span(0, 4, "LOC"), Span(11, 26, "PER"), Span(31, 33, "ORG"), Span(38, 40, "ORG"), Span(54, 62, "LOC")]
    words = tokenize_words(text)
    assert [w.text for w in words[:4]] == ["U", ".", "S", "."]
    assert all(text[w.start:w.end] == w.text for w in words)
    tags = spans_to_tags(words, spans)
    assert tags == ["B-LOC", "I-LOC", "I-LOC", "I-LOC", "O", "B-PER", "I-PER", "O", "B-ORG", "O", "B-ORG",
                    "O", "O", "B-LOC", "I-LOC", "O"]
    assert tags_to_spans(words, tags) == spans
    # Adjacent entities of one type stay two entities: each starts with B-.
    adjacent = [Span(0, 2, "ORG"), Span(3, 5, "ORG")]
    assert tags_to_spans(tokenize_words("EU UN"), spans_to_tags(tokenize_words("EU UN"), adjacent)) == adjacent


def test_iob_reading_is_lenient_like_conlleval():
    assert tags_to_entities(["I-PER", "I-PER", "O", "B-LOC", "I-ORG"]) == [("PER", 0, 2), ("LOC", 3, 4), ("ORG", 4, 5)]
    assert iob_labels(["PER", "LOC", "PER"]) == ["O", "B-LOC", "I-LOC", "B-PER", "I-PER"]


def test_leaked_entity_needs_type_and_unchanged_surface():
    original = tokenize_words("Alice Smith moved to London")
    released = tokenize_words("alice jones moved at london")  # case is ignored; "Smith" was replaced
    predicted = ner.leaked_tags(original, released, ["B-PER", "I-PER", "O", "O", "B-LOC"])
    assert predicted == ["B-PER", "O", "O", "O", "B-LOC"]
    gold = [["B-PER", "I-PER", "O", "O", "B-LOC"]]
    scores = ner.score(gold, [predicted], rng=np.random.default_rng(0), resamples=10)
    # London leaks; the name does not (only half of its surface string survived).
    assert scores["entity_precision"].value == 0.5 and scores["entity_recall"].value == 0.5
    # A shifted release (one word inserted) is aligned, not compared position by position.
    shifted = tokenize_words("oh Alice Smith moved to London")
    assert ner.leaked_tags(original, shifted, ["O", "B-PER", "I-PER", "O", "O", "B-LOC"]) == gold[0]


def test_adaptive_training_tags_follow_the_alignment():
    # The adaptive attacker labels each released word with the tag of the original word it is
    # aligned with, replaced or not; released words with no original counterpart are O.
    original = tokenize_words("Alice Smith moved to London")
    released = tokenize_words("oh alice jones moved at paris")
    tags = ["B-PER", "I-PER", "O", "O", "B-LOC"]
    assert ner.carry_tags(original, released, tags) == ["O", "B-PER", "I-PER", "O", "O", "B-LOC"]


def test_score_agrees_with_seqeval():
    from seqeval.metrics import f1_score, precision_score, recall_score

    rng = np.random.default_rng(5)
    labels = iob_labels(["PER", "LOC"])
    gold = [list(rng.choice(labels, size=rng.integers(1, 12))) for _ in range(60)]
    pred = [[t if rng.random() < 0.7 else str(rng.choice(labels)) for t in g] for g in gold]
    scores = ner.score(gold, pred, rng=rng, resamples=50)
    assert scores["entity_f1"].value == pytest.approx(f1_score(gold, pred), abs=1e-12)
    assert scores["entity_precision"].value == pytest.approx(precision_score(gold, pred), abs=1e-12)
    assert scores["entity_recall"].value == pytest.approx(recall_score(gold, pred), abs=1e-12)


# --- NER attacks ---------------------------------------------------------------------------------

#: The clean NER classifier's training sentences: 12 steps of 8 over two epochs (80 took 20 steps, ~4 s more).
NER_SENTENCES = 48


@pytest.fixture(scope="module")
def ner_attack(splits, identity, mctx):
    # Smoke settings, on 48 sentences to keep the file fast (clean F1 0.75 here; 0.95 on 80 sentences).
    args = {**ner.NERAttack.profiles["smoke"], "max_train_sentences": NER_SENTENCES}
    return ner.NERAttack(**args).fit(splits.attacker, identity, ctx=mctx)


def test_the_clean_ner_classifier_is_trained_once_and_read_back_identical(ner_attack, splits, identity, mctx):
    # The same attack on the same data in the same cache (another cell of a sweep): no training, same tags.
    args = {**ner.NERAttack.profiles["smoke"], "max_train_sentences": NER_SENTENCES}
    again = ner.NERAttack(**args).fit(splits.attacker, identity, ctx=mctx)
    assert ner_attack._fit_details["model_from_cache"] is False and again._fit_details["model_from_cache"] is True
    texts = [r.text for r in splits.victim_test[:30]]
    words = [ner.tokenize_words(t) for t in texts]
    assert again.tag(texts, words, ctx=mctx) == ner_attack.tag(texts, words, ctx=mctx)
    # Other training settings are another classifier: trained, not read.
    other = ner.NERAttack(**{**args, "epochs": 1}).fit(splits.attacker, identity, ctx=mctx)
    assert other._fit_details["model_from_cache"] is False


def test_the_adaptive_ner_classifier_is_read_back_for_the_same_release_only(splits, mctx):
    # The adaptive attacker trains on the defense's release of its sentences: the same release (a re-run
    # of the cell) reads the classifier back with identical tags; another η releases other words: trained.
    from rapt_audit.defenses.t2t import T2TDefense

    # 24 sentences, 3 steps of 8: what is checked is which classifier is read back, not how well it tags.
    args = {**ner.AdaptiveNERAttack.profiles["smoke"], "max_train_sentences": 24, "epochs": 1}

    def fitted(eta: float) -> ner.AdaptiveNERAttack:
        defense = T2TDefense(eta=eta).fit(splits.victim_train, ctx=mctx)
        return ner.AdaptiveNERAttack(**args).fit(splits.attacker, defense, ctx=mctx)

    first, again, other = fitted(30.0), fitted(30.0), fitted(31.0)
    assert [a._fit_details["model_from_cache"] for a in (first, again, other)] == [False, True, False]
    texts = [r.text for r in splits.victim_test[:20]]
    words = [ner.tokenize_words(t) for t in texts]
    assert again.tag(texts, words, ctx=mctx) == first.tag(texts, words, ctx=mctx)


def test_ner_identity_release_scores_the_clean_f1(ner_attack, splits, identity, mctx):
    from seqeval.metrics import f1_score

    test = splits.victim_test
    result = ner_attack.attack(identity.release(test, ctx=mctx), test, ctx=mctx)
    # Clean F1 computed independently: the same tagger on the original words, against the gold tags.
    words = [tokenize_words(r.text) for r in test]
    clean = f1_score([spans_to_tags(w, r.entities) for w, r in zip(words, test)],
                     ner_attack.tag([r.text for r in test], words, ctx=mctx))
    assert result.metrics["entity_f1"].value == pytest.approx(clean, abs=1e-12)
    assert result.details["clean_entity_f1"]["value"] == pytest.approx(clean, abs=1e-12)
    assert result.details["silver_scored"] is False
    # Synthetic entities are 34 fixed strings in 3 templates: a tagger that learned anything finds
    # most of them; 0.5 sits far above an untrained head (0) and below this one (0.75 on 48 sentences; 0.95 on 80).
    assert clean > 0.5
    assert _in_unit_interval(result)
    assert result.empirical_privacy.value == pytest.approx(1 - clean)


def test_ner_changed_words_are_not_leaked(ner_attack, splits, mctx):
    # Replace every word of every gold entity: nothing can count as leaked, whatever the tagger says (on a
    # third of the test split, whose 50 records hold entities of each type: the rule holds record by record).
    test = splits.victim_test[:50]
    texts = []
    for r in test:
        text = r.text
        for span in sorted(r.entities, key=lambda s: -s.start):
            text = text[:span.start] + " ".join("zzz" for _ in text[span.start:span.end].split()) + text[span.end:]
        texts.append(text)
    result = ner_attack.attack(Release(uids=[r.uid for r in test], texts=texts), test, ctx=mctx)
    assert result.metrics["entity_recall"].value == 0.0
    assert result.empirical_privacy.value == 1.0


def test_a_tagger_that_finds_nothing_in_the_original_text_gives_no_reading_not_privacy(ner_attack, splits, mctx,
                                                                                    monkeypatch):
    """An attacker's tagger that learnt nothing (all O on clean text, as a collapsed fine-tuning gives) once read as
    privacy 1.000 on a release 97 % verbatim: it is skipped, saying why and what to change."""
    test = splits.victim_test[:50]
    texts = [r.text + " ." for r in test]  # not the text itself, so the clean ceiling is tagged apart
    monkeypatch.setattr(type(ner_attack), "tag", lambda self, texts, words, *, ctx: [["O"] * len(w) for w in words])
    monkeypatch.setattr(ner_attack, "_clean", {})
    with pytest.raises(Skip, match="finds none of the .* reference entities in the original victim text"):
        ner_attack.attack(Release(uids=[r.uid for r in test], texts=texts), test, ctx=mctx)


def test_ner_spacy_is_silver_scored_without_gold(splits, identity, mctx):
    # Without gold spans the reference is spaCy on the original text, so spaCy on the identity
    # release agrees with it exactly (F1 = 1 by construction).
    test = _strip(splits.victim_test, entities=True)
    attack = ner.SpacyNERAttack().fit(splits.attacker, identity, ctx=mctx)
    result = attack.attack(identity.release(test, ctx=mctx), test, ctx=mctx)
    assert result.details["silver_scored"] is True and "silver" in result.details["note"]
    assert result.metrics["entity_f1"].value == 1.0 and result.empirical_privacy.value == 0.0


def test_ner_skips_when_nothing_to_extract_or_train_on(splits, identity, mctx):
    plain = (Record("plain/0", "good product and fast delivery"), Record("plain/1", "it broke after a week"))
    attack = ner.SpacyNERAttack().fit(splits.attacker, identity, ctx=mctx)
    with pytest.raises(Skip, match="no silver"):
        attack.attack(identity.release(plain, ctx=mctx), plain, ctx=mctx)
    no_gold = AttackerData(_strip(splits.attacker_train, entities=True), splits.attacker_valid)
    with pytest.raises(Skip, match="gold entity spans.*CoNLL-2003 is unavailable"):
        ner.NERAttack().fit(no_gold, identity, ctx=mctx)


def test_ner_require_size(splits, identity, mctx):
    tiny = AttackerData(splits.attacker_train[:5], splits.attacker_valid)
    with pytest.raises(DataError, match="needs at least 20 attacker_train records but the attacker has 5"):
        ner.NERAttack().fit(tiny, identity, ctx=mctx)


# --- attribute inference -------------------------------------------------------------------------

@pytest.mark.parametrize("cls", [attribute.GenderInferenceAttack, attribute.AgeInferenceAttack])
def test_attribute_identity_beats_majority(cls, splits, identity, mctx):
    attack = cls(**cls.profiles["smoke"]).fit(splits.attacker, identity, ctx=mctx)
    result = attack.attack(identity.release(splits.victim_test, ctx=mctx), splits.victim_test, ctx=mctx)
    accuracy = result.metrics[f"attribute_accuracy.{attack.attribute}"]
    baseline = result.metrics[f"majority_baseline.{attack.attribute}"]
    # The synthetic author groups use their own cue words 75 % of the time: strong signal, so the
    # intervals must separate.
    assert accuracy.ci_low > baseline.ci_high
    advantage = result.metrics[f"attribute_advantage.{attack.attribute}"]
    assert advantage.value == pytest.approx(accuracy.value - baseline.value) and advantage.ci_low > 0
    # The headline is the chance-normalised privacy, RAPT's 1 − accuracy reported beside it.
    assert result.empirical_privacy == result.metrics[f"attribute_privacy.{attack.attribute}"]
    assert result.empirical_privacy.value == pytest.approx(1 - advantage.value / (1 - baseline.value))
    assert result.metrics[f"paper_privacy.{attack.attribute}"] == accuracy.complement()
    assert result.details["chosen_epoch"] <= attack.epochs and result.details["feature_kind"] == "texts"
    assert _in_unit_interval(result)


@pytest.mark.parametrize("cls", [attribute.GenderInferenceAttack, attribute.AgeInferenceAttack])
def test_attribute_on_random_labels_stays_at_majority(cls, splits, identity, mctx):
    # Permuting the attacker's labels breaks every link between text and attribute: the attacker
    # can only learn the marginal, so its accuracy must be statistically indistinguishable from
    # the majority baseline (the baseline lies inside the accuracy's 95 % interval).
    rng = np.random.default_rng(0)
    attr = cls.attribute

    def shuffled(records):
        values = [r.attributes[attr] for r in records]
        return tuple(dataclasses.replace(r, attributes={**r.attributes, attr: values[i]})
                     for r, i in zip(records, rng.permutation(len(records))))

    aux = AttackerData(shuffled(splits.attacker_train), shuffled(splits.attacker_valid))
    attack = cls(**cls.profiles["smoke"]).fit(aux, identity, ctx=mctx)
    result = attack.attack(identity.release(splits.victim_test, ctx=mctx), splits.victim_test, ctx=mctx)
    accuracy = result.metrics[f"attribute_accuracy.{attr}"]
    assert accuracy.ci_low <= result.metrics[f"majority_baseline.{attr}"].value <= accuracy.ci_high
    # On the chance-normalised scale no leak is 1, for gender and for six age bins alike.
    advantage = result.metrics[f"attribute_advantage.{attr}"]
    assert advantage.ci_low <= 0 <= advantage.ci_high and result.empirical_privacy.ci_high == 1.0
    assert _in_unit_interval(result)


def test_attribute_strong_noise_falls_toward_majority(splits, identity, mctx):
    from rapt_audit.defenses.t2t import T2TDefense

    cls = attribute.GenderInferenceAttack
    test = splits.victim_test
    clean = cls(**cls.profiles["smoke"]).fit(splits.attacker, identity, ctx=mctx).attack(
        identity.release(test, ctx=mctx), test, ctx=mctx)
    # eta = 1 on 384-d embeddings: noise norm ~ d / eta = 384, hundreds of times the distance
    # between words, so nearly every token is replaced by an unrelated one.
    noisy_defense = T2TDefense(eta=1.0).fit(splits.victim_train, ctx=mctx)
    noisy = cls(**cls.profiles["smoke"]).fit(splits.attacker, noisy_defense, ctx=mctx).attack(
        noisy_defense.release(test, ctx=mctx), test, ctx=mctx)
    accuracy, clean_accuracy = noisy.metrics["attribute_accuracy.gender"], clean.metrics["attribute_accuracy.gender"]
    baseline = noisy.metrics["majority_baseline.gender"]
    assert accuracy.value < clean_accuracy.ci_low
    assert accuracy.ci_low <= baseline.ci_high  # not distinguishable from (or below) the baseline
    assert noisy.empirical_privacy.value > clean.empirical_privacy.value and _in_unit_interval(noisy)


def test_macro_f1_matches_sklearn():
    from sklearn.metrics import f1_score

    rng = np.random.default_rng(2)
    y_true, y_pred = rng.integers(-1, 5, size=200), rng.integers(0, 4, size=200)  # -1: a value never seen
    expected = f1_score(y_true, y_pred, labels=list(range(6)), average="macro", zero_division=0)
    assert macro_f1(y_pred, y_true, n_classes=6) == pytest.approx(expected, abs=1e-12)


def test_accuracy_keeps_each_record_outcome_and_macro_f1_none():
    rng = np.random.default_rng(3)
    truth = rng.integers(0, 3, size=157)
    predicted = np.where(rng.random(157) < 0.7, truth, rng.integers(0, 3, size=157))
    est = accuracy_estimate(predicted, truth, rng=np.random.default_rng(0))
    parts = est.per_record
    assert parts is not None and len(parts) == 157
    assert parts.num == tuple((predicted == truth).astype(float)) and set(parts.den) == {1.0}
    assert sum(parts.num) / sum(parts.den) == est.value == np.mean(predicted == truth)
    scores = label_scores(predicted, truth, rng=np.random.default_rng(0))
    assert scores["accuracy"].per_record == parts  # the same outcomes through the utility entry point
    assert scores["macro_f1"].per_record is None  # not a ratio of per-record sums: nothing to pair


def test_attribute_skips_without_the_attribute(splits, identity, mctx):
    aux = AttackerData(_strip(splits.attacker_train, attributes=("age",)), splits.attacker_valid)
    with pytest.raises(Skip, match="no 'age' attribute"):
        attribute.AgeInferenceAttack().fit(aux, identity, ctx=mctx)
    attack = attribute.AgeInferenceAttack(epochs=1).fit(splits.attacker, identity, ctx=mctx)
    victims = _strip(splits.victim_test, attributes=("age",))
    with pytest.raises(Skip, match="victim records carry no 'age'"):
        attack.attack(identity.release(victims, ctx=mctx), victims, ctx=mctx)


def test_attribute_require_size(splits, identity, mctx):
    with pytest.raises(DataError, match="needs at least 20 attacker_train .* has 5"):
        attribute.GenderInferenceAttack().fit(AttackerData(splits.attacker_train[:5], splits.attacker_valid),
                                              identity, ctx=mctx)
    with pytest.raises(DataError, match="needs at least 10 attacker_valid .* has 3"):
        attribute.GenderInferenceAttack().fit(AttackerData(splits.attacker_train, splits.attacker_valid[:3]),
                                              identity, ctx=mctx)


def test_attacks_refuse_overlapping_victim_and_attacker(splits, identity, mctx):
    attack = attribute.GenderInferenceAttack(epochs=1).fit(splits.attacker, identity, ctx=mctx)
    leaked = splits.attacker_train[:3] + splits.victim_test[:3]
    with pytest.raises(AssertionError, match="also in the attacker's data"):
        attack.attack(identity.release(leaked, ctx=mctx), leaked, ctx=mctx)


# --- real data -----------------------------------------------------------------------------------

def test_ner_spacy_on_conll_has_sensible_clean_f1(data_dir, mctx):
    # spaCy's small model scores about 0.6-0.7 entity F1 on CoNLL-2003 with mapped labels (OntoNotes
    # and CoNLL disagree on MISC and on GPE adjectives); a scoring bug gives ~0 or exactly 1.
    from rapt_audit.defenses.identity import IdentityDefense

    ctx = dataclasses.replace(mctx, data_dir=str(data_dir), _memo=mctx._memo)
    parts = make_splits(load_dataset("conll2003", data_dir), SplitSizes(50, 300, 50, 50), seed=1)
    defense = IdentityDefense().fit(parts.victim_train, ctx=ctx)
    result = ner.SpacyNERAttack().fit(parts.attacker, defense, ctx=ctx).attack(
        defense.release(parts.victim_test, ctx=ctx), parts.victim_test, ctx=ctx)
    assert 0.4 < result.metrics["entity_f1"].value < 0.9 and not result.details["silver_scored"]
    assert math.isfinite(result.empirical_privacy.ci_low)
