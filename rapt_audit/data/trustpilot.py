"""Trustpilot reviews with author gender and age (Hovy, Johannsen & Søgaard, WWW 2015).

Three loaders, because the full TP-UK of the RAPT paper was not obtainable (``trustpilot/SOURCE.md``):

``trustpilot`` (default) — **TP-US, Hovy et al. 2020** (``tp_us_hovy2020/{train,test}.csv``,
5,407 rows, 5,399 with text). It is the richest usable subset for attribute inference: exact ages in
years (so ``age`` can be cut into 6 equal-frequency bins, edges in ``notes["age_bin_edges"]``) and a
gender-balanced ``gender``. It has **no task label** (no rating column), so ``label`` is None and
``task`` is empty; pair it with a labelled dataset for utility. No birth years, so no ``age_rapt``.

The mixed-country WWW2015 files (``tp_www2015_mixed/``) are deliberately **not loaded**: although
they carry a rating, their label columns do not belong to their texts. Bag-of-words classifiers
reach chance (ROC AUC 0.47-0.51) for rating, gender, age and country alike, reviews saying
"terrible" are mostly rated 5, "£" is as frequent in US rows as in UK rows, and for the 698 texts
shared with TP-US the two files' genders agree at chance. On TP-US the same classifier gets AUC
0.72 (gender) and 0.75 (age >= 45). Using them would measure noise.

``trustpilot_uk`` (not in ``all``) — protocol **tp-uk-pos-acl2015**: the 600 genuinely UK,
POS-tagged sentences of Hovy & Søgaard (ACL 2015), 50 per age × region × gender cell. Text is tokens
joined by spaces; ``age`` is ``under_35`` / ``over_45``; no task label. Too small to train an
attacker: a sanity-check or evaluation set only.

``tp_uk_raw`` (not in ``all``) — the raw TP-UK JSON-lines corpus for users who have it, read by
:func:`load_tp_uk_jsonl` from ``trustpilot/tp_uk.jsonl`` or the original file name
``trustpilot/united_kingdom.auto-adjusted_gender.NUTS-regions.jsonl``. Task: 5-way star rating.
``age_rapt`` uses the RAPT paper's birth-year bins with the convention in :data:`RAPT_BINS`.
"""

from __future__ import annotations

import ast
import csv
import json
from pathlib import Path
from typing import Any, Iterator, Sequence

from rapt_audit.api.errors import DataError
from rapt_audit.api.types import Record
from rapt_audit.data.base import DATASETS, Dataset, fingerprint_files, require_file

GENDERS = ("female", "male")
_GENDER_CODES = {"F": "female", "M": "male", "female": "female", "male": "male"}
#: RAPT birth-year bins as inclusive year ranges: "<=1955" holds 1955 itself, so the paper's
#: "1955-1963" bin starts at 1956; the last bin is open-ended.
RAPT_BINS = (("born_<=1955", None, 1955), ("born_1956-1963", 1956, 1963), ("born_1964-1971", 1964, 1971),
             ("born_1972-1978", 1972, 1978), ("born_1979-1985", 1979, 1985), ("born_>=1986", 1986, None))
RATING_NAMES = ("1_star", "2_stars", "3_stars", "4_stars", "5_stars")
RAW_FILES = ("trustpilot/tp_uk.jsonl", "trustpilot/united_kingdom.auto-adjusted_gender.NUTS-regions.jsonl")
_BIN_RULE = ("bin i holds integer ages with edges[i] <= age < edges[i+1], except the last bin, which holds "
             "edges[-2] <= age <= edges[-1] (the maximum); inner edges are the ages at ranks round(k*n/6) of "
             "the sorted ages, repeated edges dropped")


def equal_frequency_bins(values: Sequence[int], n_bins: int = 6) -> tuple[list[int], list[str]]:
    """Edges and labels of (up to) ``n_bins`` equal-frequency bins over integer ``values``.

    Ties keep equal values in one bin, so bins are only roughly equal; when ties make two edges
    coincide, fewer bins come back. Labels name the inclusive range, e.g. ``"25-31"``.

    Raises:
        DataError: when ``values`` is empty.
    """
    if not values:
        raise DataError("cannot compute age bins over zero records")
    ranked = sorted(values)
    n = len(ranked)
    lower = [ranked[0]]  # lower bound of each bin
    for k in range(1, n_bins):
        cut = ranked[min(n - 1, round(k * n / n_bins))]
        if cut > lower[-1]:
            lower.append(cut)
    labels = [f"{lo}-{hi - 1}" for lo, hi in zip(lower, lower[1:])] + [f"{lower[-1]}-{ranked[-1]}"]
    edges = lower + [ranked[-1]]
    return edges, labels


def assign_bin(value: int, edges: Sequence[int], labels: Sequence[str]) -> str:
    """The label of the bin of ``value`` under :func:`equal_frequency_bins`' convention."""
    index = sum(1 for edge in edges[1:-1] if value >= edge)
    return labels[index]


