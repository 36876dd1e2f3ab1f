"""Content-token recovery: one unit for inversion attacks on every release kind (issue #39, item 1).

A record's *content tokens* are the set of its words (:func:`words`, lower-cased, accents folded, split
at apostrophes and underscores) minus a fixed public stop list and punctuation. An inversion attack
guesses such a set for every victim record; it is scored by set F1 as a ratio of sums over records,
``F1 = 2·Σ hits / (Σ |guess| + Σ |truth|)``, with records as the bootstrap unit.

The score is chance-normalised against the release-ignoring *prior* attacker (:func:`fit_prior`): it
guesses, for every record, the k content tokens found in most of the attacker's training texts, k chosen
on the attacker's validation texts. Content privacy = ``1 − (F1 − F1_prior) / (1 − F1_prior)`` clipped to
[0, 1]: 1 when the attack does no better than the prior, 0 when it recovers every content token
(:func:`content_scores`). Whatever the release kind (texts, token vectors, sentence vectors), attacks are
then read on one scale.
"""

from __future__ import annotations

import dataclasses
import re
import unicodedata
from collections import Counter
from dataclasses import dataclass
from typing import Callable, Iterable, Sequence

import numpy as np

from rapt_audit.api.types import AttackerData, Estimate, PerRecord, Record
from rapt_audit.scoring.metrics import metric
from rapt_audit.scoring.stats import bootstrap_mean, bootstrap_statistic

metric("content_f1", "attack", False, "set F1 of the attacker's guessed content words against each record's "
       "content words (stop words and punctuation out), 2·Σ hits / (Σ |guess| + Σ |truth|) over records")
metric("content_precision", "attack", False, "fraction of the attacker's guessed content words that are in the "
       "record (Σ hits / Σ |guess|)")
metric("content_recall", "attack", False, "fraction of the records' content words the attacker guesses "
       "(Σ hits / Σ |truth|)")
metric("content_prior_f1", "attack", False, "content_f1 of the release-ignoring prior on the same victim records "
       "(the k most common content words of the attacker's train texts, k chosen on attacker-valid)")
metric("content_privacy", "privacy", True, "content-word privacy 1 - (F1 - F1_prior) / (1 - F1_prior), clipped to "
       "[0, 1]: 1 no better than the release-ignoring prior, 0 full recovery (paired bootstrap over records)")

_WORD = re.compile(r"\w+(?:'\w+)?", re.UNICODE)
_SPLIT = re.compile(r"['_]")

#: NLTK's English stop list (``nltk.corpus.stopwords.words("english")``, 179 words, as shipped with the
#: NLTK data package since 2017), written out so that the unit never depends on a download. Forms with an
#: apostrophe are kept as listed; :func:`content_tokens` splits words at apostrophes, so their pieces
#: (``don``, ``t``, ``ll``, ``ve``...) are what is matched, and NLTK lists those pieces too.
NLTK_ENGLISH = frozenset("""
i me my myself we our ours ourselves you you're you've you'll you'd your yours yourself yourselves he him his
himself she she's her hers herself it it's its itself they them their theirs themselves what which who whom this
that that'll these those am is are was were be been being have has had having do does did doing a an the and but
if or because as until while of at by for with about against between into through during before after above below
to from up down in out on off over under again further then once here there when where why how all any both each
few more most other some such no nor not only own same so than too very s t can will just don don't should
should've now d ll m o re ve y ain aren aren't couldn couldn't didn didn't doesn doesn't hadn hadn't hasn hasn't
haven haven't isn isn't ma mightn mightn't mustn mustn't needn needn't shan shan't shouldn shouldn't wasn wasn't
weren weren't won won't wouldn wouldn't
""".split())

#: The stop list of the unit: NLTK's, plus the pieces that Penn-Treebank tokenization leaves of contractions
#: once split at the apostrophe (SST-2 is PTB-tokenized: ``does n't`` → ``n``; ``ca n't``, ``wo n't`` → ``ca``,
#: ``wo``), which NLTK's list, made for untokenized text, does not hold.
STOP_WORDS = NLTK_ENGLISH | frozenset({"n", "ca", "wo"})


