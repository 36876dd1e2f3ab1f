"""Core data types and plugin protocols of rapt-audit.

Everything that crosses a module boundary is one of the frozen dataclasses below, so that a defense, an
attack, the runner and the report all speak the same small vocabulary:

* :class:`Record` — one example of a dataset, with its private attributes and gold entities; :class:`Release` —
  exactly what crosses the trust boundary (what the adversary observes); :class:`Estimate` — a number with its
  confidence interval; :class:`AttackResult` — what one attack measured against one release; :class:`Skip` — why
  a pair did not run; :class:`AttackFailure` — an attack that raised or broke its contract.
* :class:`Defense` / :class:`Attack` — the plugin protocols (plain dataclasses satisfy them).

This module must stay cheap to import: no torch, no transformers, no numpy at import time.
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, ClassVar, Mapping, Protocol, Sequence, runtime_checkable

from rapt_audit.api.context import RunContext

if TYPE_CHECKING:  # pragma: no cover - typing only
    import numpy as np


#: The kinds of release a defense can expose: privatized texts (text-to-text defenses), one noisy
#: vector per token (embedding defenses) or one vector per record (representation defenses).
RELEASE_KINDS = frozenset({"texts", "token_embeddings", "sequence_embeddings"})


def _frozen_mapping(value: Mapping[str, Any] | None) -> Mapping[str, Any]:  # an immutable copy
    return MappingProxyType(dict(value or {}))


@dataclass(frozen=True)
class Span:
    """A gold entity span over ``Record.text``: characters ``[start, end)`` with a type label."""

    start: int
    end: int
    label: str

    def __post_init__(self) -> None:
        if not (0 <= self.start < self.end):
            raise ValueError(f"entity span must satisfy 0 <= start < end, got [{self.start}, {self.end})")


@dataclass(frozen=True)
class Record:
    """One example: the private text a user would privatize, plus what an auditor knows about it.

    Attributes:
        uid: Identifier unique within the dataset (``"sst2/train/17"``); used to keep victim and
            attacker data disjoint.
        text: The raw text (for pair tasks, the first text).
        label: Task label index (``None`` when the dataset has no task label).
        attributes: Private attributes (``gender``, ``age``...) as strings, for attribute inference.
        entities: Gold entity spans over ``text``, for the NER extraction attack.
        text_pair: Second text of a pair task (QQP), else ``None``.
        group: What it is split with (review sentence, author, document; ``None``: itself), never in its uid.
    """

    uid: str
    text: str
    label: int | None = None
    attributes: Mapping[str, str] = field(default_factory=dict)
    entities: tuple[Span, ...] = ()
    text_pair: str | None = None
    group: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "attributes", _frozen_mapping(self.attributes))
        object.__setattr__(self, "entities", tuple(self.entities))
        for span in self.entities:
            if span.end > len(self.text):
                raise ValueError(f"record {self.uid}: entity span {span} runs past the end of the text")


def pair_text(text: str, pair: str | None) -> str:
    """One string for a single text or a text pair (pair tasks are joined with a separator)."""
    return text if pair is None else f"{text} ||| {pair}"


@dataclass(frozen=True)
class Release:
    """What the adversary observes for a batch of records, in the records' order.

    One or more of ``texts``, ``token_embeddings`` and ``sequence_embeddings`` is set, matching the
    defense's ``exposes`` set; none only for a defense that exposes nothing (a local-only baseline,
    ``defenses/local.py``), whose release no attack can read.

    Attributes:
        uids: The uids of the released records, in order.
        texts: Privatized texts (text-to-text defenses).
        token_embeddings: One ``(n_tokens_i, d)`` array per record (noisy token embeddings).
        sequence_embeddings: One ``(n, d)`` array, a privatized vector per record.
        meta: Free-form facts about the release a fair attacker may know (mechanism, eta, ...).
    """

    uids: tuple[str, ...]
    texts: tuple[str, ...] | None = None
    token_embeddings: tuple[np.ndarray, ...] | None = None
    sequence_embeddings: np.ndarray | None = None
    meta: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "uids", tuple(self.uids))
        object.__setattr__(self, "meta", _frozen_mapping(self.meta))
        if self.texts is not None:
            object.__setattr__(self, "texts", tuple(self.texts))
        if self.token_embeddings is not None:
            object.__setattr__(self, "token_embeddings", tuple(self.token_embeddings))
        n = len(self.uids)
        for kind in self.kinds:
            length = len(getattr(self, kind))
            if length != n:
                raise ValueError(f"release has {n} uids but {length} {kind}")

    def user_texts(self) -> tuple[str, ...] | None:
        """The released texts without the public prefix a protocol prepends to each (RAPT's plain tokens).

        ``meta["plain_prefix_words"]`` = m says that every text starts with m space-separated public
        words; the adversary knows the protocol, so attacks read only what follows them.
        """
        m = int(self.meta.get("plain_prefix_words", 0) or 0)
        if self.texts is None or m == 0:
            return self.texts
        return tuple(parts[m] if len(parts) > m else "" for parts in (t.split(" ", m) for t in self.texts))

    @property
    def kinds(self) -> frozenset[str]:
        """The release kinds actually present."""
        return frozenset(k for k in RELEASE_KINDS if getattr(self, k) is not None)


def _compact(number: float) -> float | int:
    """A per-record number as short JSON: counts as integers, other values to 12 significant digits."""
    rounded = float(f"{number:.12g}")
    return int(rounded) if rounded.is_integer() and abs(rounded) < 2**53 else rounded


@dataclass(frozen=True)
class PerRecord:
    """The per-record parts of a ratio estimate, in the records' order: value = Σ num / Σ den.

    A token accuracy keeps correct tokens (``num``) and tokens (``den``) per record; a plain mean keeps
    the values with unit weights; an entity F1 keeps 2·TP and predicted + reference entities. Two
    results of the same cell hold the same records in the same order, so their per-record parts can be
    compared *paired* (record by record), which the regression gate does (:mod:`rapt_audit.reporting.check`):
    a paired test sees a drop of one point that two independent intervals hide.
    """

    num: tuple[float, ...]
    den: tuple[float, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "num", tuple(float(v) for v in self.num))
        object.__setattr__(self, "den", tuple(float(v) for v in self.den))
        if len(self.num) != len(self.den):
            raise ValueError(f"per-record parts differ in length: {len(self.num)} numerators, {len(self.den)} "
                             "denominators")
        if any(not math.isfinite(v) for v in self.num + self.den) or any(d < 0 for d in self.den):
            raise ValueError("per-record parts must be finite, with non-negative denominators")

    def __len__(self) -> int:
        return len(self.num)

    @property
    def value(self) -> float:
        """Σ num / Σ den (0 when no record carries weight)."""
        total = sum(self.den)
        return sum(self.num) / total if total > 0 else 0.0

    def complement(self) -> PerRecord:
        """The parts of ``1 − value``: each record's ``den − num`` over the same ``den``."""
        return PerRecord(tuple(d - n for n, d in zip(self.num, self.den)), self.den)

    def to_dict(self) -> dict[str, list[float | int] | float | int]:
        """Plain-JSON form: two lists of numbers, ``den`` as one number when every record shares it.

        An accuracy or a plain mean has a denominator of 1 for every record; writing it once halves
        what a result file spends on these parts (each number takes a line of the indented file).
        """
        num = [_compact(v) for v in self.num]
        if self.den and all(d == self.den[0] for d in self.den):
            return {"num": num, "den": _compact(self.den[0])}
        return {"num": num, "den": [_compact(v) for v in self.den]}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PerRecord:
        """Inverse of :meth:`to_dict` (``den`` a list, or one number shared by every record)."""
        den = data["den"]
        return cls(tuple(data["num"]), (den,) * len(data["num"]) if isinstance(den, (int, float)) else tuple(den))


@dataclass(frozen=True)
class Estimate:
    """A point estimate with a two-sided confidence interval.

    Attributes:
        value: The point estimate.
        ci_low: Lower end of the interval.
        ci_high: Upper end of the interval.
        n: The number of independent units the interval is computed over.
        method: How the interval was computed (``"bootstrap-percentile"``, ``"wilson"``...).
        level: Confidence level of the interval.
        per_record: The per-record parts of a ratio estimate, when the scorer kept them (for paired
            comparisons of two runs over the same records); not part of equality.
    """

    value: float
    ci_low: float
    ci_high: float
    n: int = 0
    method: str = ""
    level: float = 0.95
    per_record: PerRecord | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        for name in ("value", "ci_low", "ci_high"):
            if math.isnan(getattr(self, name)):
                raise ValueError(f"Estimate.{name} is NaN")
        if not (self.ci_low <= self.value <= self.ci_high):
            raise ValueError(f"Estimate value {self.value} lies outside its interval [{self.ci_low}, {self.ci_high}]")
        # Parts that do not add up to the value would make a paired comparison judge other numbers
        # than the ones reported (a scorer bug, or an edited file).
        if self.per_record is not None and abs(self.per_record.value - self.value) > 1e-9 * max(1.0, abs(self.value)):
            raise ValueError(f"Estimate value {self.value} disagrees with its per-record parts, which give "
                             f"{self.per_record.value}")

    def complement(self) -> Estimate:
        """``1 - self``, with the interval flipped (attack success → empirical privacy)."""
        parts = self.per_record.complement() if self.per_record is not None else None
        return Estimate(1.0 - self.value, 1.0 - self.ci_high, 1.0 - self.ci_low, self.n, self.method, self.level,
                        parts)

    def to_dict(self, *, per_record: bool = False) -> dict[str, Any]:
        """Plain-JSON form used in ``result.json``.

        ``per_record=True`` adds the per-record parts when they were kept. Results store them for the
        privacy measures the regression gate compares and the task accuracy the claims compare, not
        for every number (they grow with the data).
        """
        out: dict[str, Any] = {"value": self.value, "ci_low": self.ci_low, "ci_high": self.ci_high,
                               "n": self.n, "method": self.method, "level": self.level}
        if per_record and self.per_record is not None:
            out["per_record"] = self.per_record.to_dict()
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Estimate:
        """Inverse of :meth:`to_dict`."""
        parts = PerRecord.from_dict(data["per_record"]) if data.get("per_record") is not None else None
        return cls(float(data["value"]), float(data["ci_low"]), float(data["ci_high"]),
                   int(data.get("n", 0)), str(data.get("method", "")), float(data.get("level", 0.95)), parts)


@dataclass(frozen=True)
class AttackResult:
    """What one attack measured against one release.

    Attributes:
        empirical_privacy: The headline number, higher-is-better for the defender: ``1 - attack
            success`` as in the RAPT paper (for MSE-type attacks, the MSE itself; for attribute
            inference, the chance-normalised ``attribute_privacy.<attr>``, 1 at or below the majority guess).
        metrics: Every metric the attack computed, by registered metric name.
        details: Extra JSON-serialisable facts (baselines, sample sizes, silver-scoring flags...).
    """

    empirical_privacy: Estimate
    metrics: Mapping[str, Estimate]
    details: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "metrics", _frozen_mapping(self.metrics))
        object.__setattr__(self, "details", _frozen_mapping(self.details))


