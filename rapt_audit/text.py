"""Small text utilities shared by plugins (no model needed)."""

from __future__ import annotations

import re

_WORD = re.compile(r"\w+(?:'\w+)?", re.UNICODE)


def words(text: str) -> list[str]:
    """Lower-cased word tokens of ``text`` (letters, digits and inner apostrophes)."""
    return [w.lower() for w in _WORD.findall(text)]
