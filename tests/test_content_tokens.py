"""The content-token unit of the inversion attacks (issue #39, item 1): tokens, F1, the prior, the paired privacy.

Hand-made sets where the answer is known: perfect guesses leak everything, the prior's own guesses
nothing; stop words, punctuation and sub-word splits do not change a record's tokens; F1 is a ratio of sums
over records; the privacy's interval resamples the attack and the prior on the same records.
"""

from __future__ import annotations

import numpy as np
import pytest

from rapt_audit.api.types import AttackerData, Record
from rapt_audit.scoring.content_tokens import (
    STOP_WORDS,
    ContentPrior,
    content_scores,
    content_tokens,
    fit_prior,
    join_pieces,
)

#: Heterogeneous records: some hold many content words, some one; the prior guesses the frequent ones.
TRUTHS = [frozenset(t.split()) for t in ("film plot actor", "film", "plot music", "actor music scene story",
                                         "film story", "scene", "music", "film plot actor scene story music")]
PRIOR = ContentPrior(("film", "music", "plot", "actor", "scene", "story"), 2, 0.5)


def scores(guesses, truths=TRUTHS, prior=PRIOR, seed=0):
    return content_scores(guesses, truths, prior, rng=np.random.default_rng(seed))


def test_perfect_guesses_have_no_privacy():
    out = scores(TRUTHS)
    privacy, f1 = out["content_privacy"], out["content_f1"]
    assert (privacy.value, privacy.ci_low, privacy.ci_high) == (0.0, 0.0, 0.0)
    assert f1.value == 1.0 and out["content_precision"].value == out["content_recall"].value == 1.0
    assert privacy.method == "paired-bootstrap-percentile"


def test_the_priors_own_guesses_have_full_privacy():
    out = scores([PRIOR.guess()] * len(TRUTHS))
    privacy = out["content_privacy"]
    # Paired: every resample scores the attack and the prior on the same records, so they tie every time.
    assert (privacy.value, privacy.ci_low, privacy.ci_high) == (1.0, 1.0, 1.0)
    assert out["content_f1"].value == out["content_prior_f1"].value


def test_doing_worse_than_the_prior_is_clipped_at_full_privacy():
    out = scores([frozenset({"nothing"})] * len(TRUTHS))
    assert out["content_f1"].value == 0.0
    assert (out["content_privacy"].value, out["content_privacy"].ci_low) == (1.0, 1.0)
    assert out["content_privacy"].per_record is None  # a clipped value is no ratio of the records' parts


def test_stop_words_and_punctuation_do_not_count():
    assert content_tokens("The film, isn't it?! -- a ... (very) MOVING film.") == {"film", "moving"}
    assert content_tokens("it was the and of , . !") == frozenset()
    assert {"the", "isn", "t", "s", "n"} <= STOP_WORDS
    # A guess made only of stop words and punctuation guesses nothing.
    assert scores([content_tokens("the , of and .")] * len(TRUTHS))["content_f1"].value == 0.0


def test_a_tokenizers_split_gives_the_same_tokens_as_the_text():
    # What BERT's uncased WordPiece makes of a sentence, joined back: the same content tokens as the text.
    text = "It's an unbelievable café-scene, doesn't it? 1,000 times_over"
    pieces = ["it", "'", "s", "an", "un", "##bel", "##ie", "##vable", "cafe", "-", "scene", ",", "doesn", "'", "t",
              "it", "?", "1", ",", "000", "times", "_", "over"]
    assert content_tokens(join_pieces(pieces)) == content_tokens(text) == {"unbelievable", "cafe", "scene", "1",
                                                                            "000", "times"}


def test_wordpiece_pieces_merge_onto_the_token_before():
    assert join_pieces(["un", "##believ", "##able", "film"]) == "unbelievable film"
    # A continuation after a position without a guess belongs to a word not guessed: dropped.
    assert join_pieces(["un", None, "##able", "film"]) == "un film"
    assert join_pieces(["##ing", "plot"]) == "plot"
    # The vocabulary's own rule where given (SentencePiece: ▁ starts a word, the rest continue).
    assert join_pieces(["▁un", "believ", "able", "▁film"], [False, True, True, False]) == "unbelievable film"


