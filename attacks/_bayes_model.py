"""The parts of the contextual Bayesian attack on text releases (``bayes_inversion``): channel, prior, decoder.

Everything here is counting and search over model-vocabulary *rows* (the unit the inversion attacks score,
:mod:`rapt_audit.attacks._token_views`); no network is trained.

* :class:`Channel` — P(released token | original token), estimated from shadow pairs (the attacker's own
  texts released through the public mechanism, aligned to their originals) in a keep part, smoothed towards
  the keep probability of all pairs, and a replace part, absolutely discounted towards the shadow data's
  replacement frequencies;
* :class:`NgramModel` — an interpolated Witten–Bell n-gram model of original token sequences (the prior
  over sentences), whose order-1 part is the unigram prior;
* :func:`decode` — the most probable original sequence for one released sequence: a beam search over the
  top-K candidates of each released token, scored by channel + prior;
* :class:`Evidence` and :func:`local_posteriors` — how sure the attacker is of each decoded token: its posterior
  under channel × unigram, P(o | r) = P(r | o)·P(o) / P(r), with P(r) summed over the whole vocabulary.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Iterable, Sequence

import numpy as np

#: The history symbol before a sentence's first token (rows are >= 0; -1 is a non-vocabulary token).
BOS = -2


@dataclass(frozen=True)
class Channel:
    """P(released | original) from shadow pairs, smoothed (see :meth:`log_likelihood`).

    Attributes:
        pairs: Released key → Counter of the original rows it was released for (shadow data).
        original_counts: Aligned shadow pairs per original row, C(o).
        kept_counts: Per original row, how often it was released as itself.
        replaced_counts: Per released key, how often it was released for *another* original.
        replaced_total: Σ of ``replaced_counts``.
        replaced_types: Per original row o, the distinct other tokens it was released as, T(o).
        keep: Smoothed probability that a token is released as itself, (kept + 1) / (pairs + 2).
        vocab_size: Number of regular vocabulary rows (the support of the replacement back-off).
        discount: D, subtracted from every seen replacement count and handed to the back-off: Ney's estimate
            from the shadow pairs' counts of counts, ``(n1 + 1) / (n1 + 2·n2 + 2)`` (n1, n2: the (o, r) pairs
            seen once, twice; the ones keep it inside (0, 1) and positive when no pair was seen once).
    """

    pairs: dict[int, Counter]
    original_counts: Counter
    kept_counts: Counter
    replaced_counts: Counter
    replaced_total: int
    replaced_types: Counter
    keep: float
    vocab_size: int
    discount: float = 0.5

    @property
    def n_pairs(self) -> int:
        """Number of aligned shadow pairs the channel was counted from."""
        return int(sum(self.original_counts.values()))

    def new_replacement(self, originals: np.ndarray) -> np.ndarray:
        """Per row o, the share of o's replacement law handed to the back-off: ``D·T(o) / R(o)``, T(o) the
        distinct replacements seen, R(o) the replacements counted, D the :attr:`discount`; 1 where o was never
        seen replaced (all of its replacement law is then the back-off)."""
        replaced = np.array([self.original_counts.get(int(o), 0) - self.kept_counts.get(int(o), 0)
                             for o in originals], dtype=np.float64)
        types = np.array([self.replaced_types.get(int(o), 0) for o in originals], dtype=np.float64)
        return np.divide(self.discount * types, replaced, out=np.ones_like(types), where=replaced > 0)

    def log_likelihood(self, released: int, originals: np.ndarray, alpha: float) -> np.ndarray:
        """log P(released | o) for every row o of ``originals``.

        The mechanism either keeps a token or replaces it, so the channel is estimated in those two parts:
        ``P(r | o) = k_o·[r = o] + (1 − k_o)·q(r | o)``. The keep part is shrunk towards the global keep
        probability with ``alpha`` pseudo-counts, ``k_o = (kept(o) + α·keep) / (C(o) + α)``; the global ``keep`` is
        what ties the channel to the defense's η: with few shadow pairs per token it carries most of the
        mechanism's strength. The replace part is absolutely discounted towards ``u``, the shadow data's
        replacement frequency (add-one over the vocabulary): for r ≠ o,
        ``q(r | o) = max(C(o, r) − D, 0) / R(o) + (D·T(o) / R(o))·u(r)`` (:meth:`new_replacement`).

        Why not a pseudo-count: an α-pseudo-count hands o's unseen replacements α / (R(o) + α) of its mass, so
        a token seen replaced three times (a sub-word piece of a word the mechanism always replaces) took the
        mass 10 / 13 at α = 10, a full stop seen replaced 203 times 10 / 213, although word-level mechanisms
        spread *every* word's replacements over thousands of outputs (nearly all of them new whatever R(o) is).
        For every released word the shadow data never saw, such a piece then became the best original: on
        SanText+ (ε = 15, smoke) ``##ch`` was the guess at 28 % of the replaced positions (content privacy 0.65
        against ``mlp_inversion``'s 0.40). Each original's rate of new replacements must be measured.

        Why not Witten–Bell, which measures it, ``(C(o, r) + T(o)·u(r)) / (R(o) + T(o))``: where replacements
        are spread that thin (Mahalanobis ε = 83.4 on SST-2: the median replacement is the 12,000th nearest of
        29,523 rows to its original), nearly every (o, r) pair is seen once, and Witten–Bell still gives a pair
        seen once about 1 / (R + T) of o's law, tens of times its share. A word seen once as a replacement
        of "the" then looked far more likely replaced than kept, and the guesses of rare kept words were
        taken back (:func:`local_posteriors`); ``mlp_inversion`` stayed the stronger attack there (content F1
        0.584 against 0.563, seed 0, unsure guesses already taken back). Absolute discounting with Ney's D,
        which comes out near 1 when nearly every pair is seen once, leaves such a pair almost nothing beyond
        the back-off (0.602 against 0.584) and keeps the counts of a concentrated channel, whose pairs recur.
        (A single Dirichlet over C(o, ·), tried first, fails for the keep part: it all but ruled out that a
        frequent word had been replaced.)
        """
        originals = np.asarray(originals, dtype=np.int64)
        counts = self.pairs.get(released, Counter())
        pair = np.array([counts.get(int(o), 0) for o in originals], dtype=np.float64)
        total = np.array([self.original_counts.get(int(o), 0) for o in originals], dtype=np.float64)
        kept = np.array([self.kept_counts.get(int(o), 0) for o in originals], dtype=np.float64)
        keep_o = (kept + alpha * self.keep) / (total + alpha)
        u = (self.replaced_counts.get(released, 0) + 1.0) / (self.replaced_total + self.vocab_size)
        same = originals == released
        fresh = self.new_replacement(originals)
        seen = np.divide(np.where(same, 0.0, np.maximum(pair - self.discount, 0.0)), total - kept,
                         out=np.zeros_like(pair), where=total > kept)
        replaced = seen + fresh * u
        return np.log(np.where(same, keep_o, (1.0 - keep_o) * replaced))


def estimate_channel(originals: np.ndarray, released: np.ndarray, *, vocab_size: int) -> Channel:
    """The :class:`Channel` of aligned shadow pairs (``originals[i]`` was released as ``released[i]``)."""
    originals, released = np.asarray(originals, dtype=np.int64), np.asarray(released, dtype=np.int64)
    pairs: dict[int, Counter] = defaultdict(Counter)
    for o, r in zip(originals.tolist(), released.tolist()):
        pairs[r][o] += 1
    changed = originals != released
    replaced_pairs = Counter(zip(originals[changed].tolist(), released[changed].tolist()))
    types = Counter(o for o, _ in replaced_pairs)
    once = sum(c == 1 for c in replaced_pairs.values())
    twice = sum(c == 2 for c in replaced_pairs.values())
    return Channel(dict(pairs), Counter(originals.tolist()), Counter(originals[~changed].tolist()),
                   Counter(released[changed].tolist()), int(changed.sum()), types,
                   (float((~changed).sum()) + 1.0) / (len(changed) + 2.0), int(vocab_size),
                   (once + 1.0) / (once + 2.0 * twice + 2.0))


@dataclass
class NgramModel:
    """An interpolated Witten–Bell n-gram model of token-row sequences, with an add-δ unigram at its base.

    ``P(w | h) = (c(h, w) + T(h)·P(w | h')) / (c(h) + T(h))``, with T(h) the number of distinct tokens seen
    after h and h' the history without its oldest token; an unseen history backs off entirely. Witten–Bell
    needs no tuned discount, which matters with the few thousand sentences an attacker holds. Log
    probabilities are memoised per (history, token): the decoder asks for the same ones again and again.

    Attributes:
        order: The longest n-gram counted.
        vocab_size: Rows of the regular vocabulary (the unigram's support).
        unseen: Unigram mass of the rows never seen in the fitted sequences (set by :meth:`hold_out`).
    """

    order: int
    vocab_size: int
    unseen: float = 0.5
    _tables: list[dict[tuple[int, ...], Counter]] = field(default_factory=list, init=False, repr=False)
    _sizes: list[dict[tuple[int, ...], tuple[int, int]]] = field(default_factory=list, init=False, repr=False)
    _tokens: int = field(default=0, init=False, repr=False)
    _memo: dict[tuple[tuple[int, ...], int], float] = field(default_factory=dict, init=False, repr=False)

    def fit(self, sequences: Iterable[Sequence[int]]) -> NgramModel:
        """Count every n-gram up to :attr:`order` of ``sequences`` (each padded with :data:`BOS` in front)."""
        self._tables = [defaultdict(Counter) for _ in range(self.order)]
        pad = (BOS,) * (self.order - 1)
        for seq in sequences:
            padded = pad + tuple(int(t) for t in seq)
            for i in range(len(pad), len(padded)):
                for k in range(self.order):  # k = history length
                    self._tables[k][padded[i - k:i]][padded[i]] += 1
        # c(h) and T(h) once per history, not once per query
        self._sizes = [{h: (sum(c.values()), len(c)) for h, c in table.items()} for table in self._tables]
        self._tokens = self._sizes[0].get((), (0, 0))[0]
        self._memo = {}
        return self

    @property
    def tokens(self) -> int:
        """Tokens counted."""
        return self._tokens

    def seen(self) -> Counter:
        """Unigram counts of the rows seen in the fitted sequences."""
        return self._tables[0][()]

    def hold_out(self, sequences: Iterable[Sequence[int]]) -> NgramModel:
        """Set :attr:`unseen` to the share of tokens of held-out ``sequences`` never seen in fitting (add-one).

        The mass of unseen words decides whether a released word the prior has never met is taken for the
        original (kept by the mechanism) or for a replacement; an add-δ count over a 30,000-row vocabulary
        puts far too much mass there for an attacker's in-domain text, so it is measured on held-out text.
        """
        seen, flat = self.seen(), [int(t) for seq in sequences for t in seq]
        self.unseen = (sum(t not in seen for t in flat) + 1.0) / (len(flat) + 2.0)
        self._memo = {}
        return self

    def _base(self, token: int) -> float:
        """P(token) of the unigram: seen rows by count, :attr:`unseen` spread evenly over the others."""
        hits = self.seen().get(token, 0)
        if hits:
            return (1.0 - self.unseen) * hits / self._tokens
        return self.unseen / max(self.vocab_size - len(self.seen()), 1)

    def unigram(self, rows: np.ndarray) -> np.ndarray:
        """log P(o) of the unigram, per row."""
        return np.log(np.array([self._base(int(r)) for r in rows], dtype=np.float64))

    def logprob(self, history: tuple[int, ...], token: int) -> float:
        """log P(token | history), the history truncated to ``order − 1`` tokens (most recent last)."""
        history = history[len(history) - (self.order - 1):] if self.order > 1 else ()
        key = (history, token)
        if key not in self._memo:
            p = self._base(token)
            for k in range(1, len(history) + 1):
                context = history[len(history) - k:]
                if context not in self._sizes[k]:
                    break  # an unseen history: the longer ones are unseen too
                total, types = self._sizes[k][context]
                p = (self._tables[k][context].get(token, 0) + types * p) / (total + types)
            self._memo[key] = math.log(p)
        return self._memo[key]


@dataclass(frozen=True)
class Candidates:
    """Candidate originals of one released token: rows, log channel likelihood, log unigram prior, and
    ``evidence``, log P(released) = log Σ_o P(released | o)·P(o) over every original (not only these rows): the
    normaliser of a candidate's posterior (:func:`local_posteriors`)."""

    rows: np.ndarray
    channel: np.ndarray
    unigram: np.ndarray
    evidence: float = 0.0


def candidates(released: int, *, channel: Channel, lm: NgramModel, generic: np.ndarray, k: int,
               alpha: float, evidence: Evidence) -> Candidates:
    """The ``k`` most probable originals of ``released`` by channel × unigram, best first, with the released
    token's log evidence (``evidence``: the same channel, prior and α).

    The pool is the released token itself, every original the shadow data saw it released for, and
    ``generic`` (:func:`generic_ranking`): the order, for any released token, of the originals the shadow
    data never saw it released for.
    """
    seen = channel.pairs.get(released, Counter())
    pool = np.unique(np.concatenate([np.array(([released] if released >= 0 else []) + list(seen), dtype=np.int64),
                                     generic[:k]]))
    chan = channel.log_likelihood(released, pool, alpha)
    uni = lm.unigram(pool)
    best = np.argsort(-(chan + uni), kind="stable")[:k]
    return Candidates(pool[best], chan[best], uni[best], evidence.log_evidence(released))


class Evidence:
    """log P(r) = log Σ_o P(r | o)·P(o) of a text channel (:meth:`Channel.log_likelihood`, pseudo-count α) and a
    unigram prior, summed over every regular row o in closed form.

    The sum has three parts: o = r (kept), the originals the shadow data saw released as r (their seen
    replacement share), and the discounted back-off of every o ≠ r, ``u(r)·Σ_o (1 − k_o)·W(o)·P(o)``, whose
    sum does not depend on r and is taken once. So each released token costs only its seen pairs.
    """

    def __init__(self, channel: Channel, lm: NgramModel, alpha: float) -> None:
        self.channel = channel
        rows = np.arange(channel.vocab_size, dtype=np.int64)
        total = np.array([channel.original_counts.get(int(o), 0) for o in rows], dtype=np.float64)
        kept = np.array([channel.kept_counts.get(int(o), 0) for o in rows], dtype=np.float64)
        self.keep = (kept + alpha * channel.keep) / (total + alpha)
        self.fresh = channel.new_replacement(rows)
        self.prior = np.exp(lm.unigram(rows))
        self.replaced = total - kept
        self.back_off = float(((1.0 - self.keep) * self.fresh * self.prior).sum())

    def log_evidence(self, released: int) -> float:
        """log P(released) under the channel and the prior."""
        ch = self.channel
        u = (ch.replaced_counts.get(released, 0) + 1.0) / (ch.replaced_total + ch.vocab_size)
        inside = 0 <= released < ch.vocab_size
        back_off = self.back_off - (((1.0 - self.keep[released]) * self.fresh[released] * self.prior[released])
                                    if inside else 0.0)
        total = u * back_off + (self.keep[released] * self.prior[released] if inside else 0.0)
        seen = [(o, c) for o, c in ch.pairs.get(released, Counter()).items()
                if o != released and 0 <= o < ch.vocab_size]
        if seen:
            o, c = (np.array(x) for x in zip(*seen))
            total += float(((1.0 - self.keep[o]) * np.maximum(c - ch.discount, 0.0) / self.replaced[o]
                            * self.prior[o]).sum())
        return math.log(total)


def generic_ranking(channel: Channel, lm: NgramModel, alpha: float, limit: int) -> np.ndarray:
    """The ``limit`` prior-seen rows best as originals of a token the shadow data never saw them released as.

    For such a row o the channel is ``(1 − k_o)·W(o)·u(r)`` (:meth:`Channel.log_likelihood`, W the share of
    o's replacement law left to the back-off, :meth:`Channel.new_replacement`), so rows rank by
    ``log(1 − k_o) + log W(o) + unigram``, whatever r is.
    """
    rows = np.array(sorted(r for r in lm.seen() if r >= 0), dtype=np.int64)
    if not rows.size:
        return rows
    total = np.array([channel.original_counts.get(int(r), 0) for r in rows], dtype=np.float64)
    kept = np.array([channel.kept_counts.get(int(r), 0) for r in rows], dtype=np.float64)
    keep_o = (kept + alpha * channel.keep) / (total + alpha)
    score = np.log1p(-keep_o) + np.log(channel.new_replacement(rows)) + lm.unigram(rows)
    return rows[np.argsort(-score, kind="stable")[:limit]]


def decode(options: Sequence[Candidates], lm: NgramModel, *, order: int, mix: float, beam: int) -> np.ndarray:
    """The best original row per released position (``-1`` where there is no candidate).

    A sequence scores Σ channel + (1 − mix)·unigram + mix·log P_n-gram(o_i | o_{i−n+1..i−1}). With
    ``mix = 0`` or ``order = 1`` positions are independent and each takes its best candidate (the
    context-blind attack); else a beam search keeps the ``beam`` best partial sequences, merging those
    that share the history the n-gram model reads (Viterbi recombination).
    """
    if mix == 0 or order == 1:
        return np.array([int(c.rows[0]) if c.rows.size else -1 for c in options], dtype=np.int64)
    context = order - 1
    hyps: dict[tuple[int, ...], tuple[float, tuple[int, ...]]] = {(BOS,) * context: (0.0, ())}
    for c in options:
        if not c.rows.size:  # nothing to guess: the history keeps a non-vocabulary token
            hyps = {(h + (-1,))[1:]: (s, p + (-1,)) for h, (s, p) in hyps.items()}
            continue
        local = c.channel + (1.0 - mix) * c.unigram
        grown: dict[tuple[int, ...], tuple[float, tuple[int, ...]]] = {}
        for history, (score, path) in hyps.items():
            for row, base in zip(c.rows.tolist(), local.tolist()):
                s = score + base + mix * lm.logprob(history, row)
                key = (history + (row,))[1:]
                if key not in grown or s > grown[key][0]:
                    grown[key] = (s, path + (row,))
        hyps = dict(sorted(grown.items(), key=lambda kv: -kv[1][0])[:beam])
    best = max(hyps.values(), key=lambda v: v[0])[1] if hyps else ()
    return np.array(best, dtype=np.int64)


def local_posteriors(options: Sequence[Candidates], decoded: np.ndarray) -> np.ndarray:
    """Per position, the posterior of its decoded row under channel × unigram, ``exp(channel + unigram −
    evidence)``; 0 where nothing was decoded.

    Context-free on purpose: it asks how strongly the released token itself points at the guess, which is what
    separates a kept word (its own evidence) from a replacement whose original is one of thousands. The
    n-gram context chose the guess; the threshold on this posterior is chosen on attacker-valid data.
    """
    out = np.zeros(len(options), dtype=np.float64)
    for i, (c, row) in enumerate(zip(options, np.asarray(decoded).tolist())):
        hit = np.flatnonzero(c.rows == row) if row >= 0 else ()
        if len(hit):
            out[i] = min(1.0, math.exp(float(c.channel[hit[0]] + c.unigram[hit[0]]) - c.evidence))
    return out


__all__ = ["BOS", "Candidates", "Channel", "Evidence", "NgramModel", "candidates", "decode", "estimate_channel",
           "generic_ranking", "local_posteriors"]
