"""The embedding space of a model: its regular vocabulary and input-embedding vectors.

T2T (Qu et al., CIKM 2021) replaces each token by the vocabulary entry nearest to its noisy input
embedding. Only *regular* tokens may ever be released: special tokens (``[CLS]``, ``[SEP]``,
``[PAD]``, ``[MASK]``, ``[UNK]``, ``<s>``...) and reserved ``[unused…]`` slots are excluded from the
candidate table, although their embeddings stay available (``all_vectors``) because an input
``[UNK]`` must still be privatized from its own row. Word vectors for word-level mechanisms
(PCT2T) are the mean of a word's sub-token embeddings.

Nearest-neighbour ties (duplicate rows) resolve to the lowest row, as numpy's ``argmin`` does;
duplicates among regular tokens are reported with a warning when the space is built.

Spaces are cached on disk per weights fingerprint (``cache_dir/embeddings/<fp[:16]>/``) as an
``.npz`` of arrays and a ``.json`` of strings, each written atomically (:mod:`rapt_audit.api.files`)
and tied together by a random nonce, so a warm load is two plain reads without pickle.
"""

from __future__ import annotations

import itertools
import json
import re
import uuid
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Sequence

import numpy as np

from rapt_audit.api.context import RunContext
from rapt_audit.api.files import write_cache_atomic
from rapt_audit.encoder.models import model_fingerprint

if TYPE_CHECKING:  # pragma: no cover
    from rapt_audit.encoder.models import LoadedModel

__all__ = ["EmbeddingSpace", "build_embedding_space", "load_embedding_space", "embedding_space"]

#: Bumped whenever the rules below change, so that stale caches are rebuilt, never reused.
FORMAT_VERSION = 1
_UNUSED = re.compile(r"^(\[unused\d+\]|<unused\d+>)$")  # BERT [unusedN]; Gemma-style <unusedN>