@dataclass(frozen=True)
class AttackerData:
    """The adversary's own auxiliary data, disjoint from every victim record.

    Attributes:
        train: Records the attacker trains on.
        valid: Records the attacker selects epochs and thresholds on (never the victim's test split).
    """

    train: tuple[Record, ...]
    valid: tuple[Record, ...]


@runtime_checkable
class Defense(Protocol):
    """A local privacy defense: a dataclass whose fields are its hyperparameters.

    ``fit`` trains whatever the defense needs for its task model on privatized victim-train data,
    ``utility`` measures task quality on victim-test data, and ``release`` returns what the adversary
    observes. Heavy imports (torch, transformers) happen inside these methods, never at import time.
    ``name`` is the registration name, set by the registry (a plugin does not write it).
    """

    name: ClassVar[str]
    exposes: ClassVar[frozenset[str]]

    def fit(self, train: Sequence[Record], *, ctx: RunContext) -> Defense: ...

    def utility(self, test: Sequence[Record], *, ctx: RunContext) -> Mapping[str, Estimate]: ...

    def release(self, records: Sequence[Record], *, ctx: RunContext) -> Release: ...


@runtime_checkable
class Attack(Protocol):
    """An adversary: a dataclass whose fields are its hyperparameters.

    ``fit`` may call ``defense.release`` on the attacker's own data (Kerckhoffs: the mechanism and its
    parameter are public), which makes the attack adaptive. ``attack`` then scores the victim's
    release against the victim's original records (``truth``), which only the auditor holds. An attack
    states what it assumes in a ``threat_model`` class attribute (:class:`rapt_audit.api.threat.ThreatModel`);
    ``name`` is the registration name, set by the registry.
    """

    name: ClassVar[str]
    requires: ClassVar[frozenset[str]]

    def fit(self, aux: AttackerData, defense: Defense, *, ctx: RunContext) -> Attack: ...

    def attack(self, release: Release, truth: Sequence[Record], *, ctx: RunContext) -> AttackResult: ...


