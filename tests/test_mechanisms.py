"""T2T, PCT2T and token-embedding privatization on the real bundled model.

Property checks from the mechanism issue: replacement probability falls with η and is exactly 0
at η = ∞; PCT2T keeps every word's POS category and never touches unselected words; special tokens
are never emitted; empty and unknown input follow the documented policies; bad η fails clearly.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from rapt_audit.api.errors import DataError, UnknownNameError, UsageError
from rapt_audit.api.params import make_plugin
from rapt_audit.api.plugins import DEFENSES, load
from rapt_audit.api.types import Record
from rapt_audit.pipeline.context import RunContext

load()

SENTENCES = [
    "She booked a flight to Paris with her brother on Monday.",
    "The manager at Acme Corp refused my refund and I am furious.",
    "I loved this charming little cafe near the river.",
    "We walked from the station to the museum in the rain.",
    "He told me that the doctor had moved to London last year.",
    "Our team sold twelve bikes before lunch.",
] * 5


@pytest.fixture(scope="module")
def mctx(tmp_path_factory, seed_pos_cache) -> RunContext:
    """One context for the module, so the model, tables and tagger load once (the session's tables and
    POS lexicon seeded in: tests/conftest.py)."""
    return RunContext(seed=3, profile="smoke", device="cpu", cache_dir=seed_pos_cache(tmp_path_factory.mktemp("cache")))


def _defense(name: str, **args):
    return make_plugin(DEFENSES, name, args)


def _records(texts):
    return [Record(uid=f"t/{i}", text=t, label=i % 2) for i, t in enumerate(texts)]


@pytest.mark.parametrize("name", ["t2t", "pct2t", "embedding"])
def test_replacement_falls_with_eta_and_is_zero_at_infinity(name, mctx):
    defense = _defense(name)
    rates, units = [], []
    for eta in (10.0, 100.0, 200.0, math.inf):
        count = defense.replacement_count(SENTENCES, eta=eta, rng=np.random.default_rng(0), ctx=mctx)
        rates.append(count.rate)
        units.append(count.perturbed)
    # Each rate is a share of n independent units (200+ here): its standard error is at most sqrt(0.25/n),
    # that of a difference of two at most sqrt(0.5/n). A fall must exceed 5 of those; "no rise" allows 3.
    se = math.sqrt(0.5 / min(units))
    assert rates[-1] == 0.0
    assert rates[0] > 0.9  # eta = 10 on 384-d MiniLM: noise norm ~38, far beyond word spacing
    assert rates[0] - rates[1] > 5 * se, rates  # eta = 100: noise norm ~3.8, most units kept (10 - 15 % replaced)
    assert rates[2] <= rates[1] + 3 * se, rates  # at eta = 200 T2T keeps every token; PCT2T keeps its ~10 % floor


def test_t2t_never_emits_special_tokens(mctx):
    from rapt_audit.mechanisms.engines import token_engine

    engine = token_engine(mctx)
    texts = ["[CLS] hello [SEP] [MASK] world [PAD] 🎉 ☃ naïve"] * 20
    out, rows, _ = engine.privatize_texts(texts, eta=20.0, rng=np.random.default_rng(1))
    emitted = set(engine.space.token_ids[np.concatenate(rows)].tolist())
    assert not emitted & set(engine.space.excluded_ids)
    for text in out:
        for special in ("[CLS]", "[SEP]", "[MASK]", "[PAD]", "[UNK]", "[unused"):
            assert special not in text


def test_unknown_input_policies(mctx):
    from rapt_audit.mechanisms.engines import token_engine

    engine = token_engine(mctx)
    text = ["party 🎉 time"]
    kept, rows, _ = engine.privatize_texts(text, eta=1e4, rng=np.random.default_rng(2), unk_policy="privatize")
    assert len(rows[0]) == 3 and "[UNK]" not in kept[0]  # the emoji became a regular token
    dropped, rows, _ = engine.privatize_texts(text, eta=1e4, rng=np.random.default_rng(2), unk_policy="drop")
    assert len(rows[0]) == 2 and dropped[0] == "party time"  # eta 1e4: words survive, the emoji is gone
    with pytest.raises(DataError, match="outside the regular vocabulary"):
        engine.privatize_texts(text, eta=100.0, rng=np.random.default_rng(2), unk_policy="error")


def test_empty_text_gives_empty_release(mctx):
    for name in ("t2t", "pct2t", "embedding"):
        defense = _defense(name).fit(_records(["a b"]), ctx=mctx)
        release = defense.release([Record(uid="e/0", text="")], ctx=mctx)
        if release.texts is not None:
            assert release.texts == ("",)
        else:
            assert release.token_embeddings[0].shape == (0, 384)


def test_pct2t_keeps_categories_and_leaves_other_words_alone(mctx):
    from rapt_audit.mechanisms.engines import pos_candidates
    from rapt_audit.mechanisms.pos import category_of

    defense = _defense("pct2t", categories="noun,verb")
    tagged, released, count = defense.privatize_words(SENTENCES, eta=50.0, rng=np.random.default_rng(4), ctx=mctx)
    assert count.rate > 0.5
    words = pos_candidates(mctx).words
    lexicon = {cat: {words[r] for r in rows} for cat, rows in pos_candidates(mctx).groups.items()}
    perturbed = 0
    for sentence, words in zip(tagged, released):
        assert len(sentence) == len(words)  # one released word per input word
        for word, new in zip(sentence, words):
            category = category_of(word.upos)
            if category in ("noun", "verb"):
                assert new in lexicon[category], (word.text, new, category)  # same POS category
                perturbed += 1
            else:
                assert new == word.text  # words outside the selection are never touched
    assert perturbed == count.perturbed
    texts, _ = defense.privatize(SENTENCES[:1], eta=50.0, rng=np.random.default_rng(4), ctx=mctx)
    assert texts[0].endswith(".")  # punctuation and spacing survive


def test_release_is_seeded_and_distinct_per_record_set(mctx):
    defense = _defense("t2t", eta=60.0).fit(_records(SENTENCES[:4]), ctx=mctx)
    a = defense.release(_records(SENTENCES[:6]), ctx=mctx)
    b = _defense("t2t", eta=60.0).fit(_records(SENTENCES[:4]), ctx=mctx).release(_records(SENTENCES[:6]), ctx=mctx)
    assert a.texts == b.texts
    other = RunContext(seed=4, profile="smoke", device="cpu", cache_dir=mctx.cache_dir)
    c = _defense("t2t", eta=60.0).fit(_records(SENTENCES[:4]), ctx=other).release(_records(SENTENCES[:6]), ctx=other)
    assert a.texts != c.texts


@pytest.mark.parametrize("bad", ["0", "-1", "nan", "-inf", "abc", "1e-310"])
def test_bad_eta_is_a_usage_error(bad):
    with pytest.raises(UsageError, match="eta"):
        make_plugin(DEFENSES, "t2t", {"eta": bad})


def test_unknown_pos_category_lists_valid_ones():
    with pytest.raises(UnknownNameError, match="Did you mean 'noun'.*Valid POS category names"):
        make_plugin(DEFENSES, "pct2t", {"categories": "nuon,verb"})


def test_replacement_target_is_met(mctx, monkeypatch):
    from rapt_audit.data import public
    from rapt_audit.data.public import public_corpus

    # Half the smoke profile's calibration sentences (about 2,500 units): each step of the search privatizes them
    # all again, and a rate's standard error there (0.01) is still a fifth of the tolerance below.
    monkeypatch.setitem(public.CALIBRATION_SENTENCES, "smoke", public.CALIBRATION_SENTENCES["smoke"] // 2)
    defense = _defense("t2t", replacement=0.5)
    eta = defense.effective_eta(mctx)
    assert 30 < eta < 400
    _, texts = public_corpus(mctx)
    assert len(texts) == public.CALIBRATION_SENTENCES["smoke"]  # the search and the check read the smaller corpus
    check = defense.replacement_count(texts, eta=eta, rng=np.random.default_rng(99), ctx=mctx)
    assert abs(check.rate - 0.5) < 0.05  # fresh noise: within sampling error of the target


def test_calibrate_command_table_and_json(capsys, monkeypatch):
    import json

    from rapt_audit.cli import main
    from rapt_audit.data import public

    monkeypatch.delenv("RAPT_AUDIT_DATA", raising=False)
    # Half the smoke profile's calibration sentences: each η privatizes them all (what is checked is the forms and
    # the order of rates far apart, at η 25 and 175; test_replacement_target_is_met, above, does the same).
    monkeypatch.setitem(public.CALIBRATION_SENTENCES, "smoke", public.CALIBRATION_SENTENCES["smoke"] // 2)
    assert main(["calibrate", "--defense", "t2t", "--eta", "175", "--profile", "smoke"]) == 0  # the table's form
    table = capsys.readouterr().out
    assert "corpus synthetic" in table and "RAPT Tab. III" in table and "175" in table
    assert main(["calibrate", "--defense", "t2t", "--eta", "25,175,inf", "--profile", "smoke",
                 "--format", "json", "--deniability"]) == 0
    doc = json.loads(capsys.readouterr().out)
    rates = [row["replacement"]["value"] for row in doc["rows"]]
    assert rates[0] > rates[1] and rates[2] == 0.0
    assert doc["rows"][0]["rapt_table_iii_bert_base"] == 0.94
    low, high = doc["deniability"]  # eta 25 and 175: more noise, fewer self-outputs, more distinct outputs
    assert low["n_w_mean"] < high["n_w_mean"] and low["s_w_mean"] > high["s_w_mean"]
    assert main(["calibrate", "--defense", "t2t", "--eta", "0"]) == 2
    assert "eta must be" in capsys.readouterr().err


def test_lexicon_puts_a_word_in_every_category_public_text_tags_it_with():
    """A word joins its isolated tag's category and each one public text tags it with twice or more (issue #28)."""
    from rapt_audit.mechanisms.pos import PUBLIC_MIN_COUNT, load_tagger, vocabulary_lexicon

    public = ["We drove to the city .", "She walked to the park .", "The run was long ."]
    assert PUBLIC_MIN_COUNT == 2  # the sentences above are written for it
    lexicon = vocabulary_lexicon(load_tagger, ["to", "run", "city"], public_text=lambda: public)
    alone = vocabulary_lexicon(load_tagger, ["to", "run", "city"])
    assert "to" not in alone["preposition"]  # alone, "to" is the infinitive particle
    assert "to" in lexicon["preposition"]  # "drove to the city", twice
    assert {w for words in alone.values() for w in words} <= {w for words in lexicon.values() for w in words}
    assert "run" not in lexicon["noun"]  # tagged a noun once only: one tagging may be the tagger's error
    assert "city" in lexicon["noun"]