@dataclass(frozen=True, eq=False)
class EmbeddingSpace:
    """The regular vocabulary of a model with its input embeddings (arrays are read-only).

    Attributes:
        model_fingerprint: sha256 of the model weights (the cache key).
        tokens: Token strings of the regular tokens (the only possible outputs), in model-id order.
        token_ids: int64 ``(V_r,)`` model ids of those tokens.
        vectors: float32 ``(V_r, d)`` C-contiguous input-embedding rows of those tokens.
        is_continuation: bool ``(V_r,)``. WordPiece: the token starts with ``##``. SentencePiece
            (``▁`` marks a word start) and byte-level BPE (``Ġ`` marks one): the token does *not*
            start with that marker. Vocabularies with none of these markers: all False.
        excluded_ids: Model ids never emitted: special tokens, ``[unused…]`` slots, and embedding
            rows that have no token string.
        unk_id: Id of the unknown token, or None.
        all_vectors: float32 ``(V, d)``, the full input-embedding matrix (special rows included).
    """

    model_fingerprint: str
    tokens: tuple[str, ...]
    token_ids: np.ndarray
    vectors: np.ndarray
    is_continuation: np.ndarray
    excluded_ids: frozenset[int]
    unk_id: int | None
    all_vectors: np.ndarray
    _row_of: np.ndarray = field(init=False, repr=False)

    def __post_init__(self) -> None:
        row_of = np.full(self.all_vectors.shape[0], -1, dtype=np.int64)
        row_of[self.token_ids] = np.arange(self.token_ids.size, dtype=np.int64)
        object.__setattr__(self, "_row_of", row_of)
        for array in (self.token_ids, self.vectors, self.is_continuation, self.all_vectors, row_of):
            array.flags.writeable = False  # shared by every defense of a run: nobody may mutate it

    @property
    def dim(self) -> int:
        """Embedding width d."""
        return int(self.vectors.shape[1])

    def rows_of(self, token_ids: Sequence[int] | np.ndarray) -> np.ndarray:
        """Row in the regular table per model id (int64), ``-1`` where the id is not regular.

        Raises:
            ValueError: For ids outside the model vocabulary.
        """
        ids = np.asarray(token_ids, dtype=np.int64)
        if ids.size and (ids.min() < 0 or ids.max() >= self._row_of.size):
            raise ValueError(f"token ids must lie in [0, {self._row_of.size}), got range [{ids.min()}, {ids.max()}]")
        return self._row_of[ids]

    def word_vector(self, token_ids: Sequence[int] | np.ndarray) -> np.ndarray:
        """float32 ``(d,)`` mean of the input-embedding rows of these model ids (any ids, [UNK] too).

        Raises:
            ValueError: For an empty id list or ids outside the model vocabulary.
        """
        return self.word_vectors([np.asarray(token_ids, dtype=np.int64).reshape(-1)])[0]

    def word_vectors(self, ids_per_word: Sequence[Sequence[int] | np.ndarray]) -> np.ndarray:
        """float32 ``(n, d)``: :meth:`word_vector` of each word's ids, summed in float64, 1,024 words at a time.

        PCT2T's input words and its candidates held as pieces are both embedded here, so a candidate's
        vector is exactly that of the same word in a text.

        Raises:
            ValueError: For a word without ids or ids outside the model vocabulary.
        """
        out = np.empty((len(ids_per_word), self.dim), dtype=np.float32)
        for start in range(0, len(ids_per_word), 1024):
            block = ids_per_word[start:start + 1024]
            lengths = np.fromiter(map(len, block), dtype=np.int64, count=len(block))
            if (lengths == 0).any():
                raise ValueError("a word needs at least one token id")
            ids = np.fromiter(itertools.chain.from_iterable(block), dtype=np.int64, count=int(lengths.sum()))
            if ids.min() < 0 or ids.max() >= self.all_vectors.shape[0]:
                raise ValueError(f"token ids must lie in [0, {self.all_vectors.shape[0]}), got range "
                                 f"[{ids.min()}, {ids.max()}]")
            sums = np.add.reduceat(self.all_vectors[ids].astype(np.float64), np.cumsum(lengths) - lengths, axis=0)
            out[start:start + len(block)] = sums / lengths[:, None]
        return out


def _embedding_matrix(model: LoadedModel) -> np.ndarray:
    weight = model.model.get_input_embeddings().weight.detach()
    if weight.ndim != 2 or not weight.dtype.is_floating_point:
        raise ValueError(f"input embeddings must be a 2-D float matrix, got shape {tuple(weight.shape)} "
                         f"and dtype {weight.dtype}")
    matrix = np.ascontiguousarray(weight.float().cpu().numpy(), dtype=np.float32)
    if not np.isfinite(matrix).all():
        bad = np.flatnonzero(~np.isfinite(matrix).all(axis=1))
        raise ValueError(f"input embeddings hold NaN/inf in {bad.size} row(s) (first: id {bad[0]}); "
                         "nearest-neighbour decoding over them would be meaningless")
    return matrix


def _continuation_rule(tokens: Sequence[str]) -> tuple[str, bool]:
    """(marker, marks_continuation) for the vocabulary's sub-word convention (see EmbeddingSpace)."""
    for marker, marks_continuation in (("##", True), ("▁", False), ("Ġ", False)):
        if any(t.startswith(marker) and len(t) > len(marker) for t in tokens):
            return marker, marks_continuation
    return "", True  # no convention found: nothing is flagged


