"""The audit protocols: how ``rapt-audit audit`` samples each kind of mechanism, chosen by capability, never by name.

A defense's :class:`~rapt_audit.api.capabilities.Capabilities` name its protocol (``audit``); one that names none is
audited by the first protocol of :data:`~rapt_audit.api.capabilities.DETECTED` its object supports (it has every
method and parameter the protocol calls), so a third party's word mechanism or dχ text defense is audited with no
list to join. Each protocol says which groups of vocabulary rows its claim holds within, how one input's releases
are drawn (by the defense's own code, or the built-in engine it declares it runs), the distance of its claim
``scale · d(x, x')`` and how its releases are scored; :mod:`~rapt_audit.audit.black_box` pairs the rows and bounds.
"""

from __future__ import annotations

import dataclasses
import inspect
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from rapt_audit.api import capabilities as caps
from rapt_audit.api.capabilities import declared_capabilities
from rapt_audit.api.context import RunContext
from rapt_audit.api.errors import PluginError
from rapt_audit.mechanisms.engines import pos_groups, whole_word_rows, word_engine

#: ``sample(n, rng)``: ``n`` releases of one input (word rows, or vectors as rows).
Sample = Callable[[int, np.random.Generator], np.ndarray]
#: ``sampler(row, group)``: the releases of the vocabulary word at ``row`` (a member of ``group``).
Sampler = Callable[[int, str], Sample]


def _euclidean(_plugin: Any, _ctx: RunContext, space: Any) -> Callable[[int, int], float]:
    """The Euclidean distance of two rows' input embeddings: the dχ claim's metric."""
    return lambda row, other: float(np.linalg.norm(space.vectors[row].astype(np.float64) - space.vectors[other]))


@dataclass(frozen=True)
class Protocol:
    """How one kind of mechanism is audited.

    Attributes:
        name: Its name in :data:`~rapt_audit.api.capabilities.AUDIT_PROTOCOLS`.
        describes: What is audited, for a defense that does not say (its ``audit_description``).
        parameter: The defense's privacy parameter the claim is scaled by (``eta``, ``epsilon``).
        calls: The methods it calls on the defense, and ``reads`` the attributes it reads.
        keyword: A keyword its first method must take (``eta``: the dχ text base's ``privatize``).
        groups: ``(plugin, ctx, space)`` → group → candidate rows (the claim holds between rows of one group).
        sampler: ``(plugin, engine, ctx)`` → :data:`Sampler`; ``None`` for the Laplace protocol, which audits
            normalised vectors rather than vocabulary rows (``black_box._audit_laplace``).
        metric: ``(plugin, ctx, space)`` → ``d(row, other)``; the Euclidean distance of the rows by default.
        vectors: The releases are vectors, scored by the claimed dχ log-likelihood ratio.
        within: How a claimed support is said: ``stays in the <group>``, or ``stays a <category>``.
    """

    name: str
    describes: str
    parameter: str
    calls: tuple[str, ...] = ()
    reads: tuple[str, ...] = ()
    keyword: str | None = None
    groups: Callable[[Any, RunContext, Any], dict[str, np.ndarray]] | None = None
    sampler: Callable[[Any, Any, RunContext], Sampler] | None = None
    metric: Callable[[Any, RunContext, Any], Callable[[int, int], float]] = _euclidean
    vectors: bool = False
    within: str = "in the "

    def supports(self, plugin: Any) -> bool:
        """Whether ``plugin`` (class or instance) has every method and attribute the protocol calls and reads."""
        if not all(callable(getattr(plugin, m, None)) for m in self.calls):
            return False
        fields = {f.name for f in dataclasses.fields(plugin)} if dataclasses.is_dataclass(plugin) else set()
        if not all(hasattr(plugin, a) or a in fields for a in self.reads):  # a field may have a default factory
            return False
        return self.keyword is None or self.keyword in _keywords(getattr(plugin, self.calls[0]))

    def needs(self) -> str:
        """What the protocol needs of a defense, in words (for messages)."""
        parts = [f"{m}()" for m in self.calls] + list(self.reads)
        return ", ".join(parts) + (f" ({self.calls[0]} taking {self.keyword}=)" if self.keyword else "")

    def scale(self, plugin: Any) -> float:
        """The claim per unit of distance: the defense's privacy parameter (Laplace: ``epsilon/sensitivity``)."""
        if self.sampler is None:
            return float(plugin.epsilon / plugin.sensitivity)
        return float(getattr(plugin, self.parameter))

    def claim_name(self) -> str:
        """How a report names :meth:`scale` (``eta``, ``epsilon``, ``epsilon/sensitivity``)."""
        return "epsilon/sensitivity" if self.sampler is None else self.parameter


