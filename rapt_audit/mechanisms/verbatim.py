"""What a text defense released verbatim: unchanged words, and sensitive strings that went through as they were.

PCT2T leaves every word outside its categories in the clear by design, and any dχ replacement can
land on the original word; a phone number or an e-mail address then reaches the service as it is.
:func:`verbatim_summary` says how much: the share of units released unchanged (in total and by
POS category, from the mechanism's :class:`~rapt_audit.mechanisms.calibration.ReplacementCount`)
and, for each kind of sensitive string found in the original texts, how many appear verbatim in
the released text of the same record (compared case-insensitively: lower-casing hides nothing).
Named entities are not counted here yet; the ``ner`` attacks measure how many an adversary recovers.
"""

from __future__ import annotations

import re
from typing import Any, Sequence

from rapt_audit.mechanisms.calibration import ReplacementCount

__all__ = ["SENSITIVE", "describe_verbatim", "sensitive_strings", "verbatim_summary"]

#: Kinds of sensitive strings and how they are found in the original text (checked in this order;
#: a span taken by an earlier kind is not counted again).
SENSITIVE: dict[str, re.Pattern[str]] = {
    "email": re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+"),
    "url": re.compile(r"(?:https?://|www\.)[^\s]+", re.IGNORECASE),
    "phone": re.compile(r"\+?\d[\d ().-]{6,}\d"),
    "number": re.compile(r"\d{2,}"),
}


def _found(text: str) -> dict[str, set[str]]:
    taken: list[tuple[int, int]] = []
    found: dict[str, set[str]] = {kind: set() for kind in SENSITIVE}
    for kind, pattern in SENSITIVE.items():
        for match in pattern.finditer(text):
            if any(match.start() < end and start < match.end() for start, end in taken):
                continue
            taken.append(match.span())
            found[kind].add(match.group().casefold())
    return found


def verbatim_summary(originals: Sequence[str], released: Sequence[str], count: ReplacementCount) -> dict[str, Any]:
    """Shares of units released unchanged and of sensitive strings present verbatim, record by record.

    Args:
        originals: The records' original texts.
        released: What the defense released for each record, in the same order.
        count: The mechanism's count of the units it privatized, replaced and passed in the clear.
    """
    total = count.perturbed + count.passed
    unchanged = count.passed + count.perturbed - count.replaced
    summary: dict[str, Any] = {"units": total, "units_unchanged": unchanged,
                               "units_unchanged_share": unchanged / total if total else None}
    if count.by_category:
        summary["unchanged_share_by_category"] = {
            category: (c["passed"] + c["perturbed"] - c["replaced"]) / (c["passed"] + c["perturbed"])
            for category, c in sorted(count.by_category.items()) if c["passed"] + c["perturbed"]}
    summary["sensitive_strings"] = sensitive_strings(originals, released)
    return summary


def sensitive_strings(originals: Sequence[str], released: Sequence[str],
                      into: dict[str, dict[str, Any]] | None = None) -> dict[str, dict[str, Any]]:
    """Kind → ``{"found", "verbatim", "verbatim_share"}`` over the records, added to ``into`` when given."""
    kinds = into if into is not None else {kind: {"found": 0, "verbatim": 0, "verbatim_share": None}
                                           for kind in SENSITIVE}
    for original, out in zip(originals, released):
        folded = out.casefold()
        for kind, strings in _found(original).items():
            kinds[kind]["found"] += len(strings)
            kinds[kind]["verbatim"] += sum(s in folded for s in strings)
    for counts in kinds.values():
        counts["verbatim_share"] = counts["verbatim"] / counts["found"] if counts["found"] else None
    return kinds


def describe_verbatim(summary: dict[str, Any]) -> str:
    """One line for a console: the unchanged share, then each kind of sensitive string found."""
    share = summary.get("units_unchanged_share")
    head = (f"{100 * share:.1f} % of {summary.get('units', 0):,} units released unchanged"
            if share is not None else "no units released")
    found = [f"{c['verbatim']} of {c['found']} {kind}" for kind, c in summary.get("sensitive_strings", {}).items()
             if c.get("found")]
    return head + ("; verbatim: " + ", ".join(found) if found else "; no sensitive strings found")
