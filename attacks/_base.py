"""Helpers every attack shares: disjointness checks, adaptive releases, minimum data sizes."""

from __future__ import annotations

from typing import Any, Sequence

from rapt_audit.api.context import RunContext
from rapt_audit.api.errors import DataError
from rapt_audit.api.types import AttackerData, Record, Release


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
