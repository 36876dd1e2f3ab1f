"""``rapt-audit privatize`` and ``rapt_audit.privatize``: the user's side, its layouts and its bad input."""

from __future__ import annotations

import json

import pytest

import rapt_audit
from rapt_audit.api.errors import UsageError
from rapt_audit.cli import main
from rapt_audit.user_side.privatizer import Privatizer, segments_of

TEXTS = ["My landlord John Smith in Boston raised the rent again.",
         "I take my medication every morning before work.",
         "",
         "She called her doctor about the test results, twice."]


def _write(path, lines):
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def _run(*argv):
    return main(["privatize", *map(str, argv), "--quiet"])


def test_pct2t_at_eta_inf_is_the_identity_and_counts_categories(tmp_path):
    src, out = _write(tmp_path / "in.txt", TEXTS), tmp_path / "out.txt"
    assert _run(src, "--defense", "pct2t", "--set", "eta=inf", "--out", out) == 0
    assert out.read_text(encoding="utf-8").splitlines() == TEXTS
    record = json.loads((tmp_path / "out.txt.privatize.json").read_text(encoding="utf-8"))
    units = record["units"]
    assert record["eta"] == "inf" and record["records"] == len(TEXTS) and record["release_kind"] == "texts"
    assert units["replaced"] == 0 and units["perturbed"] > 0 and units["passed"] > 0
    assert set(units["by_category"]) >= {"noun", "verb", "pronoun", "preposition", "determiner"}
    assert sum(c["perturbed"] for c in units["by_category"].values()) == units["perturbed"]
    assert sum(c["passed"] for c in units["by_category"].values()) == units["passed"]
    assert units["by_category"]["determiner"]["perturbed"] == 0  # not a selected category: sent in the clear
    assert len(record["model_fingerprint"]) == 64


def test_t2t_output_is_seeded_and_noisy(tmp_path):
    src = _write(tmp_path / "in.txt", TEXTS * 3)
    outs = {}
    for name, seed in (("a", 1), ("b", 1), ("c", 2)):
        outs[name] = tmp_path / f"{name}.txt"
        assert _run(src, "--defense", "t2t", "--set", "eta=40", "--seed", seed, "--out", outs[name]) == 0
    a, b, c = (outs[n].read_text(encoding="utf-8") for n in "abc")
    assert a == b and a != c
    assert len(a.splitlines()) == len(TEXTS) * 3
    record = json.loads((tmp_path / "a.txt.privatize.json").read_text(encoding="utf-8"))
    assert record["units"]["replaced"] > record["units"]["perturbed"] // 2  # eta 40: most tokens change
    assert record["units"]["passed"] == 0  # T2T privatizes every token


def test_jsonl_keeps_other_fields_and_names_a_missing_field(tmp_path, capsys):
    src = tmp_path / "in.jsonl"
    src.write_text("\n".join(json.dumps({"id": i, "body": t}) for i, t in enumerate(TEXTS)) + "\n", encoding="utf-8")
    out = tmp_path / "out.jsonl"
    assert _run(src, "--field", "body", "--defense", "t2t", "--set", "eta=inf", "--out", out) == 0
    rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert [r["id"] for r in rows] == list(range(len(TEXTS)))
    assert rows[0]["body"].lower() == TEXTS[0].lower()
    assert _run(src, "--defense", "t2t", "--out", tmp_path / "bad.jsonl") == 2
    err = capsys.readouterr().err
    assert "no field 'text'" in err and "'id', 'body'" in err and "--field" in err
    assert not (tmp_path / "bad.jsonl").exists()


def test_csv_replaces_one_column_and_names_a_missing_one(tmp_path, capsys):
    src = tmp_path / "in.csv"
    src.write_text('id,review\n1,"Great food, rude staff."\n2,Slow delivery\n', encoding="utf-8")
    out = tmp_path / "out.csv"
    assert _run(src, "--field", "review", "--defense", "pct2t", "--set", "eta=inf", "--out", out) == 0
    assert out.read_text(encoding="utf-8") == 'id,review\n1,"Great food, rude staff."\n2,Slow delivery\n'
    assert _run(src, "--field", "body", "--defense", "pct2t", "--out", out) == 2
    assert "no column 'body'" in capsys.readouterr().err
    assert out.read_text(encoding="utf-8").startswith("id,review")  # the earlier output is untouched


def test_invalid_utf8_names_the_byte_and_replace_goes_on(tmp_path, capsys):
    src = tmp_path / "in.txt"
    src.write_bytes(b"fine line\nbad \xff byte\n")
    assert _run(src, "--defense", "t2t", "--set", "eta=inf", "--out", tmp_path / "o.txt") == 2
    err = capsys.readouterr().err
    assert "byte 14 (line 2)" in err and "--errors replace" in err
    assert _run(src, "--defense", "t2t", "--set", "eta=inf", "--errors", "replace", "--out", tmp_path / "o.txt") == 0
    assert len((tmp_path / "o.txt").read_text(encoding="utf-8").splitlines()) == 2