def words(text: str) -> list[str]:
    """Lower-cased word tokens of ``text`` (letters, digits and inner apostrophes)."""
    return [w.lower() for w in _WORD.findall(text)]


def _fold(text: str) -> str:
    """``text`` without accents: an uncased WordPiece tokenizer strips them, so a guess of ``cafe`` for
    ``café`` is right."""
    return "".join(c for c in unicodedata.normalize("NFKD", text) if not unicodedata.combining(c))


def content_tokens(text: str) -> frozenset[str]:
    """The set of content tokens of ``text``: its words, folded and split at apostrophes and underscores
    (``don't`` → ``don``, ``t``: the same pieces whether the text or a tokenizer split it), minus
    :data:`STOP_WORDS`; punctuation never forms a word."""
    return frozenset(piece for word in words(_fold(text)) for piece in _SPLIT.split(word)
                     if piece and piece not in STOP_WORDS)


def join_pieces(pieces: Sequence[str | None], continuation: Sequence[bool] | None = None) -> str:
    """Guessed sub-word tokens of one record, in position order, as a text of whole words.

    A continuation piece (default: one starting with WordPiece's ``##``) is glued onto the word before
    it; a continuation with no guessed token before it (``None``: a position the attacker has no guess
    for) is dropped, being part of a word the attacker did not guess. SentencePiece's ``▁`` and
    byte-level BPE's ``Ġ`` word-start markers are removed.

    Args:
        pieces: Token strings, ``None`` where there is no guess.
        continuation: Per piece, whether it continues the previous word (the vocabulary's own rule,
            :attr:`rapt_audit.encoder.vocab.EmbeddingSpace.is_continuation`).
    """
    out: list[str] = []
    open_word = False
    for i, piece in enumerate(pieces):
        if piece is None:
            open_word = False
            continue
        glued = piece.startswith("##") if continuation is None else bool(continuation[i])
        piece = piece[2:] if piece.startswith("##") else piece.lstrip("▁Ġ")
        if not glued:
            out.append(piece)
            open_word = True
        elif open_word:
            out[-1] += piece
    return " ".join(out)


@dataclass(frozen=True)
class ContentPrior:
    """The release-ignoring prior attacker: the same ``k`` content tokens guessed for every record.

    Attributes:
        ranked: Content tokens of the attacker's training texts, most frequent first (by the number of
            texts holding them; ties alphabetical).
        k: How many of them it guesses (chosen on the attacker's validation texts).
        valid_f1: Its content F1 on the texts ``k`` was chosen on.
    """

    ranked: tuple[str, ...]
    k: int
    valid_f1: float

    def guess(self) -> frozenset[str]:
        """The guessed set (the same for every record)."""
        return frozenset(self.ranked[:self.k])


def fit_prior(aux: AttackerData, *, text: Callable[[Record], str] = lambda r: r.text) -> ContentPrior:
    """The prior attacker of :class:`ContentPrior`, from the attacker's own data only.

    Tokens are ranked by how many of ``aux.train``'s texts hold them; ``k`` maximises the content F1
    on ``aux.valid`` (on ``aux.train`` itself when there is no validation record), smallest ``k`` on ties.
    Every ``k`` is scored at once: the hits of the top k are a cumulative sum over the ranking.

    Args:
        aux: The attacker's train and valid records (never victim records).
        text: The text of a record that the release was made from (a text pair joined, for text releases).
    """
    counts = Counter(t for r in aux.train for t in content_tokens(text(r)))
    ranked = tuple(sorted(counts, key=lambda t: (-counts[t], t)))
    truths = [content_tokens(text(r)) for r in (aux.valid or aux.train)]
    total = sum(len(t) for t in truths)
    if not ranked or total == 0:
        return ContentPrior(ranked, 0, 0.0)
    held = Counter(t for truth in truths for t in truth)
    hits = np.cumsum([held[t] for t in ranked], dtype=np.float64)
    f1 = 2 * hits / (np.arange(1, len(ranked) + 1) * len(truths) + total)
    best = int(np.argmax(f1))
    return ContentPrior(ranked, best + 1, float(f1[best]))


