"""Quora Question Pairs (``qqp``): the BiMPM 10k + 10k label-balanced dev/test subset.

GLUE QQP was not obtainable (see ``qqp/SOURCE.md``); the shared data holds the BiMPM split instead:
two header-less TSV files with the columns ``is_duplicate, question1, question2, pair_id``. The
questions are CoreNLP-tokenised and kept exactly as they are.

Each pair is its own group: the files carry no question id nor user id (``pair_id`` names the pair). A
question that recurs in another pair is a copy held by two groups, which the split never tests
(:func:`~rapt_audit.data.base.make_splits` tests whole texts held by one group only).
"""

from __future__ import annotations

from pathlib import Path

from rapt_audit.api.errors import DataError
from rapt_audit.api.types import Record
from rapt_audit.data.base import register_split_files


def read_split(path: Path, split: str) -> list[Record]:
    """Parse one BiMPM Quora TSV file into pair records with uids ``qqp/<split>/<row>``.

    Raises:
        DataError: when a row does not have four tab-separated columns and a 0/1 label.
    """
    records: list[Record] = []
    lines = [x for x in path.read_text(encoding="utf-8").split("\n") if x.strip()]
    for row, line in enumerate(lines):
        parts = line.rstrip("\r").split("\t")
        # No quoting in this format: a question never contains a tab, so a plain split is exact.
        if len(parts) != 4 or parts[0] not in ("0", "1"):
            raise DataError(f"{path}: row {row} is not 'is_duplicate<TAB>q1<TAB>q2<TAB>pair_id': {line[:80]!r}")
        label, first, second, _pair_id = parts
        if first.strip() and second.strip():
            records.append(Record(uid=f"qqp/{split}/{row}", text=first, text_pair=second, label=int(label)))
    return records


register_split_files("qqp", read_split)
