"""Hostile text: each defense privatizes it, or refuses it with a rapt-audit error that names the problem and the fix.

The inputs are what a user's files and a dataset's records really hold now and then: nothing,
whitespace, NUL and other C0/C1 controls, bidirectional overrides, zero-width characters, emoji
(ZWJ sequences, skin tones), right-to-left and mixed scripts, combining marks, noncharacters,
special-token strings, a 100,000-character "word" and, in the slow tests, a 100,000-word text.
Lone surrogates (a Python ``str`` can hold one; UTF-8 cannot) must be refused by name, never
reach spaCy or the tokenizer. Token-embedding defenses (embedding, snd) are left out of the
100,000-word memory check: what they release for one text is about 384 floats per token, held as
Python lists (several GB for such a text), so their memory grows with the output by design.
"""

from __future__ import annotations

import json
from itertools import cycle, islice

import pytest

from rapt_audit.api.errors import DataError, UsageError
from rapt_audit.api.types import Record
from rapt_audit.cli import main
from rapt_audit.user_side.privatizer import Privatizer
from tests.benchmarks.test_bench_privatize import _peak_rss_mb

C0 = "".join(chr(c) for c in range(0x20) if chr(c) not in "\t\n\r")
C1 = "".join(chr(c) for c in range(0x7F, 0xA0))
HOSTILE = {
    "empty": "",
    "whitespace only": "   \t ",
    "NUL": "\x00",
    "NUL inside a word": "a\x00b",
    "C0 controls": f"rent{C0}due",
    "C1 controls": f"rent{C1}due",
    "controls only": C0 + C1,
    "line separators": "my rent\x0bis\x0cdue\u2028now\u2029ok\x85",
    "bidi override": "\u202eevil\u202c",
    "zero-width": "a\u200db\u200c\u200bc\ufeff\u2060",
    "emoji": "I 😀 love 🍕 🏳️\u200d🌈 👍🏽 👨\u200d👩\u200d👧\u200d👦",
    "emoji only": "😀🍕👍🏽",
    "arabic": "مرحبا بالعالم أنا أحمد من القاهرة",
    "hebrew": "שלום עולם, אני דוד מתל אביב",
    "mixed scripts": "東京 Tokyo नमस्ते मेरा नाम राम है John 123 Москва",
    "combining marks": "e\u0301le\u0300ve Z\u0336\u0335a\u0300\u0301\u0302l\u0303g\u0304o\u0305",
    "combining marks only": "\u0301\u0300\u0302",
    "noncharacters": "a\uffff\ufffeb\U0010ffff \ue000",
    "special-token strings": "[CLS] [SEP] [MASK] [PAD] [UNK] <s></s> ##ing",
    "100,000-character word": "x" * 100_000,
}
SURROGATES = {"lone high surrogate": "abc \ud800 def", "lone low surrogate": "\udfff"}
#: The defenses the user's side supports, at noisy settings (CAPE is refused there; see below).
USER_SIDE = {
    "t2t": ("t2t", {"eta": 50}),
    "t2t word": ("t2t", {"eta": 50, "unit": "word"}),
    "t2t drop": ("t2t", {"eta": 50, "unk_policy": "drop"}),
    "pct2t": ("pct2t", {"eta": 50}),
    "rapt": ("rapt", {"eta": 50}),
    "embedding": ("embedding", {"eta": 50}),
    "snd": ("snd", {"eta": 50}),
    "dpnr": ("dpnr", {"epsilon": 5}),
    "identity": ("identity", {}),
}


@pytest.mark.parametrize("setting", USER_SIDE)
def test_the_users_side_privatizes_hostile_text(setting, session_cache_with_lexicon):
    name, params = USER_SIDE[setting]
    privatizer = Privatizer(name, params, seed=1)
    for label, text in HOSTILE.items():
        [out] = privatizer.privatize([text])
        if privatizer.kind == "texts":
            assert isinstance(out, str), label
            out.encode("utf-8")  # writable as it is
        elif privatizer.kind == "token_embeddings":
            assert all(len(vector) == 384 for vector in out), label
        else:
            assert len(out) == 384 and all(abs(v) < 1e6 for v in out), label  # one vector per text, even empty
        if not text and privatizer.kind != "sequence_embeddings":
            assert out in ("", []), f"{label}: {out!r}"  # nothing in, nothing out
    for label, text in SURROGATES.items():
        with pytest.raises(DataError, match=r"text \d+ holds a lone surrogate U\+D[89A-F][0-9A-F]{2} at character") as err:
            privatizer.privatize(["fine", text])
        assert "U+FFFD" in str(err.value), label


def test_a_defense_trained_by_the_service_refuses_hostile_text_the_same_clear_way():
    privatizer = Privatizer("cape")
    for label in ("empty", "NUL", "emoji", "100,000-character word"):
        with pytest.raises(UsageError, match="cape cannot privatize on the user's side alone.*privatize supports"):
            privatizer.privatize([HOSTILE[label]])


def test_hostile_lines_keep_their_place_in_a_file(tmp_path):
    """One output line per input line, whatever the line holds (only ``\\n`` ends a line)."""
    lines = [text for text in HOSTILE.values() if "\n" not in text and "\r" not in text]
    src, out = tmp_path / "in.txt", tmp_path / "out.txt"
    src.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    assert main(["privatize", str(src), "--defense", "pct2t", "--set", "eta=50", "--out", str(out), "--quiet"]) == 0
    released = out.read_text(encoding="utf-8").split("\n")
    assert len(released) == len(lines) + 1 and released[0] == "" and released[-1] == ""


