"""The no-privacy check: each defense at its no-privacy setting against the reference under the same protocol.

At η = ∞ (or ε = ∞) a mechanism adds no noise, so a defense whose service is the benchmark's service
should land on the no-privacy reference's utility (``identity``, :func:`~rapt_audit.api.plugins.reference_defense`):
the protocol is then the same for both, and a defense that loses utility at a finite setting loses it to its noise,
not to a weaker service. A defense whose service is another has a ceiling of its own: one that declares so (its
capabilities' ``own_service``: SnD's client classifies its denoised embedding; RAPT's service adds plain tokens and
a reconstruction head), or one without the service's ``method`` (the sentence-representation defenses train a head
on what they release). The check then says so instead of passing or failing it. Anything else outside the
reference's interval is a finding to investigate, and the report says that too.

The test: the no-privacy row's mean (seeds combined) lies inside the reference's 95 % interval.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

from rapt_audit.api.plugins import capabilities_of, reference_defense
from rapt_audit.api.types import Estimate
from rapt_audit.benchmark.matched import Matched
from rapt_audit.reporting.summary import PRIVACY_PARAMS, Row

#: How a privacy parameter is written: η, ε (as the summary's labels write it).
SYMBOLS = dict(PRIVACY_PARAMS)

#: Why a defense's service differs from the benchmark's when it has no ``method`` parameter and declares no reason of
#: its own (its capabilities' ``own_service``): it releases a sentence representation.
HEAD_SERVICE = ("the service trains a classifier head on the released sentence representation (the paper's "
                "protocol); the encoder is not customized, so its ceiling is its own")


@dataclass(frozen=True)
class CeilingCheck:
    """One defense's no-privacy setting against the reference.

    Attributes:
        defense: The defense.
        setting: Its no-privacy setting (``η=∞``).
        utility: Its utility there (seeds combined), or ``None`` when the row is missing.
        verdict: ``within`` (inside the reference's interval), ``outside`` or ``not measured``.
        reason: Why another ceiling is expected (its service differs), or what an unexplained gap means.
    """

    defense: str
    setting: str
    utility: Estimate | None
    verdict: str
    reason: str = ""

    def text(self, ceiling: Estimate) -> str:
        """``within identity's interval`` or ``0.031 below identity's interval: reason`` (the reference's name)."""
        if self.utility is None:
            return f"not measured ({self.reason})"
        interval = f"{reference_defense()}'s interval"
        if self.verdict == "within":
            return f"within {interval}" + (f" ({self.reason})" if self.reason else "")
        gap = (ceiling.ci_low - self.utility.value if self.utility.value < ceiling.ci_low
               else self.utility.value - ceiling.ci_high)
        side = "below" if self.utility.value < ceiling.ci_low else "above"
        return f"{gap:.3f} {side} {interval}: {self.reason}"


def _infinite(value: Any) -> bool:
    try:
        return math.isinf(float(str(value)))
    except ValueError:
        return False


def no_privacy_checks(table: Matched, index: dict[str, Any],
                      pending: Sequence[dict[str, Any]] = ()) -> list[CeilingCheck]:
    """Every defense of the benchmark with an ∞ grid point: its utility there against the ceiling.

    ``pending``: the index's cells that have not finished (:attr:`~rapt_audit.benchmark.join.Joined.pending`), so
    that a missing row says why: not finished yet, or finished but measured otherwise (another comparability group,
    never compared with this one's ceiling), or without this task's utility metric.
    """
    if table.ceiling is None or table.utility is None:
        return []
    rows: Sequence[Row] = table.group.rows
    reference, checks = reference_defense(), []
    for defense, spec in index.get("defenses", {}).items():
        axes = [k for k, values in spec.get("grid", {}).items() if any(_infinite(v) for v in values)]
        if defense == reference or not axes:
            continue
        setting = ", ".join(f"{SYMBOLS.get(k, k)}=∞" for k in axes)  # as the tables label settings (η=∞)
        row = next((r for r in rows if r.defense == defense and r.no_privacy), None)
        expected = capabilities_of(defense).own_service or ("" if "method" in (row.params if row else spec.get("service", {}))
                                                else HEAD_SERVICE)
        if row is None or table.utility not in row.utility:
            dataset = table.group.first.dataset.get("name")
            waiting = any(c.get("defense") == defense and c.get("dataset") == dataset
                          and any(_infinite((c.get("setting") or {}).get(k)) for k in axes) for c in pending)
            why = ("its cells have not finished" if waiting else
                   f"it reports no {table.utility}" if row is not None else
                   "its finished cells were measured otherwise (another comparability group; see the groups above)")
            checks.append(CeilingCheck(defense, setting, None, "not measured", why))
            continue
        est = row.utility[table.utility]
        inside = table.ceiling.ci_low <= est.value <= table.ceiling.ci_high
        reason = expected or ("" if inside else f"the same service as {reference}, so this gap is unexplained: a "
                                                "finding to investigate before reading this defense's frontier")
        checks.append(CeilingCheck(defense, setting, est, "within" if inside else "outside", reason))
    return checks


__all__ = ["CeilingCheck", "HEAD_SERVICE", "no_privacy_checks"]