def set_counts(guesses: Iterable[frozenset[str]], truths: Sequence[frozenset[str]]) -> np.ndarray:
    """``(3, n)`` float: per record the hits ``|guess ∩ truth|``, ``|guess|`` and ``|truth|``."""
    return np.array([(len(g & t), len(g), len(t)) for g, t in zip(guesses, truths)], dtype=np.float64).reshape(-1, 3).T


def set_f1(guesses: Iterable[frozenset[str]], truths: Sequence[frozenset[str]]) -> float:
    """Set F1 of ``guesses`` against ``truths`` as a ratio of sums over records: the point value of
    :func:`content_scores`' ``content_f1``, without an interval (0 when there is nothing to score)."""
    hits, guessed, true = set_counts(guesses, truths)
    size = float(guessed.sum() + true.sum())
    return 2.0 * float(hits.sum()) / size if size else 0.0


def _ratio(num: np.ndarray, den: np.ndarray, rng: np.random.Generator) -> Estimate:
    """Σ num / Σ den with records as the bootstrap unit (:func:`bootstrap_mean` with ``den`` as weights)."""
    return bootstrap_mean(np.divide(num, den, out=np.zeros_like(num), where=den > 0), weights=den, rng=rng)


def content_scores(guesses: Sequence[frozenset[str]], truths: Sequence[frozenset[str]], prior: ContentPrior, *,
                   rng: np.random.Generator) -> dict[str, Estimate]:
    """Content-token recovery of ``guesses`` (one set per victim record) against ``truths``, the records' own.

    Returns, each with a bootstrap interval over records: ``content_privacy`` (first), ``content_f1``,
    ``content_precision`` (when anything was guessed), ``content_recall`` and ``content_prior_f1`` (the
    prior's guess scored on the same records). The privacy is computed inside every resample from the
    attack's and the prior's F1 on the *same* resampled records (paired: what makes a record hard for
    both cancels), so its clipping holds for the point and both ends of the interval; its interval
    method reads ``paired-bootstrap-percentile``. It keeps per-record parts when it is not clipped:
    the attack's misses ``|guess| + |truth| − 2·hits``, scaled by the prior's Σ (|guess| + |truth|) over the
    attack's, over the prior's misses; the scale is held at its full-sample value, so a paired comparison
    of two runs resamples only the misses. Empty when the records hold no content token (nothing to recover).
    """
    if len(guesses) != len(truths):
        raise ValueError(f"{len(guesses)} guessed sets for {len(truths)} records")
    hits, guessed, true = set_counts(guesses, truths)
    prior_hits, prior_guessed, _ = set_counts([prior.guess()] * len(truths), truths)
    if true.sum() == 0:
        return {}
    size, prior_size = guessed + true, prior_guessed + true
    miss, prior_miss = size - 2 * hits, prior_size - 2 * prior_hits

    def privacy(idx: np.ndarray) -> float:
        room, total = prior_miss[idx].sum(), size[idx].sum()  # room: the prior's 1 − F1, times its Σ size
        if room == 0:
            return 1.0  # the prior recovers everything: no attacker can beat it
        if total == 0:
            return float("nan")  # a resample of empty records guessing nothing: no F1 (dropped)
        return min(1.0, float(miss[idx].sum() / total * prior_size[idx].sum() / room))

    estimate = bootstrap_statistic(len(truths), privacy, rng=rng)
    estimate = dataclasses.replace(estimate, method=f"paired-{estimate.method}")
    if prior_miss.sum() > 0:
        parts = PerRecord(tuple((miss * prior_size.sum() / size.sum()).tolist()), tuple(prior_miss.tolist()))
        if abs(parts.value - estimate.value) <= 1e-12:
            estimate = dataclasses.replace(estimate, per_record=parts)
    out = {"content_privacy": estimate, "content_f1": _ratio(2 * hits, size, rng)}
    if guessed.sum() > 0:
        out["content_precision"] = _ratio(hits, guessed, rng)
    out["content_recall"] = _ratio(hits, true, rng)
    out["content_prior_f1"] = _ratio(2 * prior_hits, prior_size, rng)
    return out


__all__ = ["STOP_WORDS", "ContentPrior", "content_scores", "content_tokens", "fit_prior", "join_pieces",
           "set_counts", "set_f1", "words"]