def _keywords(method: Any) -> set[str]:
    try:
        return set(inspect.signature(method).parameters)
    except (TypeError, ValueError):  # a builtin without a signature: it cannot be told, so it does not qualify
        return set()


def token_rows(ctx: RunContext, space: Any) -> dict[str, int]:
    """Token → its row of the embedding space, built once per run (every probe's sampler reads it)."""
    return ctx.shared(("audit_token_rows", ctx.model), lambda: {token: r for r, token in enumerate(space.tokens)})


def _vocabulary(_plugin: Any, _ctx: RunContext, space: Any) -> dict[str, np.ndarray]:
    return {"vocabulary": np.arange(len(space.tokens))}


def _engine_words(plugin: Any, ctx: RunContext, space: Any, row: int, group: str, grouping: str) -> Sample:
    """Releases of the word at ``row`` by the built-in word engine of ``grouping`` at the defense's η."""
    words = word_engine(ctx, grouping)
    row_of = {word: r for r, word in enumerate(words.words)}

    def sample(n: int, rng: np.random.Generator) -> np.ndarray:
        released, _ = words.privatize_words([space.tokens[row]] * n, [group] * n, eta=plugin.eta, rng=rng)
        return np.array([row_of.get(w, -1) for w in released], dtype=np.int64)

    return sample


def _vocabulary_groups(plugin: Any, ctx: RunContext, space: Any) -> dict[str, np.ndarray]:
    """The whole vocabulary, or for ``unit=word`` its whole words."""
    return {"word": whole_word_rows(space)} if plugin.unit == "word" else _vocabulary(plugin, ctx, space)


def _vocabulary_sampler(plugin: Any, engine: Any, ctx: RunContext) -> Sampler:
    def sampler(row: int, group: str) -> Sample:
        if plugin.unit == "word":  # one word, decoded among the whole-word tokens
            return _engine_words(plugin, ctx, engine.space, row, group, "word")
        token_id = np.full(1, engine.space.token_ids[row], dtype=np.int64)
        return lambda n, rng: engine.privatize_ids(np.repeat(token_id, n), eta=plugin.eta, rng=rng)
    return sampler


def _pos_groups(plugin: Any, ctx: RunContext, _space: Any) -> dict[str, np.ndarray]:
    """The defense's selected POS categories (their rows may run past the space's: words held as pieces)."""
    return {category: rows for category, rows in pos_groups(ctx).items() if category in plugin.categories}


def _pos_sampler(plugin: Any, engine: Any, ctx: RunContext) -> Sampler:
    return lambda row, group: _engine_words(plugin, ctx, engine.space, row, group, "pos")


def _text_sampler(plugin: Any, engine: Any, ctx: RunContext) -> Sampler:
    """The defense's own ``privatize`` on a text of one one-token word; each released text is read back as the
    vocabulary token it is (-1: any other text), a post-processing, so a bound on it bounds the mechanism too."""
    space = engine.space
    row_of = token_rows(ctx, space)

    def sampler(row: int, _group: str) -> Sample:
        def sample(n: int, rng: np.random.Generator) -> np.ndarray:
            released, _ = plugin.privatize([space.tokens[row]] * n, eta=plugin.eta, rng=rng, ctx=ctx)
            return np.array([row_of.get(text.strip(), -1) for text in released], dtype=np.int64)
        return sample

    return sampler


def _word_groups(plugin: Any, ctx: RunContext, space: Any) -> dict[str, np.ndarray]:
    """The groups of words the plugin names (``audit_groups``), as rows of the space."""
    row_of = token_rows(ctx, space)
    return {group: np.array([row_of[w] for w in members if w in row_of], dtype=np.int64)
            for group, members in plugin.audit_groups(ctx).items()}


def _word_sampler(plugin: Any, engine: Any, ctx: RunContext) -> Sampler:
    space = engine.space
    row_of = token_rows(ctx, space)

    def sampler(row: int, _group: str) -> Sample:
        def sample(n: int, rng: np.random.Generator) -> np.ndarray:
            released, _ = plugin.release_words([space.tokens[row]] * n, epsilon=plugin.epsilon, rng=rng, ctx=ctx)
            return np.array([row_of.get(w, -1) for w in released], dtype=np.int64)
        return sample

    return sampler


