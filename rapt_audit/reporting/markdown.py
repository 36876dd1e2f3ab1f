"""The one way a string from a file or the command line enters Markdown: as literal inline text.

Every Markdown writer (the leaderboard, ``claims.md``, the benchmark's headline) passes each string it
did not write itself — a benchmark, defense, attack, dataset or plugin name, a setting, a note, a path,
a ``--title`` — through :func:`markdown_text`, as the HTML report passes each through ``html.escape``.
"""

from __future__ import annotations

import re


def markdown_text(text: object) -> str:
    """``text`` as literal Markdown text on one line: no markup, link, heading break or table cell survives.

    Runs of whitespace (newlines included) become one space, so a heading or a table row stays one line;
    ``&``, ``<`` and ``>`` become HTML entities, so no raw tag reaches a code host; the characters of code,
    emphasis, strike-through, links and table pipes are backslash-escaped, and so are ``:`` and ``@``
    (GitHub links ``https://x`` and ``a@b.org`` by itself), the dot of ``www.x``, and an underscore that
    could open or close emphasis (inside a word, as in ``random_guess``, it never does: names stay readable).
    """
    flat = " ".join(str(text).split())
    flat = flat.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    flat = re.sub(r"([\\`*~\[\]|:@])", r"\\\1", flat)
    return re.sub(r"(?i)(?<=www)\.|(?<!\w)_|_(?!\w)", lambda m: "\\" + m.group(), flat)


__all__ = ["markdown_text"]