def build_embedding_space(model: LoadedModel) -> EmbeddingSpace:
    """Build the space from ``model.model.get_input_embeddings()`` and ``model.tokenizer``.

    Raises:
        ValueError: If the embedding matrix is not 2-D finite floats, or the tokenizer has ids
            beyond the embedding rows.
    """
    matrix = _embedding_matrix(model)
    tokenizer = model.tokenizer
    n_rows = matrix.shape[0]
    by_id: list[str | None] = [None] * n_rows
    for token, token_id in sorted(tokenizer.get_vocab().items(), key=lambda item: (item[1], item[0])):
        if not 0 <= token_id < n_rows:
            raise ValueError(f"tokenizer id {token_id} ({token!r}) has no row in the {n_rows}-row embedding matrix")
        if by_id[token_id] is None:
            by_id[token_id] = token
    special = set(int(i) for i in tokenizer.all_special_ids if i is not None)
    for token_id, added in getattr(tokenizer, "added_tokens_decoder", {}).items():
        if getattr(added, "special", False):
            special.add(int(token_id))
    excluded = {i for i, t in enumerate(by_id) if t is None or i in special or _UNUSED.match(t)}
    token_ids = np.array([i for i in range(n_rows) if i not in excluded], dtype=np.int64)
    tokens = tuple(by_id[i] for i in token_ids)  # type: ignore[misc]
    marker, marks_continuation = _continuation_rule(tokens)
    starts = np.array([bool(marker) and t.startswith(marker) for t in tokens], dtype=bool)
    is_continuation = starts if marks_continuation else (~starts if marker else starts)
    vectors = np.ascontiguousarray(matrix[token_ids])
    _warn_duplicates(vectors, tokens)
    unk = getattr(tokenizer, "unk_token_id", None)
    return EmbeddingSpace(model.fingerprint, tokens, token_ids, vectors, is_continuation,
                          frozenset(excluded), None if unk is None else int(unk), matrix)


def _warn_duplicates(vectors: np.ndarray, tokens: Sequence[str]) -> int:
    """Warn when regular tokens share an embedding row (nearest-neighbour ties); returns the count."""
    # Rows equal in value project equally; candidates found by projection are confirmed exactly.
    projection = vectors.astype(np.float64) @ np.random.default_rng(0).standard_normal(vectors.shape[1])
    order = np.argsort(projection, kind="stable")
    same = np.flatnonzero(projection[order][1:] == projection[order][:-1])
    pairs = [(order[i], order[i + 1]) for i in same if np.array_equal(vectors[order[i]], vectors[order[i + 1]])]
    if pairs:
        examples = ", ".join(f"{tokens[a]!r}={tokens[b]!r}" for a, b in pairs[:5])
        warnings.warn(f"{len(pairs)} regular token(s) share an embedding row with another ({examples}); "
                      "nearest-neighbour ties go to the lowest row", stacklevel=3)
    return len(pairs)


def _cache_paths(cache_dir: Path, fingerprint: str) -> tuple[Path, Path]:
    folder = Path(cache_dir) / "embeddings" / fingerprint[:16]
    return folder / f"space-v{FORMAT_VERSION}.npz", folder / f"space-v{FORMAT_VERSION}.json"


def _save(space: EmbeddingSpace, cache_dir: Path) -> None:
    npz_path, json_path = _cache_paths(cache_dir, space.model_fingerprint)
    nonce = uuid.uuid4().hex  # ties this npz to this json (each file is replaced separately)
    arrays = {"token_ids": space.token_ids, "is_continuation": space.is_continuation,
              "all_vectors": space.all_vectors, "excluded_ids": np.array(sorted(space.excluded_ids), dtype=np.int64),
              "nonce": np.frombuffer(nonce.encode("ascii"), dtype=np.uint8)}
    meta = {"format": FORMAT_VERSION, "fingerprint": space.model_fingerprint, "nonce": nonce,
            "unk_id": space.unk_id, "tokens": list(space.tokens)}
    if write_cache_atomic(npz_path, lambda handle: np.savez(handle, **arrays)):
        write_cache_atomic(json_path, lambda handle: handle.write(json.dumps(meta).encode("utf-8")))


#: Spaces read in this process, by the identity of the two files they were read from (device, inode, size,
#: modification time: a cache entry is only ever replaced by rename, which gives it another inode). Every run
#: of a process (a sweep's cells, a test session's many cache folders hard-linked to one template) reads the
#: same 90 MB entry; read once, it is shared, as it is read-only. A few entries at most (one per model).
_READ: dict[tuple[str, tuple[int, ...]], EmbeddingSpace] = {}
_READ_MAX = 4