def test_lexicon_adds_public_words_the_vocabulary_holds_only_as_pieces():
    """Words held as sub-word pieces join from public text (twice in a category) and spaCy's string table
    (tagged alone), where ``admit`` accepts them; the vocabulary's words come first (issue #28)."""
    from rapt_audit.mechanisms.pos import load_tagger, vocabulary_lexicon

    public = ["The screenwriters met the city .", "Two screenwriters left the city ."]
    lexicon = vocabulary_lexicon(load_tagger, ["city"], public_text=lambda: public,
                                 public_words=lambda: ["Filmmakers", "xqzt", "naïveté", "42"],
                                 admit=lambda words: [w != "xqzt" for w in words])
    assert lexicon["noun"][0] == "city"
    assert {"screenwriters", "filmmakers"} <= set(lexicon["noun"])  # public text; the string table, normalised
    assert "xqzt" not in {w for words in lexicon.values() for w in words}  # refused by admit
    assert "42" not in {w for words in lexicon.values() for w in words}  # not a word of letters
    without = vocabulary_lexicon(load_tagger, ["city"], public_text=lambda: public)
    assert "screenwriters" not in without["noun"]  # nothing admits words outside the vocabulary


def test_the_string_table_is_the_models_not_the_words_the_process_has_met():
    """spaCy's live string table takes in every word it tokenizes (a text being privatized too); the lexicon
    reads the table the model ships, so its candidates stay a fixed public set."""
    from rapt_audit.mechanisms.pos import load_tagger, model_strings

    nlp = load_tagger()
    nlp.tokenizer("my neighbour qwzxplorification called")
    assert "qwzxplorification" in nlp.vocab.strings
    shipped = model_strings(nlp)
    assert "qwzxplorification" not in shipped and "screenwriters" in shipped