def _word_metric(plugin: Any, ctx: RunContext, space: Any) -> Callable[[int, int], float]:
    """The plugin's own metric (``audit_distance``): Mahalanobis, CusText's per set."""
    return lambda row, other: float(plugin.audit_distance(space.tokens[row], space.tokens[other], ctx=ctx))


def _vector_sampler(plugin: Any, engine: Any, ctx: RunContext) -> Sampler:
    def sampler(row: int, _group: str) -> Sample:
        text = engine.space.tokens[row]
        return lambda n, rng: np.concatenate(plugin.released_vectors([text] * n, rng=rng, ctx=ctx))

    return sampler


def _upload_sampler(plugin: Any, engine: Any, ctx: RunContext) -> Sampler:
    vectors = engine.space.vectors

    def sampler(row: int, _group: str) -> Sample:
        clean = vectors[row][None, :]
        return lambda n, rng: plugin.upload(np.repeat(clean, n, axis=0), rng=rng, ctx=ctx)

    return sampler


#: Every protocol of :data:`~rapt_audit.api.capabilities.AUDIT_PROTOCOLS`, by name.
PROTOCOLS = {p.name: p for p in (
    Protocol(caps.DCHI_VOCABULARY, "the released token of one token, or (unit=word) word of one word", "eta",
             reads=("eta", "unit"), groups=_vocabulary_groups, sampler=_vocabulary_sampler),
    Protocol(caps.DCHI_POS, "the released word of one word, within its POS category", "eta",
             reads=("eta", "categories"), groups=_pos_groups, sampler=_pos_sampler, within="a "),
    Protocol(caps.DCHI_TEXT, "the released text of one one-token word, read back as a token", "eta",
             calls=("privatize",), reads=("eta",), keyword="eta", groups=_vocabulary, sampler=_text_sampler),
    Protocol(caps.WORD_MECHANISM, "the released word of one word", "epsilon",
             calls=("release_words", "audit_groups", "audit_distance"), reads=("epsilon",), groups=_word_groups,
             sampler=_word_sampler, metric=_word_metric),
    Protocol(caps.TOKEN_VECTORS, "the noisy embedding of one token", "eta", calls=("released_vectors",),
             reads=("eta",), groups=_vocabulary, sampler=_vector_sampler, vectors=True),
    Protocol(caps.CLIENT_UPLOAD, "the client's upload of one token", "eta", calls=("upload",), reads=("eta",),
             groups=_vocabulary, sampler=_upload_sampler, vectors=True),
    Protocol(caps.LAPLACE_REPRESENTATION, "the Laplace release of a normalised vector", "epsilon",
             calls=("laplace_release",), reads=("epsilon", "sensitivity")),
)}


def protocol_of(defense: str, plugin: Any) -> Protocol | None:
    """The protocol that audits ``plugin`` (the class or instance registered as ``defense``): the one its
    capabilities declare, else the first of :data:`~rapt_audit.api.capabilities.DETECTED` it supports, else None.

    Raises:
        PluginError: when it declares a protocol whose methods or parameters it does not have.
    """
    declared = declared_capabilities(plugin).audit
    if declared is None:
        return next((PROTOCOLS[name] for name in caps.DETECTED if PROTOCOLS[name].supports(plugin)), None)
    protocol = PROTOCOLS[declared]
    if not protocol.supports(plugin):
        raise PluginError(f"defense {defense!r} declares the audit protocol {declared!r} (Capabilities(audit=...)), "
                          f"which needs {protocol.needs()}, and it lacks some of them; implement them or declare "
                          "another protocol")
    return protocol


def description(plugin: Any, protocol: Protocol) -> str:
    """What the audit audits of ``plugin``, in its own words (``audit_description``), else the protocol's."""
    return str(getattr(plugin, "audit_description", None) or protocol.describes)


def claims_support(plugin: Any) -> bool:
    """Whether ``plugin`` claims that every release of a word of one of its groups is a word of that group: its
    ``claims_support()`` says so (PCT2T, RAPT, CusText, SanText+). The audit then checks that support too."""
    claims = getattr(plugin, "claims_support", None)
    return bool(claims()) if callable(claims) else False


__all__ = ["PROTOCOLS", "Protocol", "Sample", "Sampler", "claims_support", "description", "protocol_of",
           "token_rows"]