def test_a_json_lone_surrogate_escape_is_named_or_replaced(tmp_path, capsys):
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    src.write_text('{"id": "\\ud83d\\ude00", "text": "fine"}\n{"id": 2, "text": "a \\ud800 b"}\n', encoding="utf-8")
    argv = ["privatize", str(src), "--defense", "identity", "--out", str(out), "--quiet"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "line 2 holds a lone surrogate escape (\\ud800)" in err and "--errors replace" in err
    assert not out.exists()
    assert main([*argv, "--errors", "replace"]) == 0
    rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert rows == [{"id": "😀", "text": "fine"}, {"id": 2, "text": "a \ufffd b"}]  # a valid pair is an emoji


@pytest.mark.parametrize("name", ["t2t", "pct2t"])
def test_an_audit_release_of_hostile_records(name):
    """The run's ``defense.release`` on hostile records: texts and the verbatim accounting, or a DataError naming the record."""
    from rapt_audit.api.params import make_plugin
    from rapt_audit.api.plugins import DEFENSES, load
    from rapt_audit.pipeline.context import RunContext, default_cache_dir

    load()
    ctx = RunContext(seed=7, profile="smoke", cache_dir=default_cache_dir())  # the tables the tests above built
    defense = make_plugin(DEFENSES, name, {"eta": 50})
    records = [Record(uid=f"hostile-{i}", text=text) for i, text in enumerate(HOSTILE.values())]
    release = defense.release(records, ctx=ctx)
    assert len(release.texts) == len(records) and all(isinstance(t, str) for t in release.texts)
    assert release.texts[0] == "" and release.meta["verbatim"]["units"] > 0 and "entities" in release.meta["verbatim"]
    with pytest.raises(DataError, match="record 'bad' holds a lone surrogate U\\+D800 at character 2"):
        defense.release([records[3], Record(uid="bad", text="x \ud800")], ctx=ctx)


#: Words of the 100,000-word text: every hostile kind that fits in a word of a one-line file.
WORDS = ["rent", "😀", "東京", "नमस्ते", "مرحبا", "a\x00b", "\u202eevil\u202c", "e\u0301le\u0300ve", "John", "42",
         "👨\u200d👩\u200d👧", "שלום", "\x85x", "Boston", "[MASK]", "x" * 300, "\x1b[31m"]


@pytest.mark.slow
@pytest.mark.parametrize("defense, params", [("t2t", {"eta": 50}), ("pct2t", {"eta": 50}), ("rapt", {"eta": 50}),
                                             ("identity", {}), ("dpnr", {})])
def test_a_100k_word_hostile_text_in_flat_memory(tmp_path, defense, params):
    """Peak memory of privatizing a 10,000-word and a 100,000-word hostile line (text defenses stream it in segments)."""
    Privatizer(defense, params).privatize(["warm"])  # the on-disk tables, so that neither run measures building them
    sets = [arg for key, value in params.items() for arg in ("--set", f"{key}={value}")]
    peaks = {}
    for n in (10_000, 100_000):
        src, out = tmp_path / f"{n}.txt", tmp_path / f"{n}.out"
        src.write_text(" ".join(islice(cycle(WORDS), n)) + "\n", encoding="utf-8")
        peaks[n] = _peak_rss_mb("privatize", str(src), "--defense", defense, *sets, "--out", str(out), "--quiet")
        assert len(out.read_text(encoding="utf-8").split("\n")) == 2  # one line out
    print(f"{defense}: peak RSS 10k words {peaks[10_000]:.0f} MB, 100k words {peaks[100_000]:.0f} MB")
    assert peaks[100_000] < peaks[10_000] + 100, peaks  # ten times the input, not ten times the memory


@pytest.mark.parametrize("defense", ["embedding", "snd"])
def test_a_100k_word_text_is_refused_by_the_token_vector_defenses_with_the_way_out(defense):
    """One vector of 384 numbers per token would make a 100,000-word text an output line of hundreds of MB."""
    text = " ".join(islice(cycle(WORDS), 100_000))
    with pytest.raises(DataError, match=r"text 1 has [\d,]+ characters; .* Split it into lines of at most 100,000"):
        Privatizer(defense, {}).privatize(["a short text is fine", text])


def test_the_first_tokens_of_a_long_text_are_those_of_the_whole_text():
    """Pooled encoders tokenize only a whole-word prefix of a long text (flat memory); the ids must not change."""
    import numpy as np

    from rapt_audit.encoder.encode import token_id_lists
    from rapt_audit.pipeline.context import RunContext

    ctx = RunContext(profile="smoke")
    rng = np.random.default_rng(0)
    words = WORDS + ["\x00", "\u200b", "don't", "U.S.", "e-mail@x.org"]
    texts = ["", "   ", "\x00 \u200b " * 300 + "end", "hello world",
             *(" ".join(rng.choice(words, size=n)) for n in (5, 126, 127, 300, 5000))]
    tokenizer = ctx.encoder().tokenizer
    for text, got in zip(texts, token_id_lists(ctx, texts, limit=126)):
        assert got.tolist() == tokenizer(text, add_special_tokens=False)["input_ids"][:126], text[:40]