def rapt_age_bin(birth_year: int) -> str:
    """The RAPT birth-year bin of ``birth_year`` (see :data:`RAPT_BINS`)."""
    for label, low, high in RAPT_BINS:
        if (low is None or birth_year >= low) and (high is None or birth_year <= high):
            return label
    raise AssertionError("RAPT_BINS cover every year")  # pragma: no cover


#: One parsed row before binning: uid, text, label, gender, age in years, extra attributes.
_Row = tuple[str, str, int | None, str, int, dict[str, str]]


def _with_age_bins(rows: list[_Row],
                   authors: dict[str, str] | None = None) -> tuple[list[Record], list[int], list[str]]:
    """Turn ``(uid, text, label, gender, age, extra_attributes)`` rows into records with ``age`` bins, each grouped
    by its author where ``authors`` (uid → user id) knows it, else its own group."""
    edges, labels = equal_frequency_bins([row[4] for row in rows])
    author = authors or {}
    records = [Record(uid=uid, text=text, label=label, group=f"author/{author[uid]}" if uid in author else None,
                      attributes={"gender": gender, "age": assign_bin(age, edges, labels), **extra})
               for uid, text, label, gender, age, extra in rows]
    return records, edges, labels


@DATASETS.register("trustpilot", tags=("real", "attributes"))
def load(data_dir: Path | None) -> Dataset:
    """Trustpilot TP-US (Hovy et al. 2020) train + test: gender and 6 equal-frequency age bins.

    Args:
        data_dir: Directory holding ``trustpilot/tp_us_hovy2020/{train,test}.csv``.
    """
    splits = ("train", "test")
    paths = [require_file(data_dir, f"trustpilot/tp_us_hovy2020/{s}.csv", dataset="trustpilot") for s in splits]
    rows: list[_Row] = []
    counts: dict[str, int] = {}
    for split, path in zip(splits, paths):
        with path.open(encoding="utf-8", newline="") as handle:
            reader = csv.DictReader(handle)  # text has commas and quotes: a real CSV parser is needed
            if reader.fieldnames != ["text", "age", "age_cat", "gender"]:
                raise DataError(f"{path}: expected header text,age,age_cat,gender, found {reader.fieldnames}")
            before = len(rows)
            for i, row in enumerate(reader):
                if row["text"].strip():
                    # No user id in TP-US: each review is its own group; a review copied under two rows
                    # is never tested (make_splits tests whole texts held by one group only).
                    rows.append((f"trustpilot/{split}/{i}", row["text"], None,
                                 _GENDER_CODES[row["gender"]], int(row["age"]), {}))
            counts[split] = len(rows) - before
    records, edges, labels = _with_age_bins(rows)
    return Dataset(
        name="trustpilot", records=tuple(records), task="",
        attribute_values={"gender": GENDERS, "age": tuple(labels)},
        fingerprint=fingerprint_files(paths),
        source=f"Trustpilot TP-US (Hovy, Bianchi & Fornaciari 2020) from {paths[0].parent}",
        notes={"protocol": "tp-us-hovy2020", "split_counts": counts, "age_bin_edges": edges,
               "age_bin_rule": _BIN_RULE,
               "caveats": "US (not UK) reviews; no task label; gender-balanced by construction; some reviews "
                          "share an unknown author (no user id, author leakage across splits possible); "
                          "self-reported ages include implausible values up to 113 (kept, in the top bin); "
                          "the mixed-country WWW2015 files are not used because their labels do not match "
                          "their texts (see rapt_audit/data/trustpilot.py)"})


@DATASETS.register("trustpilot_uk", tags=("real", "attributes", "uk", "small"), default=False)
def load_uk(data_dir: Path | None) -> Dataset:
    """Trustpilot UK POS sentences (Hovy & Søgaard 2015): 600 sentences, gender and U35/O45 age.

    Args:
        data_dir: Directory holding ``trustpilot/tp_uk_pos/en.*.data.TT.tagged.gold`` (12 files).
    """
    cells = [(age, region, gender) for age in ("U35", "O45") for region in ("UKC1_WORST", "UKH2_SOSO", "UKN0_BEST")
             for gender in ("F", "M")]
    paths = [require_file(data_dir, f"trustpilot/tp_uk_pos/en.{a}-{r}-{g}.data.TT.tagged.gold",
                          dataset="trustpilot_uk") for a, r, g in cells]
    records: list[Record] = []
    for (age, region, gender), path in zip(cells, paths):
        blocks = [b for b in path.read_text(encoding="utf-8").split("\n\n") if b.strip()]
        for i, block in enumerate(blocks):
            tokens = [line.split("\t")[0] for line in block.split("\n") if line.strip()]
            # No user id either: each sentence is its own group.
            records.append(Record(uid=f"trustpilot_uk/{age}-{region.split('_')[0]}-{gender}/{i}",
                                  text=" ".join(tokens),
                                  attributes={"gender": _GENDER_CODES[gender],
                                              "age": "under_35" if age == "U35" else "over_45"}))
    return Dataset(
        name="trustpilot_uk", records=tuple(records), task="",
        attribute_values={"gender": GENDERS, "age": ("under_35", "over_45")},
        fingerprint=fingerprint_files(paths),
        source=f"Trustpilot UK POS-tagged sentences (Hovy & Søgaard, ACL 2015) from {paths[0].parent}",
        notes={"protocol": "tp-uk-pos-acl2015",
               "caveats": "600 sentences (50 per age x region x gender cell): too small to train an attacker, "
                          "use for sanity checks or evaluation only; age is binary (under 35 / over 45), so "
                          "there are no equal-frequency or RAPT age bins; text is tokenised; no task label"})


