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
from rapt_audit.data.base import DATASETS, Dataset, load_split_files

SPLITS = ("train", "dev")
LABEL_NAMES = ("negative", "positive")


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


@DATASETS.register("sst2", tags=("real", "task", "sentiment"))
def load(data_dir: Path | None) -> Dataset:
    """GLUE SST-2 train + dev (binary sentiment), 68,221 records.

    Args:
        data_dir: Directory holding ``sst2/train.tsv`` and ``sst2/dev.tsv``.
    """
    return load_split_files(
        data_dir, name="sst2", splits=SPLITS, suffix=".tsv", read=read_split,
        source="GLUE SST-2 train + dev",
        label_names=LABEL_NAMES,
        task="binary sentiment (SST-2)",
        notes={"caveats": "text is lower-cased and PTB-tokenised; train rows include sub-sentence phrases "
                          "and duplicates; GLUE test labels are hidden so dev is the evaluation split; "
                          "the GLUE trailing space before the tab is removed"},
    )
