"""What a text defense released verbatim: unchanged words, and sensitive strings that went through as they were.

PCT2T leaves every word outside its categories in the clear by design, and any dχ replacement can
land on the original word; a phone number, an e-mail address or a name then reaches the service as
it is. :func:`verbatim_summary` says how much:

* the share of units released unchanged, in total and by POS category (from the mechanism's
  :class:`~rapt_audit.mechanisms.calibration.ReplacementCount`; a unit an ``unk_policy`` or a
  category selection passes through is counted there as passed, hence unchanged);
* for each kind of sensitive string found in the original texts (e-mail addresses, URLs, phone
  numbers, digit runs) and for each type of named entity spaCy's NER finds there (PERSON, ORG,
  GPE, DATE...), how many appear verbatim in the release of the same record;
* for each entity type, the share of the entities' words that appear in that release.

Matching reads texts as sequences of words (runs of letters, digits and underscores), compared
case-insensitively: a string is verbatim when its words appear consecutively in the release, and a
sensitive string found inside a word is widened to the whole word (``AB12345``, not ``12345``). So a
tokenizer's re-spacing (``ann. lee @ example. org``) still counts as verbatim, and ``42`` does not
match inside ``420``. Word positions are not aligned (a token-level release has none), so an entity
word that also occurs elsewhere in the record's release counts as released: an upper bound. Every
step is linear in the text, however hostile (a 100,000-character word, 30,000 numbers in a record).
"""

from __future__ import annotations

import re
from typing import Any, Iterable, Sequence

from rapt_audit.mechanisms.calibration import ReplacementCount

__all__ = ["SENSITIVE", "describe_verbatim", "entity_strings", "sensitive_strings", "verbatim_summary"]

#: Kinds of sensitive strings and how they are found in the original text (checked in this order;
#: a span taken by an earlier kind is not counted again). The e-mail pattern starts only where a run
#: of its characters starts: without the look-behind, a 100,000-character word is tried from each of
#: its positions and scanned to its end (quadratic: 40 s).
SENSITIVE: dict[str, re.Pattern[str]] = {
    "email": re.compile(r"(?<![\w.+-])[\w.+-]+@[\w-]+(?:\.[\w-]+)+"),
    "url": re.compile(r"(?:https?://|www\.)[^\s]+", re.IGNORECASE),
    "phone": re.compile(r"\+?\d[\d ().-]{6,}\d"),
    "number": re.compile(r"\d{2,}"),
}
_WORD = re.compile(r"\w+")

#: One record's strings: kind (or entity type) → the distinct strings, each as its words joined by spaces.
Found = dict[str, set[str]]


def _words(text: str) -> str:
    """``text``'s words, case-folded and joined by single spaces (the form every comparison uses)."""
    return " ".join(_WORD.findall(text.casefold()))


def _is_word_char(char: str) -> bool:
    return char.isalnum() or char == "_"  # what ``\w`` matches


def _found(text: str) -> Found:
    """Each kind's strings in ``text``, each widened to whole words (the digit run of ``AB12345`` is ``ab12345``)."""
    taken = bytearray(len(text))  # 1 where an earlier match lies (a list of spans is quadratic in the matches)
    found: Found = {kind: set() for kind in SENSITIVE}
    for kind, pattern in SENSITIVE.items():
        for match in pattern.finditer(text):
            start, end = match.span()
            if taken.find(1, start, end) != -1:
                continue
            while start > 0 and _is_word_char(text[start - 1]):
                start -= 1
            while end < len(text) and _is_word_char(text[end]):
                end += 1
            taken[start:end] = b"\x01" * (end - start)
            found[kind].add(_words(text[start:end]))
    return found


class _Release:
    """One record's release as the matcher reads it: its words, and where each word occurs.

    Looking a string up starts from the positions of its rarest word, so the cost follows the
    string, not the release: a substring search per string is quadratic in a long record (8 s for
    the 30,000 numbers of a 100,000-word text).
    """

    def __init__(self, text: str) -> None:
        self.words = _WORD.findall(text.casefold())
        self.where: dict[str, list[int]] = {}
        for i, word in enumerate(self.words):
            self.where.setdefault(word, []).append(i)

    def holds(self, string: str) -> bool:
        """Whether the words of ``string`` (joined by single spaces) occur consecutively in the release."""
        parts = string.split(" ")
        k, rarest = min(enumerate(parts), key=lambda item: len(self.where.get(item[1], ())))
        return any(self.words[p - k:p - k + len(parts)] == parts for p in self.where.get(rarest, ()) if p >= k)


