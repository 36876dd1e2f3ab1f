"""The base of the word-level sanitizers parameterised by ε (SanText, CusText): one word in, one word out.

These mechanisms are the field's baselines beside dχ noise (T2T): each word of a text is released as a
word drawn from a law that depends on that word only. To differ from T2T by mechanism alone, they
privatize in the same space as word-level T2T (``t2t unit=word``): spaCy's word boundaries, a word's
vector the mean of its sub-token input embeddings (RAPT Eq. 2; a vocabulary word's vector is its own
row), and the candidate outputs the model's whole-word vocabulary tokens (:func:`word_table`). The papers
used GloVe (300-d) or BERT-base's input embeddings: distances, and so the ε giving a replacement rate, differ
in MiniLM's 384-d table; compare defenses at equal replacement (``rapt-audit calibrate --defense NAME``).

A subclass implements :meth:`WordMechanismDefense.release_words`; this base splits texts into words,
puts the released words back with the original whitespace, answers ``calibrate`` (its ``--eta`` values
are the defense's ε) and records ε and the observed replacement in the release. ``rapt-audit audit``
audits any defense with the audit interface (``release_words``, ``audit_groups``, ``audit_distance``;
optional ``claims_support`` and ``audit_description``), built in or a third party's: the base is public
as ``rapt_audit.plugin.WordMechanismDefense``.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Annotated, Any, Callable, ClassVar, Sequence

import numpy as np

from rapt_audit.api.capabilities import WORD_MECHANISM, Capabilities
from rapt_audit.api.context import RunContext
from rapt_audit.api.params import Check
from rapt_audit.api.types import Record
from rapt_audit.defenses._calibrated import calibrate_for_target
from rapt_audit.defenses._text import TextDefense
from rapt_audit.encoder.vocab import embedding_space
from rapt_audit.mechanisms.analyses import words
from rapt_audit.mechanisms.calibration import ReplacementCount, check_target
from rapt_audit.mechanisms.engines import word_engine
from rapt_audit.mechanisms.exponential import euclidean_distances, sample_rows
from rapt_audit.mechanisms.noise import check_epsilon, dchi_noise
from rapt_audit.mechanisms.privatize import DEFAULT_CHUNK, WordEngine, join_bidi, normalize_word, split_bidi

#: Words of public text as the frequency ranking counts them (lower-cased and accent-stripped first).
_PUBLIC_WORD = re.compile(r"\w+|[^\w\s]")
#: Distinct input words whose row of distances is held at once (256 × 23,695 MiniLM words: 48 MB of float64).
_CHUNK = 256


def rewrite_words(ctx: RunContext, texts: Sequence[str],
                  release: Callable[[list[str]], tuple[list[str], ReplacementCount]]
                  ) -> tuple[list[str], ReplacementCount]:
    """Each text with its words (spaCy's tokenizer) replaced by ``release(all words)``, whitespace kept."""
    rows = words(ctx, texts)
    # Directional formatting characters stay where they were written; only the words between them are released.
    parts = [split_bidi(word) for row in rows for word, _ in row if not word.isspace()]
    released, count = release([core for _, core, _ in parts if core])
    it = iter(join_bidi(parts, released))
    return ["".join((word if word.isspace() else next(it)) + space for word, space in row) for row in rows], count


@dataclass(frozen=True)
class WordTable:
    """The candidate output words of the word-level mechanisms and their float64 vectors.

    Attributes:
        words: The candidate words (the model's whole-word regular tokens, as word-level T2T decodes to).
        vectors: float64 ``(V, d)`` input embeddings of ``words``.
        half_sq: ``‖vectors_j‖²/2``, for :func:`~rapt_audit.mechanisms.exponential.euclidean_distances`.
        row_of: Word → its row.
        engine: Word-level T2T's engine over the same words (input word vectors, nearest-neighbour index).
    """

    words: tuple[str, ...]
    vectors: np.ndarray
    half_sq: np.ndarray
    row_of: dict[str, int]
    engine: WordEngine

    def rows_of(self, words_: Sequence[str]) -> np.ndarray:
        """Row of each word's normalised form, or -1 for a word no candidate equals."""
        return np.array([self.row_of.get(normalize_word(w), -1) for w in words_], dtype=np.int64)


def word_table(ctx: RunContext) -> WordTable:
    """The run's :class:`WordTable` (built once per model), over word-level T2T's candidates."""

    def build() -> WordTable:
        engine = word_engine(ctx, "word")
        rows = engine.group_rows["word"]
        vectors = embedding_space(ctx).vectors[rows].astype(np.float64)
        candidates = tuple(engine.words[r] for r in rows.tolist())
        return WordTable(candidates, vectors, 0.5 * np.einsum("ij,ij->i", vectors, vectors),
                         {w: i for i, w in enumerate(candidates)}, engine)

    return ctx.shared(("word_mechanism_table", ctx.model), build)


def public_frequency_order(ctx: RunContext, table: WordTable) -> np.ndarray:
    """Rows of ``table`` from the most to the least frequent in the run's public text (ties: lower row first).

    The papers rank words by their frequency in the corpus being sanitized; that corpus is the user's private
    data, so rapt-audit ranks by public text (WikiText-2, or the demo corpus without a data directory).
    """

    def build() -> np.ndarray:
        counts: Counter[str] = Counter()
        for text in ctx.public_text()[1]:
            counts.update(_PUBLIC_WORD.findall(normalize_word(text)))
        frequency = np.array([counts.get(w, 0) for w in table.words], dtype=np.int64)
        return np.argsort(-frequency, kind="stable")

    return ctx.shared(("public_frequency_order", ctx.model), build)


def sample_by_distance(table: WordTable, words_: Sequence[str], outputs: np.ndarray,
                       log_weight: Callable[[np.ndarray], np.ndarray], uniforms: np.ndarray) -> np.ndarray:
    """Rows (into ``table``) drawn for ``words_`` among ``outputs`` with ``Pr[y | x] ∝ exp(log_weight(d(x, y)))``.

    The law depends on the input word only, so one row of distances is computed per *distinct* word (its
    vector: the mean of its sub-tokens, :meth:`WordEngine.word_vectors`), normalised over ``outputs`` for
    that input, and every occurrence draws from it with its own uniform
    (:func:`~rapt_audit.mechanisms.exponential.sample_rows`).
    """
    distinct, owners = np.unique(np.asarray(words_, dtype=object).astype(str), return_inverse=True)
    chosen = np.empty(len(words_), dtype=np.int64)
    out_vectors, out_half_sq = table.vectors[outputs], table.half_sq[outputs]
    for start in range(0, len(distinct), _CHUNK):
        mine = np.flatnonzero((owners >= start) & (owners < start + _CHUNK))
        vectors = table.engine.word_vectors(distinct[start:start + _CHUNK].tolist())
        weights = log_weight(euclidean_distances(vectors, out_vectors, b_half_sq=out_half_sq))
        chosen[mine] = outputs[sample_rows(weights, owners[mine] - start, uniforms[mine])]
    return chosen


def nearest_two_of_noisy(table: WordTable, words_: Sequence[str], *, epsilon: float, rng: np.random.Generator,
                         shape: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The two rows nearest to each word's vector plus multivariate Laplace noise, and their distances.

    The noise is word-level T2T's (:func:`~rapt_audit.mechanisms.noise.dchi_noise`, density ∝ exp(−ε‖z‖), drawn
    chunk by chunk as T2T draws it), mapped by ``shape`` (a ``(d, d)`` matrix, e.g. Σ^½ of the Mahalanobis
    mechanism; None: none) and searched by T2T's exact index (:meth:`NearestNeighbourIndex.search_topk`).

    Returns:
        ``(rows, distances)``, each ``(n, 2)``, nearest first.
    """
    index = table.engine.index_for("word")
    rows = np.empty((len(words_), 2), dtype=np.int64)
    distances = np.empty((len(words_), 2), dtype=np.float32)
    for start in range(0, len(words_), DEFAULT_CHUNK):
        stop = min(len(words_), start + DEFAULT_CHUNK)
        clean = table.engine.word_vectors(list(words_[start:stop]))
        noisy = clean + shaped_noise(stop - start, clean.shape[1], epsilon, rng, shape=shape)
        rows[start:stop], distances[start:stop] = index.search_topk(noisy, 2)
    return rows, distances


def shaped_noise(n: int, d: int, epsilon: float, rng: np.random.Generator, *, shape: np.ndarray | None) -> np.ndarray:
    """float32 ``(n, d)`` multivariate Laplace noise (density ∝ exp(−ε‖z‖)) mapped by ``shape`` (symmetric
    ``(d, d)``: density ∝ exp(−ε‖shape⁻¹z‖)); ``None`` is T2T's noise, drawn exactly as T2T draws it."""
    noise = dchi_noise(n, d, epsilon, rng, dtype=np.float32)
    return noise if shape is None else (noise.astype(np.float64) @ shape).astype(np.float32)


def replacement_of(released: Sequence[str], words_: Sequence[str], *, perturbed: int, forced: int,
                   passed: int = 0) -> ReplacementCount:
    """The count of a word-level release: a word is replaced when its normalised form changed."""
    replaced = sum(normalize_word(new) != normalize_word(old) for new, old in zip(released, words_))
    return ReplacementCount(perturbed=perturbed, replaced=replaced, passed=passed, forced=forced)


@dataclass
class WordMechanismDefense(TextDefense):
    """Base class of the ε-parameterised word-level sanitizers; subclasses implement :meth:`release_words`.

    Attributes:
        epsilon: The mechanism's privacy parameter (> 0; ``inf``: no privacy, the text is released as it is).
        replacement: If set, a target word-replacement probability in (0, 1) that overrides ``epsilon``: ε is
            calibrated on public text at fit time (as the dχ defenses' η, :func:`~defenses._calibrated.calibrate_for_target`),
            so that every word-level defense can be compared at equal replacement.
        method, epochs, ...: The service's customization (:class:`~rapt_audit.defenses._text.TextDefense`).
    """

    epsilon: Annotated[float, Check(check_epsilon)] = 1.0
    replacement: Annotated[float | None, Check(check_target)] = None
    _epsilon: float | None = field(default=None, init=False, repr=False)
    _calibration: dict[str, Any] = field(default_factory=dict, init=False, repr=False)
    #: The name of the privacy parameter (``rapt-audit calibrate`` reads its ``--eta`` values as this one).
    privacy_parameter: ClassVar[str] = "epsilon"
    #: The ε values a sweep of this defense covers by default (chosen on MiniLM's table, see the subclass).
    epsilon_grid: ClassVar[tuple[float, ...]] = ()
    #: What ``rapt-audit audit`` says it audits of the mechanism (its report's ``audits``).
    audit_description: ClassVar[str] = "the released word of one word"
    #: Audited through release_words, audit_groups and audit_distance (``rapt-audit audit``).
    capabilities: ClassVar[Capabilities] = Capabilities(audit=WORD_MECHANISM)

    def release_words(self, words_: list[str], *, epsilon: float, rng: np.random.Generator,
                      ctx: RunContext) -> tuple[list[str], ReplacementCount]:
        """The released word for each word at ``epsilon`` (finite), and the count of what was replaced."""
        raise NotImplementedError

    def privatize_at(self, texts: Sequence[str], *, epsilon: float, rng: np.random.Generator,
                     ctx: RunContext) -> tuple[list[str], ReplacementCount]:
        """Privatize ``texts`` word by word at ``epsilon``; ``inf`` releases them unchanged."""
        if math.isinf(epsilon):  # no privacy: the identity (the words rebuild their texts exactly)
            return rewrite_words(ctx, texts, lambda units: (list(units), ReplacementCount(perturbed=len(units))))
        return rewrite_words(ctx, texts, lambda units: self.release_words(units, epsilon=epsilon, rng=rng, ctx=ctx))

    def privatize(self, texts: Sequence[str], *, rng: np.random.Generator,
                  ctx: RunContext) -> tuple[list[str], ReplacementCount]:
        """Privatize ``texts`` at the ε in force (given, or calibrated for ``replacement``)."""
        return self.privatize_at(texts, epsilon=self.effective_epsilon(ctx), rng=rng, ctx=ctx)

    def effective_epsilon(self, ctx: RunContext) -> float:
        """ε in force: ``epsilon``, or the ε calibrated for ``replacement`` (computed once, stored on disk)."""
        if self._epsilon is None:
            if self.replacement is None:
                self._epsilon = self.epsilon
            else:
                self._epsilon, self._calibration = calibrate_for_target(self, target=self.replacement, ctx=ctx,
                                                                        parameter="epsilon")
        return self._epsilon

    def privacy_level(self, ctx: RunContext) -> float:
        """The effective ε (:meth:`effective_epsilon`): the privatized texts depend on it."""
        return self.effective_epsilon(ctx)

    def fit(self, train: Sequence[Record], *, ctx: RunContext) -> WordMechanismDefense:
        """Check the service's settings, remember the training records, resolve ε."""
        super().fit(train, ctx=ctx)
        self.effective_epsilon(ctx)
        return self

    def replacement_count(self, texts: Sequence[str], *, eta: float, rng: np.random.Generator,
                          ctx: RunContext) -> ReplacementCount:
        """How many words of ``texts`` are replaced at ε = ``eta`` (``rapt-audit calibrate``'s interface, whose
        ``--eta`` is each defense's own privacy parameter)."""
        return self.privatize_at(texts, epsilon=check_epsilon(eta), rng=rng, ctx=ctx)[1]

    def audit_groups(self, ctx: RunContext) -> dict[str, Sequence[str]]:
        """Groups of candidate words within which the claim ``ε·d(x, x')`` holds for every pair
        (``rapt-audit audit`` pairs words of one group; default: the whole vocabulary)."""
        return {"the vocabulary": word_table(ctx).words}

    def audit_distance(self, word: str, other: str, *, ctx: RunContext) -> float:
        """``d(x, x')`` of the claim for two vocabulary words (default: Euclidean between their vectors)."""
        table = word_table(ctx)
        return float(np.linalg.norm(table.vectors[table.row_of[word]] - table.vectors[table.row_of[other]]))

    def claims_support(self) -> bool:
        """Whether every release of a word of an :meth:`audit_groups` group is a word of that same group (a
        claimed support, which ``rapt-audit audit`` checks too; default: no such claim)."""
        return False

    def mechanism_facts(self, count: ReplacementCount, ctx: RunContext) -> dict[str, Any]:
        """ε in force, the observed replacement probability and, when ε was calibrated, how."""
        epsilon = self.effective_epsilon(ctx)
        return {"epsilon": "inf" if math.isinf(epsilon) else epsilon,
                "observed_replacement": None if math.isnan(count.rate) else count.rate, **self._calibration}


__all__ = ["WordMechanismDefense", "WordTable", "nearest_two_of_noisy", "public_frequency_order", "replacement_of",
           "rewrite_words", "sample_by_distance", "shaped_noise", "word_table"]
