"""The base of every token-embedding defense: the user releases one vector per token of each text.

A token-embedding defense maps each text's clean token input embeddings (the public model's tokenizer,
no special tokens; one row of the model's input table per token) to released rows, one per token, and
sends those instead of the text. :class:`TokenEmbeddingDefense` carries no mechanism parameter: a
subclass declares its own (η for the built-in ``embedding``, a noise scale, ...) and implements
:meth:`TokenEmbeddingDefense.perturb`. Everything else is the same for every such mechanism and lives
here: the clean rows, releases keyed by the records (so a seed reproduces them), the release itself, and
the service's utility.

The service is Qu et al.'s (CIKM 2021, Sec. 3.3, Fig. 1.c): it receives the privatized training release
and labels, puts [CLS] and [SEP] around each sequence itself (clean, from its own table), feeds the
released vectors as the input embeddings of the text's positions (position embeddings are added by the
encoder as usual) and customizes the public encoder on them by ``method`` — prompt tuning by default,
``prefix``, ``lora`` or ``full`` — exactly as the text defenses' services do (same settings, learning rate
and epoch chosen on a validation split of the privatized training release, never the test split); it then
answers the privatized test release. ``method=probe`` is a cheaper service that does not adapt to the
noise: a logistic-regression probe on the frozen encoder's mean-pooled output of the released vectors;
``method=head`` reads that output with the local encoder client's MLP head (embedding as a service, SnD's).
These settings, ``decode_nearest`` included, are the service's (a parameter group), never the mechanism's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any, ClassVar, Mapping, Sequence

import numpy as np

from rapt_audit.api.context import RunContext
from rapt_audit.api.errors import PluginError, UsageError
from rapt_audit.api.params import Check
from rapt_audit.api.types import Estimate, Record, Release, uid_key
from rapt_audit.defenses._customization import HEAD, Customized
from rapt_audit.encoder.encode import pooled_from_embeddings
from rapt_audit.mechanisms.engines import token_engine
from rapt_audit.utility.customize import METHODS, check_method
from rapt_audit.utility.probes import probe_utility, require_labels
from rapt_audit.utility.token_vectors import TokenVectors


def check_embedding_method(method: str) -> str:
    """A customization method, ``probe`` (logistic regression on the frozen encoder's pooled output) or ``head``
    (the local encoder client's MLP head on that output: embedding as a service)."""
    if method in ("probe", HEAD):
        return method
    if method == "bow":
        raise UsageError("a token-embedding defense releases vectors, not text, so the bag-of-words probe "
                         "(method=bow) does not apply; choose probe, head or one of: " + ", ".join(METHODS))
    return check_method(method)


@dataclass
class TokenEmbeddingDefense(Customized):
    """Base class of token-embedding defenses: subclasses implement :meth:`perturb` and declare their own parameters.

    Attributes:
        method: ``prompt`` (default), ``prefix``, ``lora``, ``full``, ``probe`` or ``head``: how the service uses
            the released vectors (see the module docstring).
        decode_nearest: The service first maps each released vector to its nearest regular vocabulary
            token and customizes on those tokens' own embedding rows: post-processing of the release (no
            privacy cost). Off by default (Qu et al.'s service does not decode).
        epochs, lr, lr_grid, patience, batch_size, max_length, virtual_tokens, precision: The service's
            customization (:class:`~rapt_audit.defenses._customization.Customized`).
    """

    exposes: ClassVar[frozenset[str]] = frozenset({"token_embeddings"})
    #: The released rows are the service's input rows (the client holds the service's embedding table, as in
    #: SnD): the defense and the attacks on it run in the service's view of the run (rapt_audit.pipeline.roles).
    input_space: ClassVar[str] = "service"
    #: One epoch keeps the smoke profile (CI, conformance checks) to seconds, as for RAPT.
    profiles: ClassVar[Mapping[str, Mapping[str, Any]]] = {"smoke": {"epochs": 1}}
    #: ``method`` and ``decode_nearest`` are the service's settings: listed after the mechanism's own.
    parameter_group: ClassVar[str] = "the service's customization"

    method: Annotated[str, Check(check_embedding_method)] = "prompt"
    decode_nearest: bool = False
    _train: tuple[Record, ...] = field(default=(), init=False, repr=False)
    _released: dict[int, list[np.ndarray]] = field(default_factory=dict, init=False, repr=False)

    def perturb(self, vectors: list[np.ndarray], *, rng: np.random.Generator, ctx: RunContext) -> list[np.ndarray]:
        """The released rows of a batch of texts: one array per input array, each of the same ``(n_tokens, d)`` shape.

        ``vectors[i]`` holds text ``i``'s clean token input embeddings (float32, row ``j`` is its
        ``j``-th token's row of the public model's input table); the answer's rows stay aligned with
        those tokens (attacks score recovery position by position). It may be modified in place. Draw
        every random choice from ``rng`` (keyed by the records, so a release is reproducible).
        """
        raise NotImplementedError

    def mechanism_facts(self, ctx: RunContext) -> dict[str, Any]:
        """Facts of the mechanism recorded in the release after its name (``embedding``: η)."""
        return {}

    def clean_vectors(self, texts: Sequence[str], ctx: RunContext) -> list[np.ndarray]:
        """Each text's tokens (model tokenizer, no special tokens) as float32 rows of the model's input table.

        Unknown characters give the [UNK] row: their identity was lost by the tokenizer before any privacy.
        """
        engine = token_engine(ctx)
        table = engine.space.all_vectors
        return [table[np.asarray(ids, dtype=np.int64)].astype(np.float32) for ids in engine.token_ids(texts)]

    def released_vectors(self, texts: Sequence[str], *, rng: np.random.Generator,
                         ctx: RunContext) -> list[np.ndarray]:
        """One float32 ``(n_tokens, d)`` array of released rows per text: :meth:`perturb` of the clean rows.

        Raises:
            PluginError: unless ``perturb`` returns one array per text, each of its input's shape.
        """
        clean = self.clean_vectors(texts, ctx)
        shapes = [v.shape for v in clean]
        answer = self.perturb(clean, rng=rng, ctx=ctx)
        # Checked where it comes back: a wrong shape would otherwise fail deep inside the service or an attack.
        if (isinstance(answer, Sequence) and len(answer) == len(shapes)
                and all(isinstance(a, np.ndarray) and a.shape == s for a, s in zip(answer, shapes))):
            return [np.asarray(a, dtype=np.float32) for a in answer]
        got = (f"{type(answer).__name__} of shapes {[getattr(a, 'shape', type(a).__name__) for a in answer][:3]}"
               if isinstance(answer, Sequence) else f"{type(answer).__name__} {repr(answer)[:80]}")
        raise PluginError(f"defense {self.name!r}: perturb() must return one numpy array per text, each of its input's "
                          f"shape (first shapes {shapes[:3]}, {len(shapes)} texts); it returned {got}")

    def _release_records(self, records: Sequence[Record], ctx: RunContext) -> list[np.ndarray]:
        """The released rows of ``records``, with noise keyed by their uids; the last few releases memoised
        (fit, utility and release privatize the same splits)."""
        key = uid_key(records)
        if key not in self._released:
            rng = ctx.rng("release", self.name, key)
            fresh = self.released_vectors([r.text for r in records], rng=rng, ctx=ctx)
            self._released = {key: fresh} | dict(list(self._released.items())[-2:])
        return self._released[key]

    def fit(self, train: Sequence[Record], *, ctx: RunContext) -> TokenEmbeddingDefense:
        """Check the customization settings, then remember the training records (privatized lazily for utility)."""
        self.check_service(ctx)  # a prompt too long for the model fails now, not after other work
        self._train = tuple(train)
        return self

    def release(self, records: Sequence[Record], *, ctx: RunContext) -> Release:
        """The released token rows of each record's ``text`` (a record's ``text_pair`` is not sent)."""
        vectors = self._release_records(records, ctx)
        meta: dict[str, Any] = {"mechanism": self.name, **self.mechanism_facts(ctx)}
        if self._training:
            meta["customization"] = self._training
        return Release(uids=[r.uid for r in records], token_embeddings=vectors, meta=meta)

    def utility(self, test: Sequence[Record], *, ctx: RunContext) -> Mapping[str, Estimate]:
        """Task utility: the service customizes on the privatized training release and answers the test release.

        ``method="probe"`` is the logistic-regression probe on the frozen encoder's pooled output instead.
        """
        y_train = require_labels(self._train, split="victim_train")
        require_labels(test, split="victim_test")  # fail before minutes of training; the labels are used below
        train_vectors = self.service_input(self._release_records(self._train, ctx), ctx)
        if self.method in ("probe", HEAD):
            model = ctx.service()  # this defense runs in the service's view: ctx.encoder() is the service's too
            x_train = pooled_from_embeddings(model, train_vectors)

            def pooled_test() -> tuple[np.ndarray, np.ndarray]:
                return (pooled_from_embeddings(model, self.service_input(self._release_records(test, ctx), ctx)),
                        require_labels(test, split="victim_test"))

            if self.method == HEAD:
                return self.head_scores(x_train, y_train, pooled_test, ctx=ctx, key=self.name)
            return probe_utility(x_train, y_train, *pooled_test(), rng=ctx.rng("utility", self.name))

        def test_split() -> tuple[TokenVectors, np.ndarray]:  # privatized and read only once the model is final
            return (TokenVectors.of(self.service_input(self._release_records(test, ctx), ctx)),
                    require_labels(test, split="victim_test"))

        return self.customized_scores(TokenVectors.of(train_vectors), y_train, test_split, ctx=ctx, key=self.name)

    def service_input(self, released: Sequence[np.ndarray], ctx: RunContext) -> list[np.ndarray]:
        """What the service feeds its encoder: the released vectors, or with ``decode_nearest`` the embedding
        rows of their nearest regular vocabulary tokens."""
        if not self.decode_nearest or not released:
            return list(released)
        engine = token_engine(ctx)
        flat = np.concatenate([np.asarray(v, dtype=np.float32).reshape(-1, engine.space.dim) for v in released])
        rows = engine.index.search(flat) if len(flat) else np.zeros(0, np.int64)
        decoded = engine.space.vectors[rows].astype(np.float32)
        return np.split(decoded, np.cumsum([len(v) for v in released])[:-1])


__all__ = ["TokenEmbeddingDefense", "check_embedding_method"]