def _raw_lines(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError:
                # Some processed copies (e.g. pnet's *.tmp_filtered) hold Python dict literals.
                try:
                    obj = ast.literal_eval(line)
                except (ValueError, SyntaxError) as err:
                    raise DataError(f"{path}:{number + 1}: neither JSON nor a Python literal ({err})") from None
            if not isinstance(obj, dict):
                raise DataError(f"{path}:{number + 1}: expected one JSON object per line, got {type(obj).__name__}")
            yield number, obj


def load_tp_uk_jsonl(path: str | Path, *, name: str = "tp_uk_raw") -> Dataset:
    """Read the raw TP-UK layout of Hovy et al. 2015 into a rating dataset with gender and age.

    Each line is one JSON object: a user ``{"user_id", "gender": "F"|"M", "birth_year",
    "reviews": [{"text": [paragraphs] | str, "rating", "date": "YYYY-...", "title", ...}]}`` or a
    single review carrying those user fields itself. Review text is its paragraphs joined by
    newlines (titles are not included). Reviews without text, rating 1-5, gender, birth year or a
    dated year are skipped. ``age`` is the review year minus the birth year, cut into 6
    equal-frequency bins; ``age_rapt`` is the RAPT birth-year bin.

    Args:
        path: The ``.jsonl`` file.
        name: Dataset name to report.

    Raises:
        DataError: when the file cannot be parsed or no usable review remains.
    """
    path = Path(path)
    rows: list[_Row] = []
    authors: dict[str, str] = {}
    skipped = 0
    for number, obj in _raw_lines(path):
        reviews = obj.get("reviews") if isinstance(obj.get("reviews"), list) else [obj]
        for k, review in enumerate(reviews):
            text = review.get("text")
            text = "\n".join(p for p in text if p) if isinstance(text, list) else (text or "")
            try:
                rating = int(review.get("rating"))
                birth = int(obj["birth_year"] if obj.get("birth_year") is not None else review.get("birth_year"))
                year = int(str(review.get("date") or obj.get("date"))[:4])
                gender = _GENDER_CODES[obj.get("gender") or review.get("gender")]
            except (TypeError, ValueError, KeyError):
                skipped += 1
                continue
            if not text.strip() or not 1 <= rating <= 5:
                skipped += 1
                continue
            uid = f"{name}/{number}/{k}"
            authors[uid] = str(obj.get("user_id", number))
            rows.append((uid, text, rating - 1, gender, year - birth, {"age_rapt": rapt_age_bin(birth)}))
    if not rows:
        raise DataError(f"{path}: no usable review (each needs text, a 1-5 rating, gender, birth_year and a date)")
    records, edges, labels = _with_age_bins(rows, authors)  # attributes are per author: split by author
    return Dataset(
        name=name, records=tuple(records), label_names=RATING_NAMES, task="rating (1-5 stars)",
        attribute_values={"gender": GENDERS, "age": tuple(labels), "age_rapt": tuple(b[0] for b in RAPT_BINS)},
        fingerprint=fingerprint_files([path]),
        source=f"Trustpilot raw JSON lines (Hovy, Johannsen & Søgaard 2015) from {path}",
        notes={"protocol": "tp-uk-raw-www2015", "age_bin_edges": edges, "age_bin_rule": _BIN_RULE,
               "age_rapt_rule": "inclusive birth-year ranges; 1955 falls in born_<=1955",
               "skipped_reviews": skipped, "n_authors": len(set(authors.values())), "author_by_uid": authors,
               "caveats": "labels are per author: runs split by author (each review's group) to avoid leakage; "
                          "ages come from self-reported birth years and may be implausible"})


@DATASETS.register("tp_uk_raw", tags=("real", "task", "attributes", "uk"), default=False)
def load_tp_uk_raw(data_dir: Path | None) -> Dataset:
    """Raw TP-UK (Hovy et al. 2015) JSON lines, if you have them: rating, gender, age, age_rapt.

    Args:
        data_dir: Directory holding ``trustpilot/tp_uk.jsonl`` (or the original
            ``trustpilot/united_kingdom.auto-adjusted_gender.NUTS-regions.jsonl``).
    """
    found = next((r for r in RAW_FILES if data_dir is not None and (data_dir / r).is_file()), RAW_FILES[0])
    try:
        path = require_file(data_dir, found, dataset="tp_uk_raw")
    except DataError as err:
        raise DataError(f"{err} (nor {RAW_FILES[1]}); the raw TP-UK corpus is not part of the shared data: "
                        "obtain it from bitbucket.org/lowlands/release (WWW2015) and unzip it there") from None
    return load_tp_uk_jsonl(path)