def test_empty_input_gives_empty_output(tmp_path):
    src, out = tmp_path / "empty.txt", tmp_path / "out.txt"
    src.write_bytes(b"")
    assert _run(src, "--defense", "t2t", "--out", out) == 0
    assert out.read_bytes() == b""
    assert json.loads((tmp_path / "out.txt.privatize.json").read_text(encoding="utf-8"))["records"] == 0


def test_bad_parameters_and_layouts_are_usage_errors(tmp_path, capsys):
    src = _write(tmp_path / "in.txt", TEXTS)
    assert _run(src, "--defense", "t2t", "--set", "eta=-1") == 2
    assert "eta" in capsys.readouterr().err
    assert _run(src, "--defense", "t2t", "--set", "eta") == 2
    assert "KEY=VALUE" in capsys.readouterr().err
    assert _run(src, "--field", "body") == 2
    assert "--format" in capsys.readouterr().err
    assert _run(tmp_path / "missing.txt") == 2
    assert "no such file" in capsys.readouterr().err


def test_a_long_line_is_privatized_in_segments():
    text = " ".join(["word"] * 200)
    assert "".join(segments_of(text, 50)).replace(" ", "") == text.replace(" ", "")
    assert all(len(piece) <= 50 for piece in segments_of(text, 50))
    privatizer = Privatizer("t2t", {"eta": "inf"}, max_segment=50)
    [out] = privatizer.stream([text])
    assert out == text and privatizer.segments > 1 and privatizer.records == 1


def test_python_function_and_embedding_release():
    outputs, record = rapt_audit.privatize(TEXTS[:2], "embedding", eta=100, seed=3)
    assert record["release_kind"] == "token_embeddings" and record["records"] == 2
    assert all(len(vector) == 384 for vector in outputs[0]) and len(outputs[0]) >= 10
    again, _ = rapt_audit.privatize(TEXTS[:2], "embedding", eta=100, seed=3)
    assert again == outputs


def test_a_defense_trained_by_the_service_is_refused_clearly():
    with pytest.raises(UsageError, match="cannot privatize on the user's side alone"):
        rapt_audit.privatize(TEXTS[:1], "cape")


@pytest.mark.slow
def test_a_10_mb_line_streams_in_bounded_memory(tmp_path):
    """The issue's bad-input case: one 10 MB line goes through in segments, without a memory blow-up."""
    from tests.benchmarks.test_bench_privatize import _peak_rss_mb

    src, out = tmp_path / "big.txt", tmp_path / "out.txt"
    words = "the tenant paid the rent to the landlord in london ".split()
    src.write_text(" ".join(words * (10_000_000 // 52)) + "\n", encoding="utf-8")
    peak_mb = _peak_rss_mb("privatize", str(src), "--defense", "t2t", "--set", "eta=inf", "--out", str(out), "--quiet")
    assert out.read_text(encoding="utf-8").split() == src.read_text(encoding="utf-8").split()
    assert peak_mb < 1500, peak_mb  # the model's tables and torch take ~600 MB; the line's text ~100 MB


def test_identity_and_sequence_defenses_on_the_users_side():
    outputs, record = rapt_audit.privatize(TEXTS + ["call 555 0100 200"], "identity")
    assert outputs == TEXTS + ["call 555 0100 200"] and record["units"]["passed"] == sum(len(t.split()) for t in outputs)
    assert record["sensitive_strings_verbatim"]["phone"] == {"found": 1, "verbatim": 1, "verbatim_share": 1.0}
    vectors, record = rapt_audit.privatize(TEXTS[:2], "dpnr", epsilon=5, seed=1)
    assert record["release_kind"] == "sequence_embeddings" and record["epsilon"] == 5.0 and record["eta"] is None
    assert [len(v) for v in vectors] == [384, 384] and vectors[0] != vectors[1]


def test_a_word_mechanisms_record_and_summary_give_the_epsilon_in_force(tmp_path, capsys, monkeypatch,
                                                                         session_cache_with_lexicon):
    """ε as the releases use it, as a dχ defense's calibrated η is given: the declared ε, or the ε calibrated for
    ``replacement`` (here fixed, as if calibrated, so the test does not pay for a calibration)."""
    from rapt_audit.defenses._word_mechanism import WordMechanismDefense

    _, record = rapt_audit.privatize(TEXTS[:1], "santext", epsilon=12.5, seed=1)
    assert record["epsilon"] == 12.5 and record["eta"] is None
    monkeypatch.setattr(WordMechanismDefense, "effective_epsilon", lambda self, ctx: 7.5)
    src, out = _write(tmp_path / "in.txt", TEXTS[:2]), tmp_path / "out.txt"
    assert main(["privatize", str(src), "--defense", "santext", "--set", "replacement=0.4", "--out", str(out)]) == 0
    record = json.loads((tmp_path / "out.txt.privatize.json").read_text(encoding="utf-8"))
    assert record["epsilon"] == 7.5 and record["params"]["replacement"] == 0.4  # not the declared ε (15)
    assert "with santext (epsilon 7.5, seed 0)" in capsys.readouterr().err
