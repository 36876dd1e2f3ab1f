"""The base of every text-to-text defense: what a defense that rewrites the user's texts shares.

A text defense privatizes every text the user sends: the training texts the service customizes
on (``fit``) and the test texts it answers (``release``; users privatize at inference too, RAPT
Sec. III). Utility is therefore measured on privatized train and privatized test text, and the
test release the eavesdropper sees is the very text the service classifies.

:class:`TextDefense` carries no mechanism parameter: a subclass declares its own (a word-drop
probability, ...) and implements :meth:`TextDefense.privatize`. The dχ defenses (T2T, PCT2T, RAPT)
extend :class:`~rapt_audit.defenses._dchi_text.DchiTextDefense`, which adds η, the replacement target
calibrated to η and the service's privacy-adaptive pretraining. The only other parameters are the
service's customization settings (:class:`~rapt_audit.defenses._customization.Customized`), which shape
how the service trains on the privatized texts, never what is released.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Mapping, Sequence

import numpy as np

from rapt_audit.api.context import RunContext
from rapt_audit.api.errors import PluginError
from rapt_audit.api.types import Estimate, Record, Release, pair_text, uid_key
from rapt_audit.defenses._customization import Customized
from rapt_audit.defenses._pretraining import mechanism_parameters
from rapt_audit.mechanisms.analyses import text_entities
from rapt_audit.mechanisms.calibration import ReplacementCount
from rapt_audit.mechanisms.privatize import check_text
from rapt_audit.mechanisms.verbatim import verbatim_summary
from rapt_audit.utility.probes import require_labels


@dataclass
class TextDefense(Customized):
    """Base class of text defenses: subclasses implement :meth:`privatize` and declare their own parameters.

    Everything else — privatizing records (pairs included) with noise keyed by the records, memoising
    and storing the privatized texts, the release and its facts, the service's utility on privatized
    train and test text — is done here. A subclass's parameters are its dataclass fields, checked
    when it is built (:class:`~rapt_audit.api.params.CheckedParams`).

    Attributes:
        method, epochs, lr, lr_grid, patience, batch_size, max_length, virtual_tokens, precision: The
            service's customization (:class:`~rapt_audit.defenses._customization.Customized`), not the
            defense's: they set how the service trains on the privatized texts (``bow``, the default, is a
            quick bag-of-words probe).
    """

    exposes: ClassVar[frozenset[str]] = frozenset({"texts"})
    profiles: ClassVar[Mapping[str, Mapping[str, Any]]] = {}

    _train: tuple[Record, ...] = field(default=(), init=False, repr=False)
    _released: dict[int, tuple[list[str], ReplacementCount]] = field(default_factory=dict, init=False, repr=False)

    def privatize(self, texts: Sequence[str], *, rng: np.random.Generator,
                  ctx: RunContext) -> tuple[list[str], ReplacementCount]:
        """Privatize ``texts``: the released texts, one per input, and the count of units the mechanism
        perturbed, replaced and dropped (:class:`~rapt_audit.mechanisms.calibration.ReplacementCount`).

        Draw every random choice from ``rng`` (keyed by the records, so a release is reproducible)."""
        raise NotImplementedError

    def privacy_level(self, ctx: RunContext) -> float | None:
        """The privacy parameter in force that the released texts depend on beyond the mechanism's parameters
        (dχ: the effective η, which calibration may set), or ``None`` for a mechanism without one."""
        return None

    def _privatize_batch(self, texts: Sequence[str], *, rng: np.random.Generator,
                         ctx: RunContext) -> tuple[list[str], ReplacementCount]:
        """The one call through which records are privatized (the dχ base passes its η)."""
        return self.privatize(texts, rng=rng, ctx=ctx)

    def _privatized(self, texts: Sequence[str], *, rng: np.random.Generator,
                    ctx: RunContext) -> tuple[list[str], ReplacementCount]:
        """:meth:`_privatize_batch`'s answer, checked where it comes back (a plugin's ``privatize`` may break
        the contract, and would otherwise fail deep inside as ``too many values to unpack``).

        Raises:
            PluginError: unless the answer is one string per input text and a ``ReplacementCount``.
        """
        answer = self._privatize_batch(texts, rng=rng, ctx=ctx)
        if (isinstance(answer, tuple) and len(answer) == 2 and isinstance(answer[1], ReplacementCount)
                and isinstance(answer[0], Sequence) and not isinstance(answer[0], str)
                and len(answer[0]) == len(texts) and all(isinstance(t, str) for t in answer[0])):
            return list(answer[0]), answer[1]
        got = f"{type(answer).__name__} {repr(answer)[:80]}"
        if isinstance(answer, tuple) and len(answer) == 2 and isinstance(answer[0], Sequence):
            got = (f"({type(answer[0]).__name__} of {len(answer[0])} for {len(texts)} texts, "
                   f"{type(answer[1]).__name__})")
        raise PluginError(f"defense {self.name!r}: privatize() must return (released_texts, ReplacementCount), one "
                          f"string per input text (rapt_audit.plugin.ReplacementCount); it returned {got}")

    def add_public_prefix(self, texts: list[str], *, rng: np.random.Generator, ctx: RunContext) -> list[str]:
        """Hook for public material the user prepends to every privatized text (RAPT's plain tokens)."""
        return texts

    def fit(self, train: Sequence[Record], *, ctx: RunContext) -> TextDefense:
        """Check the customization settings and remember the training records.

        The settings are checked here, before any privatization, so that a prompt too long for the
        model fails in a second rather than after minutes of work.
        """
        self.check_service(ctx)
        self._train = tuple(train)
        return self

    def privatize_records(self, records: Sequence[Record], ctx: RunContext) -> tuple[list[str], ReplacementCount]:
        """The released texts of ``records`` (pairs and any public prefix included) and what was replaced.

        The noise is drawn from a generator keyed by the records' uids, so the same records give the
        same release within a run; the last few releases are memoised (fit, utility and release
        privatize the same splits), and an audit's later runs read them back from
        :attr:`RunContext.text_releases <rapt_audit.api.context.RunContext.text_releases>`.
        """
        key = uid_key(records)
        if key not in self._released:
            for r in records:  # before spaCy or the tokenizer fail on it deep inside
                check_text(pair_text(r.text, r.text_pair), name=f"record {r.uid!r}")
            level = self.privacy_level(ctx)

            def fresh() -> tuple[list[str], ReplacementCount]:
                rng = ctx.rng("release", self.name, key)
                texts, count = self._privatized([r.text for r in records], rng=rng, ctx=ctx)
                pairs = [r.text_pair for r in records]
                if any(p is not None for p in pairs):
                    pair_texts, pair_count = self._privatized([p or "" for p in pairs], rng=rng, ctx=ctx)
                    count.add(pair_count)
                    texts = [pair_text(t, p if r.text_pair is not None else None)
                             for t, p, r in zip(texts, pair_texts, records)]
                return self.add_public_prefix(texts, rng=rng, ctx=ctx), count

            store = ctx.text_releases  # an audit's store of earlier runs' privatizations (None: privatize)
            released = fresh() if store is None else store.privatized(
                self, mechanism=mechanism_parameters(self), eta=level, records=records, compute=fresh)
            self._released = {key: released} | {k: v for k, v in list(self._released.items())[-3:]}
        return self._released[key]

    def mechanism_facts(self, count: ReplacementCount, ctx: RunContext) -> dict[str, Any]:
        """Facts of the mechanism recorded in the release after its name (the dχ base: η, observed replacement)."""
        return {}

    def release(self, records: Sequence[Record], *, ctx: RunContext) -> Release:
        """The privatized texts (deterministic for a given run seed and set of records)."""
        texts, count = self.privatize_records(records, ctx)
        originals = [pair_text(r.text, r.text_pair) for r in records]
        meta = {"mechanism": self.name, **self.mechanism_facts(count, ctx),
                "units_perturbed": count.perturbed, "units_dropped": count.dropped,
                "verbatim": verbatim_summary(originals, texts, count, entities=text_entities(ctx, originals)),
                **({"customization": self._training} if self._training else {})}
        return Release(uids=[r.uid for r in records], texts=texts, meta=meta)

    def service_encoder(self, ctx: RunContext) -> tuple[Any, dict[str, Any] | None]:
        """The encoder the service customizes and the record of how it was adapted (``None, None``: the public
        one as it is; the dχ base adapts it by privacy-adaptive pretraining when asked)."""
        return None, None

    def utility(self, test: Sequence[Record], *, ctx: RunContext) -> Mapping[str, Estimate]:
        """Task utility: the service customizes on privatized train text and answers the privatized test release.

        ``method="bow"`` is a quick TF-IDF + logistic-regression probe; ``prompt``, ``prefix``, ``lora``
        and ``full`` customize the public encoder (rapt_audit.utility.customize).
        """
        y_train = require_labels(self._train, split="victim_train")
        require_labels(test, split="victim_test")  # fail before minutes of training; the labels are used below
        train_texts, _ = self.privatize_records(self._train, ctx)

        def test_split() -> tuple[list[str], np.ndarray]:  # privatized and read only once the model is final
            return self.privatize_records(test, ctx)[0], require_labels(test, split="victim_test")

        # The probe reads no encoder, so it never pretrains one.
        loaded, adaptation = (None, None) if self.method == "bow" else self.service_encoder(ctx)
        estimates = self.service_scores(train_texts, y_train, test_split, ctx=ctx, key=self.name, loaded=loaded)
        if adaptation is not None:
            self._training["pretraining"] = adaptation
        return estimates


__all__ = ["TextDefense"]
