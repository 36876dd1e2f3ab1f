"""Text-to-text dχ privatization engines shared by the T2T, PCT2T and RAPT defenses.

Both engines add dχ noise (:func:`rapt_audit.mechanisms.noise.dchi_noise`) to a unit's vector and release the
nearest candidate (:class:`rapt_audit.mechanisms.nn_search.NearestNeighbourIndex`), which is post-processing
and keeps the guarantee (Feyisetan et al. 2020; Qu et al. 2021, M_txt).

* :class:`TokenEngine` — one unit per WordPiece token of the model tokenizer; candidates are all
  regular vocabulary tokens (T2T, Qu et al.).
* :class:`WordEngine` — one unit per word; a word's vector is the mean of its sub-token embeddings
  and the candidates form groups (PCT2T: one group per POS category of vocabulary words and public
  words held as pieces, embedded the same way, RAPT Eq. 2; word-level T2T: a single group of
  whole-word tokens). Words outside every selected group are released unchanged.

Unknown input (characters the tokenizer maps to ``[UNK]``, emoji, stray special-token strings) is
never passed through silently. The policy is explicit (``unk_policy``):

* ``privatize`` (default): the unit is treated as the input symbol it tokenizes to; its embedding
  (e.g. the ``[UNK]`` row) is noised and decoded like any other unit, so the output is always a
  regular token. The emoji's identity was already lost by the tokenizer, before any privacy.
* ``drop``: the unit is removed from the release (the release is then shorter than the input).
* ``error``: a :class:`~rapt_audit.api.errors.DataError` names the text.

Everything is processed in chunks of ``chunk`` units, so memory stays flat however long the
input is. eta = inf means no privacy: the original text is released unchanged (RAPT's η = +∞
columns), so the replacement probability there is exactly 0.

η is not re-checked here: it comes from a defense that checked it when it was built (or from
calibration), and :func:`~rapt_audit.mechanisms.noise.dchi_noise`, the public sampler every noisy
unit goes through, checks its own arguments.
"""

from __future__ import annotations

import math
import re
import unicodedata
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Sequence

import numpy as np

from rapt_audit.api.errors import DataError, UsageError
from rapt_audit.mechanisms.calibration import ReplacementCount
from rapt_audit.mechanisms.noise import dchi_noise

if TYPE_CHECKING:  # pragma: no cover - keeps plugin imports free of torch
    from rapt_audit.encoder.vocab import EmbeddingSpace
    from rapt_audit.mechanisms.nn_search import NearestNeighbourIndex

UNK_POLICIES = ("privatize", "drop", "error")
DEFAULT_CHUNK = 4096
#: Most bytes of word vectors a :class:`WordEngine` keeps (21,845 MiniLM words; SST-2's nouns, verbs,
#: pronouns and prepositions are fewer). A stream bringing new names and numbers on every line must not
#: grow memory with its length: a bound of 500,000 words let it reach 0.8 GB.
VECTOR_CACHE_BYTES = 32 << 20
#: A lone surrogate: a Python ``str`` can hold one (from a ``\ud800`` escape in JSON, or ``surrogateescape``
#: decoding), but it is no Unicode character, and spaCy and the Rust tokenizer both fail on it.
LONE_SURROGATE = re.compile("[\ud800-\udfff]")
#: Unicode's directional formatting characters (category Cf): embeddings, overrides and isolates with their
#: closers (U+202A-U+202E, U+2066-U+2069) and the marks (U+061C, U+200E, U+200F). spaCy glues them to a word
#: or tags a lone one as any part of speech; a word-level defense that replaced the word they sit on dropped
#: them one at a time (a kept U+202E without its U+202C reverses the display of all that follows), so they
#: are kept where they were written and only the word between them is privatized.
BIDI_CONTROLS = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def check_text(text: str, *, name: str) -> None:
    """Refuse a text that cannot be privatized as text: one that is not a ``str`` or holds a lone surrogate.

    Raises:
        DataError: naming ``name``, the code point and its position, and the fix.
    """
    if not isinstance(text, str):
        raise DataError(f"{name} is a {type(text).__name__}, not text; pass each text as a str")
    found = LONE_SURROGATE.search(text)
    if found:
        raise DataError(f"{name} holds a lone surrogate U+{ord(found.group()):04X} at character {found.start()}: it is "
                        "not a Unicode character, so it can be neither tokenized nor written as UTF-8. Repair the "
                        "text at its source, or replace such code points with U+FFFD (re.sub('[\\ud800-\\udfff]', "
                        "'\\ufffd', text); rapt-audit privatize does this with --errors replace)")


def split_bidi(word: str) -> tuple[str, str, str]:
    """``word`` as ``(leading controls, the word without its controls, its other controls in order)``.

    Every :data:`BIDI_CONTROLS` character of a word is kept by the word-level defenses (:func:`join_bidi`); a
    control inside a word goes after the released word, so that every opener still precedes its closer.
    """
    if not BIDI_CONTROLS.intersection(word):  # almost every word: nothing to split
        return "", word, ""
    body = word.lstrip("".join(BIDI_CONTROLS))
    lead = word[:len(word) - len(body)]
    return lead, "".join(c for c in body if c not in BIDI_CONTROLS), "".join(c for c in body if c in BIDI_CONTROLS)


