"""GLUE SST-2 (``sst2``): binary sentiment of movie-review sentences and phrases.

Reads ``sst2/train.tsv`` (67,349 rows, phrases and sentences) and ``sst2/dev.tsv`` (872 full
sentences); the GLUE test split has hidden labels and is not used. Both files are TSV with the
header ``sentence\\tlabel`` and no quoting, so lines are split on the single tab rather than parsed
with a CSV reader (SST text contains quote characters that a CSV reader would interpret).
"""

from __future__ import annotations

from pathlib import Path

from rapt_audit.api.errors import DataError
from rapt_audit.api.types import Record
from rapt_audit.data.base import register_split_files


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


register_split_files("sst2", read_split)