class Skip(Exception):
    """Raised by an attack (or the runner) when a pair cannot run; the message is the reason.

    A skip is not an error, and it has one shape everywhere: a result holds the :class:`Skip` as the
    pair's outcome (``RunResult.attacks[name]``, next to :class:`AttackResult`), and ``result.json``
    holds ``{"skipped": reason}`` (:meth:`to_dict` / :meth:`from_dict`). Skips with the same reason
    are equal; a skip also equals its reason as a plain string, the in-memory shape of older code.
    """

    def __init__(self, reason: object) -> None:
        super().__init__(str(reason))

    @property
    def reason(self) -> str:
        """Why the pair could not run."""
        return str(self.args[0])

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (Skip, str)):
            return self.reason == str(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.reason)

    def to_dict(self) -> dict[str, str]:
        """The JSON form recorded in ``result.json``."""
        return {"skipped": self.reason}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | str) -> Skip:
        """Inverse of :meth:`to_dict`; a bare reason string (the older shape) is read as well."""
        return cls(data if isinstance(data, str) else data["skipped"])


@dataclass(frozen=True)
class AttackFailure:
    """The outcome of an attack that raised (anything but :class:`Skip`) or broke its contract.

    The runner records it in place of an :class:`AttackResult` and keeps every other attack, so one
    broken plugin never costs the rest of a run; ``result.json`` holds ``{"failed": message}``, and
    reports show "failed: …" where a number would stand, never a number.

    Attributes:
        message: Which plugin failed and how: the exception and where it was raised, or the contract
            it broke (what was expected, what came back).
    """

    message: str

    def to_dict(self) -> dict[str, str]:
        """The JSON form recorded in ``result.json``."""
        return {"failed": self.message}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> AttackFailure:
        """Inverse of :meth:`to_dict`."""
        return cls(str(data["failed"]))


#: What a run records for one attack.
Outcome = AttackResult | Skip | AttackFailure


def uid_key(records: Sequence[Record]) -> int:
    """A stable key of a set of records, so each distinct batch gets its own noise stream."""
    return zlib.crc32("\n".join(r.uid for r in records).encode("utf-8"))