def _tally(per_record: Iterable[Found], released: Iterable[str], kinds: dict[str, dict[str, Any]], *,
           words: bool) -> None:
    """Add each record's strings to ``kinds``: found and verbatim and, with ``words``, their words and words present."""
    for found, out in zip(per_record, released):
        release = _Release(out)
        for kind, strings in found.items():
            counts = kinds.setdefault(kind, {"found": 0, "verbatim": 0, "verbatim_share": None,
                                             **({"words": 0, "words_unchanged": 0} if words else {})})
            for string in filter(None, strings):  # a string without a word (a lone "#") cannot be matched
                counts["found"] += 1
                counts["verbatim"] += release.holds(string)
                if words:
                    counts["words"] += string.count(" ") + 1
                    counts["words_unchanged"] += sum(word in release.where for word in string.split(" "))
    for counts in kinds.values():
        counts["verbatim_share"] = counts["verbatim"] / counts["found"] if counts["found"] else None


def sensitive_strings(originals: Sequence[str], released: Sequence[str],
                      into: dict[str, dict[str, Any]] | None = None) -> dict[str, dict[str, Any]]:
    """Kind → ``{"found", "verbatim", "verbatim_share"}`` over the records, added to ``into`` when given."""
    kinds = into if into is not None else {kind: {"found": 0, "verbatim": 0, "verbatim_share": None} for kind in SENSITIVE}
    _tally(map(_found, originals), released, kinds, words=False)
    return kinds


def entity_strings(entities: Sequence[Sequence[tuple[str, str]]], released: Sequence[str]) -> dict[str, dict[str, Any]]:
    """Entity type → ``{"found", "verbatim", "verbatim_share", "words", "words_unchanged"}`` over the records.

    Args:
        entities: Per record, the ``(type, text)`` of each entity of its original text
            (:func:`rapt_audit.mechanisms.pos.entity_mentions`); repeats within a record count once.
        released: What the defense released for each record, in the same order.
    """
    per_record: list[Found] = []
    for mentions in entities:
        found: Found = {}
        for label, text in mentions:
            found.setdefault(label, set()).add(_words(text))
        per_record.append(found)
    kinds: dict[str, dict[str, Any]] = {}
    _tally(per_record, released, kinds, words=True)
    return dict(sorted(kinds.items()))


def verbatim_summary(originals: Sequence[str], released: Sequence[str], count: ReplacementCount, *,
                     entities: Sequence[Sequence[tuple[str, str]]] | None = None) -> dict[str, Any]:
    """Shares of units released unchanged and of sensitive strings present verbatim, record by record.

    Args:
        originals: The records' original texts.
        released: What the defense released for each record, in the same order.
        count: The mechanism's count of the units it privatized, replaced and passed in the clear.
        entities: Per record, the ``(type, text)`` of the named entities of its original text; when
            given, the summary adds ``entities`` (by type) and ``unchanged_share_by_entity`` (the
            share of entity words present in the release, by type).
    """
    total = count.perturbed + count.passed + count.dropped  # a dropped unit was in the input, not released as it was
    unchanged = count.passed + count.perturbed - count.replaced
    summary: dict[str, Any] = {"units": total, "units_unchanged": unchanged,
                               "units_unchanged_share": unchanged / total if total else None,
                               # replaced because no candidate equals them: changed by the lexicon, not the noise
                               "units_forced": count.forced,
                               "units_forced_share_of_perturbed":
                                   count.forced / count.perturbed if count.perturbed else None}
    if count.by_category:
        summary["unchanged_share_by_category"] = {
            category: (c["passed"] + c["perturbed"] - c["replaced"]) / (c["passed"] + c["perturbed"])
            for category, c in sorted(count.by_category.items()) if c["passed"] + c["perturbed"]}
    summary["sensitive_strings"] = sensitive_strings(originals, released)
    if entities is not None:
        by_type = entity_strings(entities, released)
        summary["entities"] = by_type
        summary["unchanged_share_by_entity"] = {label: c["words_unchanged"] / c["words"]
                                                for label, c in by_type.items() if c["words"]}
    return summary


def describe_verbatim(summary: dict[str, Any]) -> str:
    """One line for a console: the unchanged share, each kind of sensitive string found, then the entities."""
    share = summary.get("units_unchanged_share")
    head = (f"{100 * share:.1f} % of {summary.get('units', 0):,} units released unchanged"
            if share is not None else "no units released")
    found = [f"{c['verbatim']} of {c['found']} {kind}" for kind, c in summary.get("sensitive_strings", {}).items()
             if c.get("found")]
    line = head + ("; verbatim: " + ", ".join(found) if found else "; no sensitive strings found")
    forced = summary.get("units_forced_share_of_perturbed")
    if forced:
        line += f"; {100 * forced:.1f} % of perturbed units have no candidate equal to them (changed at any η)"
    entities = summary.get("entities")
    if entities is not None:
        verbatim, total = (sum(c["verbatim"] for c in entities.values()), sum(c["found"] for c in entities.values()))
        line += f"; {verbatim} of {total} named entities verbatim" if total else "; no named entities found"
        if verbatim:  # the types that leaked most, so the line stays one line
            top = sorted(entities.items(), key=lambda kv: -kv[1]["verbatim"])[:3]
            line += " (" + ", ".join(f"{label} {c['verbatim']} of {c['found']}" for label, c in top if c["verbatim"]) + ")"
    return line
