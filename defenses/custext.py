"""CusText and CusText+: the exponential mechanism over each word's customized output set (Chen et al. 2023)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, ClassVar, Sequence

import numpy as np

from rapt_audit.api.capabilities import WORD_MECHANISM, Capabilities
from rapt_audit.api.context import RunContext
from rapt_audit.api.params import Check, Range
from rapt_audit.api.plugins import DEFENSES
from rapt_audit.defenses._word_mechanism import (WordMechanismDefense, WordTable, public_frequency_order,
                                                  replacement_of, word_table)
from rapt_audit.mechanisms import analysis_pack
from rapt_audit.mechanisms.calibration import ReplacementCount
from rapt_audit.mechanisms.exponential import sample_rows
from rapt_audit.mechanisms.noise import check_epsilon
from rapt_audit.mechanisms.privatize import normalize_word

#: Distinct input words whose customized sets are gathered at once (512 × 20 × 384 float64: 31 MB).
_CHUNK = 512


@dataclass(frozen=True)
class CustomizedSets:
    """CusText's mapping of the vocabulary into disjoint output sets.

    Attributes:
        set_of: ``(V,)`` the set of each word of the table.
        members: ``(S, k)`` the rows of each set's words, nearest to the set's first word first; ``-1`` pads
            the last set, which may hold fewer than k words.
    """

    set_of: np.ndarray
    members: np.ndarray


def customized_sets(table: WordTable, order: np.ndarray, k: int, *, batch: int = 64) -> CustomizedSets:
    """CusText's conservative mapping: in ``order``, each word not yet mapped and its k − 1 nearest words not yet
    mapped form one output set, shared by all of them (the paper's customized mapping, as its public code's default
    ``mapping_strategy="conservative"`` builds it). Sets are disjoint, so inputs of one set have one support.

    The mapping is sequential, but the distances are not: the next ``batch`` unmapped words in ``order`` are
    scored against every unmapped word in one product, and each keeps its 4k nearest; a word whose list no
    longer holds k unmapped words when its turn comes is scored again alone. The sets are exactly those of
    the one-word-at-a-time greedy (ties by row).
    """
    size = len(table.words)
    set_of = np.full(size, -1, dtype=np.int64)
    members = np.full((-(-size // k), k), -1, dtype=np.int64)
    # The unmapped words, compacted whenever a quarter of them has been mapped (mapped ones are masked between).
    rows, vectors, half_sq = np.arange(size), table.vectors, table.half_sq
    free = np.ones(size, dtype=bool)
    left, s, queue = size, 0, order.tolist()
    while queue:
        leaders = [r for r in queue[:4 * batch] if free[r]][:batch]
        if not leaders:  # the next words are all mapped already
            queue = queue[4 * batch:]
            continue
        queue = queue[queue.index(leaders[-1]) + 1:]
        if left < 0.75 * len(rows):
            keep = free[rows]
            rows, vectors, half_sq = rows[keep], vectors[keep], half_sq[keep]
        # ‖y‖²/2 − x·y ranks words by distance to x (‖x‖² is constant).
        lists = _nearest(half_sq[None, :] - table.vectors[leaders] @ vectors.T, rows, free, 4 * k)
        for leader, nearest in zip(leaders, lists):
            if not free[leader]:
                continue
            take = min(k, left)
            nearest = nearest[free[nearest]][:take]
            if nearest.size < take:  # its list was used up by the sets made since: score it again
                nearest = _nearest((half_sq - vectors @ table.vectors[leader])[None, :], rows, free, take)[0]
            members[s, :take] = nearest
            set_of[nearest] = s
            free[nearest] = False
            left -= take
            s += 1
    return CustomizedSets(set_of, members[:s])


def _nearest(scores: np.ndarray, rows: np.ndarray, free: np.ndarray, count: int) -> list[np.ndarray]:
    """Per row of ``scores`` (over ``rows``), the ``count`` unmapped rows of lowest score, lowest first (ties: row)."""
    scores[:, ~free[rows]] = np.inf
    count = min(count, int(free[rows].sum()))
    best = np.argpartition(scores, count - 1, axis=1)[:, :count]
    return [rows[b[np.lexsort((rows[b], score[b]))]] for b, score in zip(best, scores)]


def custext_log_weights(inputs: np.ndarray, outputs: np.ndarray, valid: np.ndarray, epsilon: float) -> np.ndarray:
    """``ε·u(x, y)/2`` with ``u = −(d − d_min)/(d_max − d_min)`` ∈ [−1, 0] over each input's own set (Chen et al.
    2023, Eq. of the sampling function; Δu = 1): ``inputs`` ``(m, d)``, ``outputs`` ``(m, k, d)``, ``valid``
    ``(m, k)`` masks the padding (−inf). A set whose distances are all equal gives the uniform law."""
    distance = np.sqrt(np.einsum("mkd,mkd->mk", outputs - inputs[:, None, :], outputs - inputs[:, None, :]))
    low = np.where(valid, distance, np.inf).min(axis=1, keepdims=True)
    high = np.where(valid, distance, -np.inf).max(axis=1, keepdims=True)
    spread = np.where(high > low, high - low, 1.0)
    utility = -(distance - low) / spread
    return np.where(valid, 0.5 * epsilon * utility, -np.inf)


def stop_words(ctx: RunContext) -> frozenset[str]:
    """CusText+'s stop words, kept unchanged: spaCy's English list (326 words), normalised; read from the
    packed analyses where spaCy is not installed (a ``--no-spacy`` bundle), so the list is the same."""
    return ctx.shared(("custext", "stop_words"),
                      lambda: frozenset(normalize_word(w) for w in analysis_pack.stop_words(ctx)))


@DEFENSES.register("custext", tags=("text", "word"))
@dataclass
class CusTextDefense(WordMechanismDefense):
    """CusText / CusText+ (Chen et al., Findings of ACL 2023): the exponential mechanism over customized output sets.

    "A Customized Text Sanitization Mechanism with Differential Privacy".

    The vocabulary is partitioned once into disjoint **customized output sets** of ``k`` words
    (:func:`customized_sets`: in order of public frequency, a word and its k − 1 nearest unmapped words). An
    input word x is released as y in its own set Y_x with ``Pr[y | x] ∝ exp(ε·u(x, y)/2)``, u the negative
    Euclidean distance min–max normalised over Y_x to [−1, 0] (sensitivity Δu = 1). Two inputs of one set
    are then ε-indistinguishable (ε-LDP within the set); inputs of different sets have disjoint outputs, which
    is the mechanism's design (the paper's guarantee is stated per output set). **CusText+** (``plus=True``)
    releases stop words unchanged (counted as ``passed``).

    Departures, each for a stated reason:

    * Embeddings: MiniLM's input table (the paper: GloVe and counter-fitted vectors; its public code ranks
      counter-fitted vectors by cosine, GloVe by Euclidean distance). u is normalised per set, so ε keeps its
      meaning across tables and the paper's ε values apply.
    * The mapping's order: word frequency in *public* text, not in the task's corpus (the private data), and
      the whole candidate vocabulary is mapped (the public code maps only words of the task's corpus, and
      releases every other word **unchanged**: here a word outside the vocabulary takes the set of its nearest
      vocabulary word, by the nearest-neighbour index word-level T2T uses, and is sampled in it).
    * Stop words: spaCy's English list (the public code uses NLTK's 179 words; NLTK is not a dependency).
      The public code also adds a random integer to numbers; not done here (no paper text describes it).

    Attributes:
        epsilon: ε of the exponential mechanism (> 0; ``inf``: no privacy).
        k: Size of each customized output set (the paper's and the public code's default 20).
        plus: CusText+: stop words are released unchanged.
    """

    epsilon: Annotated[float, Check(check_epsilon)] = 1.0
    k: Annotated[int, Range(2)] = 20
    plus: bool = False
    #: The paper's ε ∈ {1, 3} and beyond: replacement 0.93, 0.84, 0.57, 0.23 and 0.08 on MiniLM at k = 20
    #: (``rapt-audit calibrate --defense custext``, WikiText-2, 1,000 sentences); u ∈ [−1, 0] keeps a 20-word
    #: set near uniform until ε is several units.
    epsilon_grid: ClassVar[tuple[float, ...]] = (1.0, 3.0, 6.0, 10.0, 20.0)
    capabilities: ClassVar[Capabilities] = Capabilities(audit=WORD_MECHANISM, figure_place=9)
    audit_description: ClassVar[str] = ("the released word of one word, pairs within one customized set, and the set "
                                        "as support")

    def sets(self, ctx: RunContext) -> CustomizedSets:
        """The run's customized output sets for ``k`` (built once per model and k)."""
        table = word_table(ctx)
        return ctx.shared(("custext_sets", ctx.model, self.k),
                          lambda: customized_sets(table, public_frequency_order(ctx, table), self.k))

    def claims_support(self) -> bool:
        """True: a word is always released as a word of its own customized set (the sets are disjoint)."""
        return True

    def audit_groups(self, ctx: RunContext) -> dict[str, Sequence[str]]:
        """One group per customized set (named by its first word): the claim holds between words of one set."""
        table, sets = word_table(ctx), self.sets(ctx)
        return {f"set of {table.words[row[0]]!r}": [table.words[r] for r in row if r >= 0]
                for row in sets.members.tolist()}

    def audit_distance(self, word: str, other: str, *, ctx: RunContext) -> float:
        """1 for two words of one set (the claim is ε for every such pair, Δu = 1); inf across sets."""
        table, sets = word_table(ctx), self.sets(ctx)
        same = sets.set_of[table.row_of[word]] == sets.set_of[table.row_of[other]]
        return 0.0 if word == other else 1.0 if same else float("inf")

    def release_words(self, words_: list[str], *, epsilon: float, rng: np.random.Generator,
                      ctx: RunContext) -> tuple[list[str], ReplacementCount]:
        """CusText(+)'s released word for each word (see the class docstring)."""
        table, sets = word_table(ctx), self.sets(ctx)
        uniforms = rng.random(len(words_))  # one per word: the draw of its released word
        stop = stop_words(ctx) if self.plus else frozenset()
        kept = np.array([normalize_word(w) in stop for w in words_], dtype=bool).reshape(len(words_))
        released = np.array(words_, dtype=object)
        todo = np.flatnonzero(~kept)
        distinct, owners = np.unique(np.asarray(words_, dtype=object)[todo].astype(str), return_inverse=True)
        vectors = table.engine.word_vectors(distinct.tolist())
        rows = table.rows_of(distinct.tolist())
        unknown = rows < 0
        if unknown.any():  # a word outside the vocabulary takes the set of its nearest vocabulary word
            rows[unknown] = table.engine.index_for("word").search(vectors[unknown])
        chosen = np.empty(len(todo), dtype=np.int64)
        for start in range(0, len(distinct), _CHUNK):
            mine = np.flatnonzero((owners >= start) & (owners < start + _CHUNK))
            members = sets.members[sets.set_of[rows[start:start + _CHUNK]]]
            valid = members >= 0
            log_weights = custext_log_weights(vectors[start:start + _CHUNK].astype(np.float64),
                                              table.vectors[np.maximum(members, 0)], valid, epsilon)
            picked = sample_rows(log_weights, owners[mine] - start, uniforms[todo][mine])
            chosen[mine] = members[owners[mine] - start, picked]
        released[todo] = np.asarray(table.words, dtype=object)[chosen]
        out = released.tolist()
        forced = int(unknown[owners].sum()) if len(todo) else 0
        return out, replacement_of(out, words_, perturbed=len(todo), forced=forced, passed=int(kept.sum()))