def _file_identity(*paths: Path) -> tuple[int, ...] | None:
    """``(device, inode, size, mtime)`` of each file, or None when one cannot be read."""
    try:
        stats = [path.stat() for path in paths]
    except OSError:
        return None
    return tuple(v for st in stats for v in (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns))


def _load(cache_dir: Path, fingerprint: str) -> EmbeddingSpace | None:
    """The cached space of the weights ``fingerprint``, or None when it is missing, stale or inconsistent.

    The model itself is not needed (nor loaded): the fingerprint ties the cache to the weights. The same
    files read before in this process give the space read then (:data:`_READ`).
    """
    npz_path, json_path = _cache_paths(cache_dir, fingerprint)
    identity = _file_identity(npz_path, json_path)
    if identity is not None and (fingerprint, identity) in _READ:
        return _READ[(fingerprint, identity)]
    space = _read(npz_path, json_path, fingerprint)
    if space is not None and identity is not None and identity == _file_identity(npz_path, json_path):
        if len(_READ) >= _READ_MAX:
            _READ.pop(next(iter(_READ)))
        _READ[(fingerprint, identity)] = space
    return space


def _read(npz_path: Path, json_path: Path, fingerprint: str) -> EmbeddingSpace | None:
    """The space stored in ``npz_path`` and ``json_path``, or None when it is missing, stale or inconsistent."""
    try:
        meta = json.loads(json_path.read_text(encoding="utf-8"))
        with np.load(npz_path, allow_pickle=False) as data:
            arrays = {name: data[name] for name in data.files}
    except (OSError, ValueError, KeyError, EOFError):
        return None
    tokens = tuple(meta.get("tokens", ()))
    ids, all_vectors = arrays.get("token_ids"), arrays.get("all_vectors")
    if (meta.get("format") != FORMAT_VERSION or meta.get("fingerprint") != fingerprint
            or arrays.get("nonce", np.empty(0, np.uint8)).tobytes().decode("ascii", "replace") != meta.get("nonce")
            or ids is None or all_vectors is None or all_vectors.ndim != 2 or ids.shape != (len(tokens),)
            or (ids.size and (ids.min() < 0 or ids.max() >= all_vectors.shape[0]))
            or arrays.get("is_continuation", np.empty(0)).shape != ids.shape):
        return None
    return EmbeddingSpace(fingerprint, tokens, ids, np.ascontiguousarray(all_vectors[ids]),
                          arrays["is_continuation"], frozenset(arrays["excluded_ids"].tolist()),
                          meta.get("unk_id"), all_vectors)


def _load_or_build(cache_dir: Path, fingerprint: str, model: Callable[[], LoadedModel]) -> EmbeddingSpace:
    """The cached space of ``fingerprint``; on a miss, built from ``model()`` and cached."""
    space = _load(cache_dir, fingerprint)
    if space is None:
        space = build_embedding_space(model())
        _save(space, cache_dir)
    return space


def load_embedding_space(model: LoadedModel, *, cache_dir: Path) -> EmbeddingSpace:
    """The model's embedding space from the disk cache, built (and cached) on a miss."""
    return _load_or_build(cache_dir, model.fingerprint, lambda: model)


def embedding_space(ctx: RunContext) -> EmbeddingSpace:
    """The run's embedding space, built once per run (and once per model on disk).

    A warm cache is read by the weights' fingerprint without loading the encoder (or importing
    transformers), which keeps the user's set-up short; only a miss loads the model to build it.
    """
    return ctx.shared(("embedding_space", ctx.model), lambda: _load_or_build(
        ctx.cache_dir, model_fingerprint(ctx.model, cache_dir=ctx.cache_dir), ctx.encoder))