def test_f1_is_a_ratio_of_sums_over_records():
    truths = [frozenset("a1 b1 c1 d1".split()), frozenset({"e1"})]
    guesses = [frozenset({"a1", "b1"}), frozenset({"x1", "y1", "z1"})]
    out = scores(guesses, truths, ContentPrior(("a1",), 1, 0.0))
    # Σ hits = 2, Σ |guess| = 5, Σ |truth| = 5: F1 = 2·2 / (5 + 5) = 0.4. The mean of the records' own F1
    # would be (2·2/6 + 0) / 2 = 1/3.
    assert out["content_f1"].value == pytest.approx(0.4)
    assert out["content_precision"].value == pytest.approx(2 / 5)
    assert out["content_recall"].value == pytest.approx(2 / 5)
    assert out["content_f1"].per_record.num == (4.0, 0.0) and out["content_f1"].per_record.den == (6.0, 4.0)
    # The prior guesses {a1}: F1 = 2·1 / (2 + 5) = 2/7; privacy = 1 − (0.4 − 2/7) / (1 − 2/7) = 0.84.
    assert out["content_prior_f1"].value == pytest.approx(2 / 7)
    assert out["content_privacy"].value == pytest.approx(1 - (0.4 - 2 / 7) / (1 - 2 / 7))


def test_privacy_interval_is_paired():
    # Half the records are the prior's own two words (the prior gets them all), half six rare words of which
    # the attack adds two to the prior's guess: a steady gain on records of very different difficulty. A
    # paired resample draws the same records for the attack and the prior, so how many easy records it drew
    # cancels; resampling them independently (unpaired) does not, and its interval is many times wider.
    guess = PRIOR.guess()
    truths, guesses = [], []
    for i in range(40):
        rare = frozenset(f"w{i}x{j}" for j in range(6))
        truths.append(guess if i % 2 else rare)
        guesses.append(guess if i % 2 else guess | set(sorted(rare)[:2]))
    paired = scores(guesses, truths)["content_privacy"]
    counts = np.array([[len(g & t), len(g), len(t)] for g, t in zip(guesses, truths)], float)
    prior_counts = np.array([[len(guess & t), len(guess), len(t)] for t in truths], float)
    rng = np.random.default_rng(1)

    def f1(c, idx):
        return 2 * c[idx, 0].sum() / (c[idx, 1].sum() + c[idx, 2].sum())

    unpaired = []
    for _ in range(1000):
        a, b = rng.integers(0, len(truths), len(truths)), rng.integers(0, len(truths), len(truths))
        unpaired.append(min(1.0, (1 - f1(counts, a)) / (1 - f1(prior_counts, b))))
    low, high = np.quantile(unpaired, [0.025, 0.975])
    assert paired.ci_low <= paired.value <= paired.ci_high < 1.0
    assert (high - low) > 3 * (paired.ci_high - paired.ci_low), (paired, low, high)


def test_unclipped_privacy_keeps_per_record_parts_that_give_its_value():
    guesses = [t if i % 2 else PRIOR.guess() for i, t in enumerate(TRUTHS)]
    privacy = scores(guesses)["content_privacy"]
    assert 0.0 < privacy.value < 1.0
    assert privacy.per_record is not None and len(privacy.per_record) == len(TRUTHS)
    assert privacy.per_record.value == pytest.approx(privacy.value, abs=1e-12)


def records(prefix, texts):
    return tuple(Record(f"{prefix}/{i}", text) for i, text in enumerate(texts))


def test_the_prior_ranks_train_words_and_chooses_k_on_valid():
    train = records("train", ["alpha beta gamma delta", "alpha beta gamma", "alpha beta", "alpha"])
    narrow = fit_prior(AttackerData(train, records("valid", ["alpha", "the alpha", "alpha."])))
    wide = fit_prior(AttackerData(train, records("valid", ["alpha beta gamma", "gamma beta alpha"])))
    assert narrow.ranked == wide.ranked == ("alpha", "beta", "gamma", "delta")
    assert (narrow.k, wide.k) == (1, 3)
    assert narrow.valid_f1 == wide.valid_f1 == 1.0
    assert narrow.guess() == {"alpha"}
    # Without validation records, k is chosen on the attacker's training texts (still never victim data).
    assert fit_prior(AttackerData(train, ())).k >= 1


def test_records_without_content_words_give_nothing_to_score():
    assert scores([frozenset()] * 2, [frozenset()] * 2) == {}
    with pytest.raises(ValueError, match="guessed sets"):
        scores([frozenset()], TRUTHS)