def join_bidi(parts: Sequence[tuple[str, str, str]], released: Sequence[str]) -> list[str]:
    """Each word of :func:`split_bidi` ``parts`` with its controls around its released word; ``released`` holds
    one word for each part whose word is not empty (a word of controls alone is kept as it is)."""
    it = iter(released)
    return [lead + (next(it) if core else "") + rest for lead, core, rest in parts]


def normalize_word(word: str) -> str:
    """Lower-case and strip accents, as uncased WordPiece vocabularies store words."""
    decomposed = unicodedata.normalize("NFD", word.lower())
    return "".join(c for c in decomposed if unicodedata.category(c) != "Mn")


def check_unk_policy(policy: str) -> str:
    """Validate an unknown-input policy name."""
    if policy not in UNK_POLICIES:
        raise UsageError(f"unk_policy={policy!r} is not one of: {', '.join(UNK_POLICIES)}")
    return policy


def decode_noisy(vectors: Callable[[int, int], np.ndarray], n: int, *, eta: float, rng: np.random.Generator,
                 index: NearestNeighbourIndex, chunk: int = DEFAULT_CHUNK) -> np.ndarray:
    """Rows of the nearest candidates to ``vectors(start, stop) + noise``, chunk by chunk.

    Args:
        vectors: Returns the clean float32 vectors of units ``start:stop`` (gathered lazily so that
            only one chunk of vectors exists at a time).
        n: Number of units.
        eta: Privacy parameter (finite; the callers short-cut eta = inf).
        rng: Noise generator; consumed chunk by chunk in order.
        index: Nearest-neighbour index over the candidate table.
        chunk: Units per chunk.
    """
    rows = np.empty(n, dtype=np.int64)
    for start in range(0, n, chunk):
        stop = min(n, start + chunk)
        clean = vectors(start, stop)
        noisy = dchi_noise(stop - start, clean.shape[1], eta, rng, dtype=np.float32)
        noisy += clean
        if not np.isfinite(noisy).all():
            raise ValueError(f"privatized vectors are not finite at eta={eta!r}; refusing to decode them "
                             "(a nearest-neighbour search over inf/NaN silently returns row 0)")
        rows[start:stop] = index.search(noisy)
    return rows


def mean_piece_vectors(space: EmbeddingSpace, tokenizer: object, words: Sequence[str]) -> np.ndarray:
    """float32 ``(n, d)``: each word's mean sub-token embedding (RAPT Sec. III-A2), for input words and
    PCT2T's candidates alike. A word the tokenizer turns into nothing (a control character) is an
    unknown symbol."""
    unknown = [space.unk_id if space.unk_id is not None else 0]
    encoded = tokenizer(list(words), add_special_tokens=False)["input_ids"] if words else []  # type: ignore[operator]
    return space.word_vectors([ids or unknown for ids in encoded])


@dataclass
class TokenEngine:
    """Token-level T2T over the regular vocabulary of an embedding space."""

    space: EmbeddingSpace
    tokenizer: object
    index: NearestNeighbourIndex
    chunk: int = DEFAULT_CHUNK

    def token_ids(self, texts: Sequence[str]) -> list[list[int]]:
        """Model token ids of each text, without special tokens."""
        if not texts:
            return []
        return list(self.tokenizer(list(texts), add_special_tokens=False)["input_ids"])

    def privatize_ids(self, ids: np.ndarray, *, eta: float, rng: np.random.Generator) -> np.ndarray:
        """Rows (into ``space.tokens``) released for the model ids ``ids``.

        Non-regular ids (``[UNK]`` and special-token strings typed in the text) are privatized from
        their own embedding rows; they can never be released themselves.
        """
        rows = self.space.rows_of(ids)
        if math.isinf(eta):
            irregular = rows < 0
            if irregular.any():  # even without noise, a non-regular unit decodes to a regular token
                rows = rows.copy()
                rows[irregular] = self.index.search(self.space.all_vectors[ids[irregular]])
            return rows
        return decode_noisy(lambda a, b: self.space.all_vectors[ids[a:b]], len(ids), eta=eta, rng=rng,
                            index=self.index, chunk=self.chunk)

    def privatize_texts(self, texts: Sequence[str], *, eta: float, rng: np.random.Generator,
                        unk_policy: str = "privatize", uids: Sequence[str] | None = None
                        ) -> tuple[list[str], list[np.ndarray], ReplacementCount]:
        """Privatize texts token by token.

        Returns:
            The released texts, the released rows per text (for attacks and tests), and the count
            of replaced tokens.
        """
        per_text = self.token_ids(texts)
        if math.isinf(eta):  # no privacy: the identity
            rows = [self.space.rows_of(np.asarray(ids, dtype=np.int64)) for ids in per_text]
            return list(texts), rows, ReplacementCount(perturbed=sum(len(r) for r in rows))
        read = sum(len(ids) for ids in per_text)
        per_text = [self._apply_unk_policy(np.asarray(ids, dtype=np.int64), unk_policy, uid)
                    for ids, uid in zip(per_text, uids or [f"text {i}" for i in range(len(per_text))])]
        flat = np.concatenate(per_text) if per_text else np.zeros(0, dtype=np.int64)
        rows = self.privatize_ids(flat, eta=eta, rng=rng)
        count = ReplacementCount(perturbed=len(flat), replaced=int((self.space.token_ids[rows] != flat).sum()),
                                 dropped=read - len(flat))  # unk_policy=drop
        released_rows = np.split(rows, np.cumsum([len(ids) for ids in per_text])[:-1]) if per_text else []
        texts_out = [self.tokenizer.convert_tokens_to_string([self.space.tokens[r] for r in rr]) for rr in released_rows]
        return texts_out, released_rows, count

    def _apply_unk_policy(self, ids: np.ndarray, policy: str, uid: str) -> np.ndarray:
        if policy == "privatize":
            return ids
        irregular = self.space.rows_of(ids) < 0
        if not irregular.any():
            return ids
        if policy == "error":
            raise DataError(f"{uid} holds {int(irregular.sum())} token(s) outside the regular vocabulary "
                            "(unknown characters, emoji, or a word longer than the tokenizer reads); use "
                            "unk_policy=privatize or drop")
        return ids[~irregular]