def test_pct2t_gives_back_a_word_held_only_as_pieces_when_the_noise_vanishes(mctx):
    """"screenwriters" is two MiniLM pieces; PCT2T's lexicon holds it (spaCy's string table), so at a huge η it
    comes back unchanged, embedded as the mean of its pieces on both sides (RAPT Eq. 2)."""
    from rapt_audit.encoder.vocab import embedding_space
    from rapt_audit.mechanisms.engines import pos_candidates

    assert "screenwriters" not in embedding_space(mctx).tokens
    candidates = pos_candidates(mctx)
    assert "screenwriters" in {candidates.words[r] for r in candidates.groups["noun"].tolist()}
    tagged, released, count = _defense("pct2t").privatize_words(["The screenwriters met the critics ."], eta=1e9,
                                                                rng=np.random.default_rng(0), ctx=mctx)
    assert "screenwriters" in released[0] and count.forced == count.replaced == 0


def test_pct2t_replaces_only_words_no_candidate_equals_when_the_noise_vanishes(mctx):
    """At a huge η PCT2T's replacements are exactly its forced ones; a preposition "to" is no longer one of them."""
    defense = _defense("pct2t")
    tagged, released, count = defense.privatize_words(SENTENCES, eta=1e9, rng=np.random.default_rng(0), ctx=mctx)
    assert count.replaced == count.forced
    assert sum(c["forced"] for c in count.by_category.values()) == count.forced
    to_as_preposition = [(word.text, new) for sentence, words in zip(tagged, released)
                         for word, new in zip(sentence, words) if word.text == "to" and word.upos == "ADP"]
    assert to_as_preposition and all(new == "to" for _, new in to_as_preposition)
    assert count.forced < 0.1 * count.perturbed  # the sentences' selected words are vocabulary words, but for names
    infinite = defense.replacement_count(SENTENCES, eta=math.inf, rng=np.random.default_rng(0), ctx=mctx)
    assert infinite.replaced == infinite.forced == 0


