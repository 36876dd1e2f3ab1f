"""Attacks grouped by their threat model in a report: what each attacker knows, whether it adapts, what it holds.

A result records each attack's declared :class:`~rapt_audit.api.threat.ThreatModel` in
``env.threat_models``; a result written before that was recorded is read with the threat model the
installed attack declares, and an attack that declares none (or that is not installed) is shown as
undeclared, never guessed.
"""

from __future__ import annotations

import html
from typing import Callable, Iterable

from rapt_audit.api.plugins import ATTACKS, load
from rapt_audit.api.threat import UNDECLARED, ThreatModel, declared_threat_model
from rapt_audit.reporting.summary import Group

e = html.escape


def threat_model_of(group: Group, attack: str) -> ThreatModel | str:
    """``attack``'s threat model in ``group``: as its results recorded it, else as the installed attack declares
    it, else :data:`~rapt_audit.api.threat.UNDECLARED`."""
    for row in group.rows:
        for item in row.runs:
            recorded = (item.result.env.get("threat_models") or {}).get(attack)
            if recorded == UNDECLARED:
                return UNDECLARED
            if isinstance(recorded, dict):
                try:
                    return ThreatModel.from_dict(recorded)
                except (TypeError, ValueError):  # written by another version with other values: not guessed
                    return UNDECLARED
    try:
        load()
    except Exception:  # noqa: BLE001 - a broken third-party plugin must not stop a report of stored files
        pass
    found = declared_threat_model(ATTACKS.get(attack)) if attack in ATTACKS else None
    return UNDECLARED if found is None else found


def by_threat_model(group: Group, attacks: Iterable[str]) -> list[tuple[ThreatModel | str, list[str]]]:
    """``attacks`` grouped by threat model, in their order inside each group: the attacks that do not adapt to
    the defense first, then the adaptive ones, then those whose threat model is undeclared."""
    groups: dict[ThreatModel | str, list[str]] = {}
    for attack in attacks:
        groups.setdefault(threat_model_of(group, attack), []).append(attack)

    def order(model: ThreatModel | str) -> tuple[int, str]:
        return (2, "") if not isinstance(model, ThreatModel) else (int(model.adaptive), model.label())

    return [(model, groups[model]) for model in sorted(groups, key=order)]


def threat_model_text(model: ThreatModel | str) -> str:
    """How a report names a threat model (an undeclared one says so)."""
    return model.label() if isinstance(model, ThreatModel) else "undeclared by the attack (no threat_model attribute)"


def threat_sections_html(group: Group, attacks: Iterable[str], render: Callable[[str], str]) -> list[str]:
    """One block per threat model: its description, then ``render(attack)`` of each attack that has it."""
    return [f"<div class='threat'><p class='note'><strong>Threat model:</strong> {e(threat_model_text(model))}</p>"
            + "".join(render(a) for a in names) + "</div>" for model, names in by_threat_model(group, attacks)]


__all__ = ["by_threat_model", "threat_model_of", "threat_model_text", "threat_sections_html"]