@dataclass
class WordEngine:
    """Word-level dχ replacement within candidate groups (PCT2T, and word-level T2T).

    Args:
        space: The embedding space (the vectors a word's sub-tokens are averaged from).
        tokenizer: The model tokenizer (to split a word into sub-tokens).
        words: The candidate words; its first rows are the space's tokens, as in
            :class:`rapt_audit.mechanisms.engines.Candidates`.
        group_rows: Group name → rows (into ``words``) of its candidate words.
        index_for: Group name → nearest-neighbour index over the vectors of ``group_rows[name]``.
    """

    space: EmbeddingSpace
    tokenizer: object
    words: Sequence[str]
    group_rows: dict[str, np.ndarray]
    index_for: Callable[[str], NearestNeighbourIndex]
    chunk: int = DEFAULT_CHUNK
    _vector_cache: dict[str, np.ndarray] = field(default_factory=dict, repr=False)
    _members: dict[str, frozenset[str]] = field(default_factory=dict, repr=False)

    def holds(self, group: str, word: str) -> bool:
        """Whether ``word`` (normalised) is one of ``group``'s candidates, so that it can come back unchanged.

        A word that is not is replaced at every finite η (:attr:`ReplacementCount.forced`).
        """
        if group not in self._members:
            self._members[group] = frozenset(self.words[row] for row in self.group_rows[group].tolist())
        return normalize_word(split_bidi(word)[1]) in self._members[group]

    def word_vectors(self, words: Sequence[str]) -> np.ndarray:
        """Mean sub-token embedding of each word (RAPT Sec. III-A2), memoised per word string."""
        missing = sorted({w for w in words if w not in self._vector_cache})
        if missing and (len(self._vector_cache) + len(missing)) * self.space.dim * 4 > VECTOR_CACHE_BYTES:
            self._vector_cache.clear()  # float32 vectors; a word's vector is the same when computed again
            missing = sorted(set(words))
        if missing:
            self._vector_cache.update(zip(missing, mean_piece_vectors(self.space, self.tokenizer, missing)))
        return np.stack([self._vector_cache[w] for w in words]) if words else np.zeros((0, self.space.dim), np.float32)

    def privatize_words(self, words: Sequence[str], groups: Sequence[str], *, eta: float,
                        rng: np.random.Generator) -> tuple[list[str], ReplacementCount]:
        """Release a candidate word for each selected word; ``groups[i]`` names word i's group.

        Directional formatting characters of a word are kept where they were (:func:`split_bidi`); only the
        word between them is privatized, and a word of controls alone is released as it is.
        """
        parts = [split_bidi(word) for word in words]
        if any(lead or rest for lead, _, rest in parts):
            kept = [i for i, (_, core, _) in enumerate(parts) if core]
            released, count = self.privatize_words([parts[i][1] for i in kept], [groups[i] for i in kept],
                                                   eta=eta, rng=rng)
            return join_bidi(parts, released), count
        count = ReplacementCount(perturbed=len(words))
        if math.isinf(eta):  # no privacy: the identity
            return list(words), count
        out: list[str] = [""] * len(words)
        order = np.asarray(groups, dtype=object)
        for group in sorted(set(groups)):
            positions = np.flatnonzero(order == group)
            members = [words[i] for i in positions]
            candidates = self.group_rows[group]
            if candidates.size == 0:
                raise UsageError(f"POS group {group!r} has no candidate words in this model's vocabulary")
            local = decode_noisy(lambda a, b: self.word_vectors(members[a:b]), len(members), eta=eta, rng=rng,
                                 index=self.index_for(group), chunk=self.chunk)
            for position, row, original in zip(positions, candidates[local], members):
                token = self.words[row]
                out[position] = token
                count.replaced += token != normalize_word(original)
            count.forced += sum(not self.holds(group, word) for word in members)
        return out, count