def test_a_target_below_the_forced_floor_is_refused_naming_the_floor():
    from rapt_audit.mechanisms.calibration import ReplacementCount, find_eta

    def counter(eta, rng):  # a mechanism whose every finite-eta release replaces the 8 forced units of 100
        return ReplacementCount(perturbed=100, replaced=8 + int(100 / eta), forced=8)

    assert 8 / 100 < 0.2 and find_eta(counter, 0.2, seed=0) > 1  # above the floor: found
    with pytest.raises(UsageError, match=r"8\.0% of the calibration units have no candidate"):
        find_eta(counter, 0.05, seed=0)


def test_the_eta_search_stops_where_the_measurement_cannot_tell_its_bracket_apart():
    """Bisection ends once the bracket's two rates lie within one standard error of a rate at the target: few
    passes on a small corpus, all of them on a large one, and the rate found is within that error either way."""
    import math

    from rapt_audit.mechanisms.calibration import ReplacementCount, find_eta

    def search(units):
        etas = []

        def counter(eta, rng):  # replacement falls smoothly with eta: rate = 1 / (1 + eta / 50)
            etas.append(eta)
            return ReplacementCount(perturbed=units, replaced=round(units / (1 + eta / 50)))

        eta = find_eta(counter, 0.3, seed=0)
        return etas, 1 / (1 + eta / 50), math.sqrt(0.3 * 0.7 / units)

    small, rate, error = search(400)
    assert abs(rate - 0.3) < error and len(small) <= 8 and len(set(small)) == len(small)  # no point measured twice
    large, rate, error = search(10 ** 7)
    assert abs(rate - 0.3) < 0.002 and len(large) > len(small) + 4


def test_a_calibration_row_gives_the_replacement_of_held_units_beside_the_forced_share():
    """The held units' curve is the replaced share once the forced units are taken out: 0 where only they change."""
    from rapt_audit.mechanisms.calibration import ReplacementCount, replacement_probability

    def counter(eta, rng):  # 8 of 100 units forced; of the other 92, 100/eta replaced
        return ReplacementCount(perturbed=100, replaced=8 + int(100 / eta) if math.isfinite(eta) else 0,
                                forced=8 if math.isfinite(eta) else 0)

    row = replacement_probability(counter, 10.0, seed=0).to_dict()
    assert row["replacement"]["value"] == 0.18 and row["forced"]["value"] == 0.08
    assert row["replacement_of_held_units"]["value"] == pytest.approx(10 / 92)
    assert replacement_probability(counter, 1e9, seed=0).to_dict()["replacement_of_held_units"]["value"] == 0.0
    assert replacement_probability(counter, math.inf, seed=0).to_dict()["replacement_of_held_units"] is None
