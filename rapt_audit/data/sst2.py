"""GLUE SST-2 (``sst2``): binary sentiment of movie-review sentences and phrases.

Reads ``sst2/train.tsv`` (67,349 rows, phrases and sentences) and ``sst2/dev.tsv`` (872 full
sentences); the GLUE test split has hidden labels and is not used. Both files are TSV with the
header ``sentence\\tlabel`` and no quoting, so lines are split on the single tab rather than parsed
with a CSV reader (SST text contains quote characters that a CSV reader would interpret).

The train file holds every phrase of each review sentence beside the sentence (of the 67,850 distinct texts,
7,754 lie inside no longer one: ``reports/sst2-overlap.md``). A record's group is its review sentence: the
first whole sentence its text lies inside (:func:`~rapt_audit.data.overlap.whole_texts`, longest first, so a
phrase found in several sentences goes with the longest), so a sentence and its phrases fall in one part of a
run (:func:`~rapt_audit.data.base.make_splits`). What each part holds, and why:

* victim test — whole sentences only, as GLUE's dev and the seed papers' test sets are (RAPT Section V-A1), and
  the only texts whose every container is in their own group (``make_splits`` tests whole texts only);
* victim train and the attacker's parts — sentences *and* their phrases, as GLUE's train file is and as RAPT
  customizes its service on it: phrases are labelled examples of the same reviews, and the attacker's auxiliary
  data is drawn from the same distribution as the user's.

GLUE's dev file is not held out as the victim test: its 872 sentences would cap the test below what a
detectable difference of 0.05 may need (issue #61, item 2), and a fixed test would not vary with the seed.
Its sentences join the train file's whole sentences (they share no phrase), under the one split rule.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from rapt_audit.api.errors import DataError
from rapt_audit.api.types import Record
from rapt_audit.data.base import register_split_files
from rapt_audit.data.overlap import whole_texts


def read_split(path: Path, split: str) -> list[Record]:
    """Parse one GLUE SST-2 TSV file into records with uids ``sst2/<split>/<row>`` (0-based rows).

    Raises:
        DataError: when the header or a row does not have the GLUE layout.
    """
    lines = path.read_text(encoding="utf-8").split("\n")
    # The shared copy's train header was restored to GLUE's ``sentence\tlabel`` (see SOURCE.md).
    if lines[0].rstrip("\r") != "sentence\tlabel":
        raise DataError(f"{path}: expected the GLUE header 'sentence<TAB>label', found {lines[0][:60]!r}")
    records: list[Record] = []
    for row, line in enumerate(x for x in lines[1:] if x.strip()):
        sentence, sep, label = line.rstrip("\r").rpartition("\t")
        if not sep or label not in ("0", "1"):
            raise DataError(f"{path}: data row {row} is not '<sentence><TAB>0|1': {line[:80]!r}")
        # GLUE ends every sentence with one space before the tab; that space is layout, not text.
        text = sentence[:-1] if sentence.endswith(" ") else sentence
        if text.strip():
            records.append(Record(uid=f"sst2/{split}/{row}", text=text, label=int(label)))
    return records


def sentence_groups(records: list[Record]) -> list[Record]:
    """Each record with its group: the whole review sentence its text lies inside (the sentence's text)."""
    wholes, first = whole_texts(r.text for r in records)
    return [replace(r, group=wholes[first[r.text]]) for r in records]


register_split_files("sst2", read_split, regroup=sentence_groups)
