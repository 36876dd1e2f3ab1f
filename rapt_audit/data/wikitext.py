"""WikiText-2 (``wikitext2``): public general English from the valid and test files, as sentences.

Used by denoisers and for attacker warm-up, never as private data: there are no labels or
attributes. The shared copy is the tokenised ``wiki.*.tokens`` version (``<unk>``, `` @-@ ``
markers are kept as they are). Headings (`` = Title = ``) and blank lines are dropped; each
paragraph line is split into sentences at a standalone ``.``, ``?`` or ``!`` token (optionally
followed by a closing ``"``) when the next token starts with a capital letter, a digit or
``<unk>``. The tokeniser keeps abbreviations such as ``U.S.`` as single tokens, so this simple
rule is rarely wrong and is fully deterministic.
"""

from __future__ import annotations

import re
from pathlib import Path

from rapt_audit.api.types import Record
from rapt_audit.data.base import register_split_files

_HEADING = re.compile(r"^ ?(= )+.*?( =)+ ?$")
# A '"' right after the end token is taken as a closing quote and stays with its sentence.
_SENTENCE_END = re.compile(r'(?<= [.?!]) (?=[A-Z0-9<])|(?<= [.?!] ") (?=[A-Z0-9<])')


def split_sentences(paragraph: str) -> list[str]:
    """Split one tokenised WikiText paragraph into sentences (see the module docstring)."""
    return [s for s in _SENTENCE_END.split(paragraph.strip()) if s.strip()]


def read_split(path: Path, split: str) -> list[Record]:
    """Records with uids ``wikitext2/<split>/<line>/<sentence>`` (0-based line and sentence numbers).

    A sentence's group is its paragraph (``wikitext2/<split>/<line>``): public text, so no attack is about a
    person, but sentences of one paragraph repeat its words and names, and stay in one part of a run.
    """
    records: list[Record] = []
    for line_no, line in enumerate(path.read_text(encoding="utf-8").split("\n")):
        if not line.strip() or _HEADING.match(line):
            continue
        for k, sentence in enumerate(split_sentences(line)):
            records.append(Record(uid=f"wikitext2/{split}/{line_no}/{k}", text=sentence,
                                  group=f"wikitext2/{split}/{line_no}"))
    return records


register_split_files("wikitext2", read_split)
