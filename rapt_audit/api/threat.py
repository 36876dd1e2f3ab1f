"""An attack's threat model as data: what the attacker knows, whether it adapts, which data it holds.

The suite's adversary (DESIGN, threat model) is an eavesdropper or an honest-but-curious server that
sees the release, knows the mechanism and its parameter (Kerckhoffs), holds the public model's weights
(white-box) and has auxiliary data of its own; it is *adaptive* when it trains on releases the same
defense made of that auxiliary data. Each attack states which of these it actually uses in a
:class:`ThreatModel` class attribute, ``threat_model``. The runner records it in every result
(``env.threat_models``), the report groups attacks by it, and ``--attacks tag:adaptive`` selects the
adaptive ones (the tag is derived from the declaration, :meth:`ThreatModel.tags`). A plugin that
declares none is shown as :data:`UNDECLARED`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

#: What an attacker may know, and what each means (the values of :attr:`ThreatModel.knows`).
KNOWLEDGE = {
    "release": "the victim's release",
    "mechanism": "the mechanism and its parameter (Kerckhoffs: it runs the defense on data of its own)",
    "public_model": "the public model's weights (white-box)",
    "originals": "the victim's original texts (an auditor's measurement, not an adversary's)",
}

#: The auxiliary data an attacker may hold (the values of :attr:`ThreatModel.auxiliary`).
AUXILIARY = {
    "attacker_split": "its own records of the dataset, disjoint from the victim's",
    "public_data": "a public corpus (CoNLL-2003 for NER)",
}

#: How a result and the report name the threat model of an attack that declares none.
UNDECLARED = "undeclared"


@dataclass(frozen=True)
class ThreatModel:
    """What an attack assumes of its adversary; set it as the attack class's ``threat_model``.

    Attributes:
        knows: What the attacker uses, from :data:`KNOWLEDGE` (``release``, ``mechanism``,
            ``public_model``, ``originals``); an attack that ignores the release (a prior-only
            baseline) leaves ``release`` out.
        adaptive: Whether it adapts to the defense: it trains on the defense's releases of its own
            auxiliary data (needs ``mechanism`` in ``knows`` and some ``auxiliary`` data).
        auxiliary: The auxiliary data it holds, from :data:`AUXILIARY` (``attacker_split``,
            ``public_data``); empty for none, several when it uses whichever is available.
        note: Anything the fields do not say (an off-the-shelf model it runs, ...), one sentence.
    """

    knows: tuple[str, ...] = ("release",)
    adaptive: bool = False
    auxiliary: tuple[str, ...] = ()
    note: str = ""

    def __post_init__(self) -> None:
        for name, allowed in (("knows", KNOWLEDGE), ("auxiliary", AUXILIARY)):
            value = getattr(self, name)
            if isinstance(value, str) or not all(isinstance(v, str) for v in value):
                raise TypeError(f"ThreatModel.{name} must be a tuple of strings, got {value!r}")
            object.__setattr__(self, name, tuple(dict.fromkeys(value)))
            unknown = [v for v in getattr(self, name) if v not in allowed]
            if unknown:
                raise ValueError(f"ThreatModel.{name} holds {', '.join(map(repr, unknown))}; known values: "
                                 f"{', '.join(allowed)}")
        if not isinstance(self.adaptive, bool) or not isinstance(self.note, str):
            raise TypeError("ThreatModel.adaptive must be a bool and ThreatModel.note a string")
        if self.adaptive and ("mechanism" not in self.knows or not self.auxiliary):
            raise ValueError("an adaptive attacker trains on the defense's releases of its own data: it must know "
                             "the 'mechanism' and hold some auxiliary data")

    def tags(self) -> tuple[str, ...]:
        """Selection tags that follow from the declaration: ``adaptive`` for an adaptive attacker."""
        return ("adaptive",) if self.adaptive else ()

    def label(self) -> str:
        """A one-line description: ``adaptive · knows the release, … · holds its own records …``."""
        knows = ", ".join(KNOWLEDGE[k].split(" (")[0] for k in self.knows) or "nothing of the release"
        holds = "; ".join(AUXILIARY[a] for a in self.auxiliary) or "no auxiliary data"
        kind = "adaptive (trains on the defense's releases of its own data)" if self.adaptive else "not adaptive"
        return f"{kind} · knows {knows} · holds {holds}" + (f" · {self.note}" if self.note else "")

    def to_dict(self) -> dict[str, Any]:
        """The JSON form recorded in a result's ``env.threat_models``."""
        return {"knows": list(self.knows), "adaptive": self.adaptive, "auxiliary": list(self.auxiliary),
                "note": self.note}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ThreatModel:
        """Inverse of :meth:`to_dict`."""
        return cls(tuple(data.get("knows", ())), bool(data.get("adaptive", False)), tuple(data.get("auxiliary", ())),
                   str(data.get("note", "")))


def declared_threat_model(obj: Any) -> ThreatModel | None:
    """The ``threat_model`` an attack (class or instance) declares, or ``None`` when it declares none."""
    found = getattr(obj, "threat_model", None)
    return found if isinstance(found, ThreatModel) else None


def threat_model_record(obj: Any) -> dict[str, Any] | str:
    """What a result records of an attack's threat model: :meth:`ThreatModel.to_dict`, or :data:`UNDECLARED`."""
    found = declared_threat_model(obj)
    return UNDECLARED if found is None else found.to_dict()


def threat_model_problem(obj: Any) -> str | None:
    """Why ``obj``'s ``threat_model`` attribute is unusable (not a :class:`ThreatModel`), or ``None``."""
    found = getattr(obj, "threat_model", None)
    if found is None or isinstance(found, ThreatModel):
        return None
    return (f"threat_model must be a rapt_audit ThreatModel (what the attacker knows, whether it is adaptive, which "
            f"auxiliary data it holds), got {type(found).__name__} {found!r}")


__all__ = ["AUXILIARY", "KNOWLEDGE", "UNDECLARED", "ThreatModel", "declared_threat_model", "threat_model_problem",
           "threat_model_record"]
