"""What every attack shares: the base class, disjointness checks, adaptive releases, minimum data sizes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Mapping, Sequence

from rapt_audit.api.context import RunContext
from rapt_audit.api.errors import DataError
from rapt_audit.api.params import CheckedParams
from rapt_audit.api.threat import ThreatModel
from rapt_audit.api.types import AttackerData, AttackResult, Record, Release


@dataclass
class BaseAttack(CheckedParams):
    """Base class of attacks: set ``requires`` (and ``threat_model``), implement :meth:`attack`.

    An attack's parameters are its dataclass fields, checked when it is built
    (:class:`~rapt_audit.api.params.CheckedParams`); put ``@dataclass`` on the subclass too. The base adds
    no parameter, so a subclass's parameters are exactly its own.

    Class attributes a subclass sets:
        requires: The release kinds it reads (``texts``, ``token_embeddings``, ``sequence_embeddings``);
            the runner pairs it only with defenses whose release holds one of them and records the other
            pairs as skipped. Empty here, which the plugin check refuses: every attack must say what it reads.
        threat_model: What its adversary uses, as data (:class:`~rapt_audit.api.threat.ThreatModel`:
            ``knows``, ``adaptive``, ``auxiliary``); results record it and the report groups attacks by it.
            ``None`` here: shown as undeclared.
        tags: Selection tags (``--attacks tag:NAME``); ``adaptive`` follows from ``threat_model``.
        profiles: Parameter overrides per cost profile; keep ``smoke`` (tests, plugin check) to seconds.
    """

    requires: ClassVar[frozenset[str]] = frozenset()
    threat_model: ClassVar[ThreatModel | None] = None
    tags: ClassVar[tuple[str, ...]] = ()
    profiles: ClassVar[Mapping[str, Mapping[str, Any]]] = {}

    def fit(self, aux: AttackerData, defense: Any, *, ctx: RunContext) -> BaseAttack:
        """Learn from the attacker's own data and return the attack itself; here nothing to learn.

        ``aux`` (``aux.train``, ``aux.valid``) is disjoint from every victim record. An adaptive attack
        overrides this to train on :func:`adaptive_release` of ``aux.train`` (the mechanism is public) and to
        choose thresholds or epochs on ``aux.valid``, never on the victim's data; it may raise
        ``Skip(reason)`` when the pair cannot run.
        """
        return self

    def attack(self, release: Release, truth: Sequence[Record], *, ctx: RunContext) -> AttackResult:
        """Attack the victim's ``release`` and score it against ``truth``, the original records (the auditor's).

        Returns an :class:`~rapt_audit.api.types.AttackResult` whose ``empirical_privacy`` is 1 − attack
        success in [0, 1] (higher is better for the defender), an interval from
        :func:`~rapt_audit.scoring.stats.bootstrap_mean` over records (``Estimate.complement()`` turns a
        success into it), and ``metrics`` of declared metrics only
        (:func:`~rapt_audit.scoring.metrics.metric`). Raise ``Skip(reason)`` when the pair cannot run
        (nothing to recover); anything else raised is recorded as the attack's failure. Draw randomness
        from ``ctx.rng(...)`` only.
        """
        raise NotImplementedError(f"attack {getattr(self, 'name', type(self).__name__)!r} must implement "
                                  "attack(release, truth, *, ctx)")


def check_disjoint(aux: AttackerData, truth: Sequence[Record]) -> None:
    """Fail loudly if any victim record is in the attacker's data (the attacker's splits are disjoint from the
    victim's, so an attack cannot score itself on records it trained on)."""
    seen = {r.uid for r in aux.train} | {r.uid for r in aux.valid}
    overlap = [r.uid for r in truth if r.uid in seen]
    if overlap:
        raise AssertionError(f"victim records {overlap[:3]} are also in the attacker's data")


def require_size(records: Sequence[Record], minimum: int, *, attack: str, what: str) -> None:
    """Raise a :class:`DataError` saying how much data the attack needs when it has too little."""
    if len(records) < minimum:
        raise DataError(f"attack {attack!r} needs at least {minimum} {what} records but the attacker has "
                        f"{len(records)}; raise them with --set data.attacker_train=N (or data.attacker_valid=N)")


def adaptive_release(defense: Any, records: Sequence[Record], *, ctx: RunContext) -> Release:
    """The defense applied to the attacker's own records (Kerckhoffs: the mechanism is public)."""
    return defense.release(records, ctx=ctx)


__all__ = ["BaseAttack", "adaptive_release", "check_disjoint", "require_size"]
