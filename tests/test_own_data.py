"""Your own data: ``--dataset PATH`` for CSV/TSV, JSON Lines/JSON, Parquet and saved Hugging Face datasets."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from rapt_audit.api.errors import DataError, UnknownNameError, UsageError
from rapt_audit.api.types import Span
from rapt_audit.data import SplitSizes, assert_disjoint, is_file_dataset, load_dataset, make_splits
from rapt_audit.data.columns import load_file_dataset
from rapt_audit.pipeline.config import RunConfig, build_config, profile_split_sizes

COLUMNS = {"text": "review", "label": "stars", "attributes": "gender,age", "entities": "ents"}
ENTS = [{"start": 0, "end": 5, "label": "PER"}]


def _write_csv(path: Path, rows: list[list[str]]) -> Path:
    import csv

    with path.open("w", encoding="utf-8", newline="") as handle:
        csv.writer(handle).writerows(rows)
    return path


def _reviews_csv(path: Path) -> Path:
    return _write_csv(path, [
        ["review", "stars", "gender", "age", "ents"],
        ["Alice loved the soup.", "10", "female", "34", json.dumps(ENTS)],
        ["Bad service.", "2", "male", "", ""],
        ["   ", "2", "male", "40", ""],  # blank text: dropped and counted
        ["Okay I guess.", "2", "", "22", "[]"],
    ])


def _rows() -> list[dict]:
    return [{"review": "Alice loved the soup.", "stars": 5, "gender": "female", "ents": ENTS, "uid": "a"},
            {"review": "Bad service.", "stars": 1, "gender": "male", "ents": [], "uid": "b"},
            {"review": "Fine.", "stars": 3, "gender": "male", "ents": [], "uid": "c"}]


# --- formats --------------------------------------------------------------------------------------


def test_csv_round_trip(tmp_path):
    dataset = load_dataset(str(_reviews_csv(tmp_path / "reviews.csv")), columns=COLUMNS)
    assert dataset.name == "file-reviews.csv" and dataset.source == str(tmp_path / "reviews.csv")
    assert [r.text for r in dataset.records] == ["Alice loved the soup.", "Bad service.", "Okay I guess."]
    assert [r.uid for r in dataset.records] == ["file-reviews.csv/0", "file-reviews.csv/1", "file-reviews.csv/3"]
    assert dataset.label_names == ("2", "10")  # numbers in numeric order, not "10" < "2"
    assert [r.label for r in dataset.records] == [1, 0, 0]
    assert [dict(r.attributes) for r in dataset.records] == [{"gender": "female", "age": "34"}, {"gender": "male"},
                                                            {"age": "22"}]  # missing cells: no attribute
    assert dataset.attribute_values == {"gender": ("female", "male"), "age": ("22", "34")}
    assert dataset.records[0].entities == (Span(0, 5, "PER"),) and dataset.entity_labels == ("PER",)
    assert dataset.notes["dropped_empty_text"] == 1 and dataset.notes["format"] == "csv"
    assert dataset.notes["missing_attributes"] == {"gender": 1, "age": 1}
    assert dataset.has_labels and "stars" in dataset.task


def test_jsonl_json_and_tsv(tmp_path):
    rows = _rows()
    jsonl = tmp_path / "r.jsonl"
    jsonl.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n", encoding="utf-8")
    mapping = {"text": "review", "label": "stars", "attributes": ["gender"], "entities": "ents", "id": "uid"}
    dataset = load_dataset(str(jsonl), columns=mapping)
    assert [r.uid for r in dataset.records] == ["a", "b", "c"]
    assert dataset.label_names == ("1", "3", "5") and [r.label for r in dataset.records] == [2, 0, 1]
    assert dataset.records[0].entities == (Span(0, 5, "PER"),)
    array = tmp_path / "r.json"
    array.write_text(json.dumps(rows), encoding="utf-8")
    assert [r.text for r in load_dataset(str(array), columns=mapping).records] == [r.text for r in dataset.records]
    tsv = tmp_path / "pairs.tsv"
    tsv.write_text("q1\tq2\tlabel\nhow old?\twhat age?\t1\nwhere?\twhen?\t0\n", encoding="utf-8")
    pairs = load_dataset(str(tsv), columns={"text": "q1", "text_pair": "q2"})  # label: default column
    assert [(r.text, r.text_pair, r.label) for r in pairs.records] == [("how old?", "what age?", 1),
                                                                        ("where?", "when?", 0)]


def test_parquet_round_trip(tmp_path):
    import pandas as pd
    import pyarrow  # noqa: F401 - the [test] extra's Parquet engine: missing, the test fails rather than skips
    path = tmp_path / "r.parquet"
    pd.DataFrame(_rows()).to_parquet(path)
    dataset = load_dataset(str(path), columns={"text": "review", "label": "stars", "entities": "ents", "id": "uid"})
    assert dataset.notes["format"] == "parquet" and [r.uid for r in dataset.records] == ["a", "b", "c"]
    assert dataset.records[0].entities == (Span(0, 5, "PER"),) and dataset.label_names == ("1", "3", "5")


def test_saved_hugging_face_dataset_and_dataset_dict(tmp_path):
    import datasets  # the [test] extra: missing, the test fails rather than skips
    features = datasets.Features({"sentence": datasets.Value("string"),
                                  "label": datasets.ClassLabel(names=["pos", "neg"])})
    part = {"sentence": ["good", "bad", "fine"], "label": [0, 1, 0]}
    datasets.Dataset.from_dict(part, features=features).save_to_disk(str(tmp_path / "one"))
    one = load_dataset(str(tmp_path / "one"))  # text falls back to 'sentence'; ClassLabel keeps its order
    assert one.label_names == ("pos", "neg") and [r.label for r in one.records] == [0, 1, 0]
    assert one.notes["format"] == "hf" and one.name == "file-one"
    split = datasets.Dataset.from_dict({"text": ["x y", "z"], "ents": [[{"start": 0, "end": 1, "label": "A"}], []]})
    datasets.DatasetDict({"train": split, "test": split}).save_to_disk(str(tmp_path / "dd"))
    both = load_dataset(str(tmp_path / "dd"), columns={"entities": "ents"})
    assert [r.uid for r in both.records] == ["file-dd/train/0", "file-dd/train/1", "file-dd/test/0", "file-dd/test/1"]
    assert both.notes["split_counts"] == {"train": 2, "test": 2} and not both.has_labels
    assert both.records[2].entities == (Span(0, 1, "A"),)


def test_whole_number_attribute_is_binned(tmp_path):
    rows = [["text", "age"]] + [[f"text {i}", str(18 + i)] for i in range(60)]
    dataset = load_dataset(str(_write_csv(tmp_path / "ages.csv", rows)), columns={"attributes": "age"})
    assert len(dataset.attribute_values["age"]) == 6
    assert {r.attributes["age"] for r in dataset.records} == set(dataset.attribute_values["age"])
    assert dataset.notes["attribute_bins"]["age"]["edges"][0] == 18


# --- splits, fingerprint, memo ---------------------------------------------------------------------


def _big_csv(path: Path, n: int = 60, text: str = "review") -> Path:
    words = ["good", "bad", "fine", "slow", "kind", "rude"]
    rows = [[text, "stars", "gender"]]
    rows += [[f"the {words[i % 6]} shop number {i} was {words[(i * 5) % 6]}", str(i % 2 + 1),
              ("female", "male")[i % 3 == 0]] for i in range(n)]
    return _write_csv(path, rows)


def test_splits_are_disjoint_and_seeded(tmp_path):
    dataset = load_dataset(str(_big_csv(tmp_path / "big.csv")), columns={"text": "review", "label": "stars"})
    sizes = SplitSizes(**profile_split_sizes("smoke", len(dataset.records), {"victim_test": 10}))
    first, again = make_splits(dataset, sizes, seed=3), make_splits(dataset, sizes, seed=3)
    assert first == again and first != make_splits(dataset, sizes, seed=4)
    assert_disjoint(first.victim_train, first.victim_test, first.attacker_train, first.attacker_valid)
    assert len(first.victim_test) == 10 and sum(first.sizes().values()) <= 60


def test_fingerprint_covers_bytes_and_mapping(tmp_path):
    path = _reviews_csv(tmp_path / "reviews.csv")
    base = load_dataset(str(path), columns=COLUMNS).fingerprint
    assert load_dataset(str(path), columns=dict(COLUMNS, attributes="gender")).fingerprint != base
    explicit = load_file_dataset(path, {"text": "review"}).fingerprint
    assert explicit == load_file_dataset(path, {"text": "review", "label": ""}).fingerprint  # no label either way
    path.write_bytes(path.read_bytes().replace(b"soup", b"soap"))
    changed = load_dataset(str(path), columns=COLUMNS)  # the memo notices the edit
    assert changed.fingerprint != base and changed.records[0].text == "Alice loved the soap."


def test_directory_fingerprint_covers_every_file(tmp_path):
    import datasets  # the [test] extra: missing, the test fails rather than skips
    datasets.Dataset.from_dict({"text": ["a", "b"]}).save_to_disk(str(tmp_path / "d"))
    before = load_file_dataset(tmp_path / "d").fingerprint
    (tmp_path / "d" / ".DS_Store").write_bytes(b"junk")  # hidden files are not data
    assert load_file_dataset(tmp_path / "d").fingerprint == before
    info = tmp_path / "d" / "dataset_info.json"
    info.write_text(info.read_text(encoding="utf-8") + " ", encoding="utf-8")
    assert load_file_dataset(tmp_path / "d").fingerprint != before


def test_what_counts_as_a_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sst2").mkdir()
    (tmp_path / "mydir").mkdir()
    assert not is_file_dataset("sst2") and not is_file_dataset(None) and not is_file_dataset("sst3")
    assert is_file_dataset("./sst2") and is_file_dataset("mydir") and is_file_dataset("x.csv")
    assert is_file_dataset("data/x")


# --- bad input --------------------------------------------------------------------------------------


@pytest.mark.parametrize(("content", "columns", "message"), [
    (b"", {}, "the file is empty"),
    (b"text,label\n", {}, r"has columns \(text, label\) but no rows"),
    (b"review,stars\nhi,1\n", {}, r"no text column: there is neither 'text' nor 'sentence'. Columns present: "
                                  r"review, stars. Name the text column with --set data.text=COLUMN"),
    (b"review,stars\nhi,1\n", {"text": "reveiw"}, r"no column 'reveiw' \(data.text\). Did you mean 'review'\? "
                                                   r"Columns present: review, stars"),
    (b"text,gender\nhi,f\n", {"attributes": "gender,age"}, r"no column 'age' \(data.attributes\)"),
    (b"text,label\nhi,1\nho,\nhu,\n", {}, r"row 1, row 2 \(0-based, header not counted\): no label in column "
                                          r"'label'.*data.label= \(empty\)"),
    (b"text,label\nhi,1\nho,1\n", {}, r"holds the single value '1'; utility needs at least two classes"),
    (b"text,label\na,1\nb,1,2,3\n", {}, r"not a valid CSV file \(Error tokenizing data"),
    (b"text,id\nhi,1\nho,2\nhu,1\n", {"id": "id"}, r"must be unique; repeated: '1'"),
    (b"text\nok\n\xff\xfe bad\n", {}, r":3:1: not UTF-8 text \(byte 0xff"),
])
def test_bad_csv_names_the_problem(tmp_path, content, columns, message):
    path = tmp_path / "bad.csv"
    path.write_bytes(content)
    with pytest.raises(DataError, match=message):
        load_dataset(str(path), columns=columns)


def test_bad_entities_and_text_name_the_row(tmp_path):
    path = tmp_path / "e.jsonl"
    path.write_text(json.dumps({"text": "hi", "e": [{"start": 0, "end": 9, "label": "X"}]}) + "\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"row 0 .*span \[0, 9\) 'X' is not inside the text of 2 characters"):
        load_dataset(str(path), columns={"entities": "e"})
    csv_path = _write_csv(tmp_path / "e.csv", [["text", "e"], ["hi", "[{oops"]])
    with pytest.raises(DataError, match="row 0 .*entities \\(column 'e'\\): not JSON"):
        load_dataset(str(csv_path), columns={"entities": "e"})
    numbers = tmp_path / "n.jsonl"
    numbers.write_text('{"text": "ok"}\n{"text": 5}\n', encoding="utf-8")
    with pytest.raises(DataError, match=r"row 1 .*column 'text' \(data.text\) holds a value of type int, not text"):
        load_dataset(str(numbers))
    broken = tmp_path / "b.jsonl"
    broken.write_text('{"text": "ok"}\n{"text": \n', encoding="utf-8")
    with pytest.raises(DataError, match="line 2 is not JSON"):
        load_dataset(str(broken))


def test_missing_paths_and_unsupported_files(tmp_path):
    with pytest.raises(DataError, match=r"--dataset .*nope.csv: no such file or directory"):
        load_dataset(str(tmp_path / "nope.csv"))
    with pytest.raises(DataError, match="no such file"):
        load_dataset("missing_file.csv")  # a name with a suffix is a path, never "unknown dataset"
    (tmp_path / "book.xlsx").write_bytes(b"PK")
    with pytest.raises(DataError, match=r"unsupported file type '.xlsx'; supported: .csv, .tsv, .jsonl"):
        load_dataset(str(tmp_path / "book.xlsx"))
    (tmp_path / "plain").mkdir()
    with pytest.raises(DataError, match="not a Hugging Face dataset saved with save_to_disk"):
        load_dataset(str(tmp_path / "plain"))


def test_missing_optional_libraries_name_the_extra(tmp_path, monkeypatch):
    import pandas as pd
    import pyarrow  # noqa: F401 - the [test] extra's Parquet engine: missing, the test fails rather than skips
    path = tmp_path / "r.parquet"
    pd.DataFrame({"text": ["a", "b"]}).to_parquet(path)
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "state.json").write_text("{}", encoding="utf-8")
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # import pyarrow now raises ImportError
    monkeypatch.setitem(sys.modules, "fastparquet", None)
    monkeypatch.setitem(sys.modules, "datasets", None)
    with pytest.raises(DataError, match=r"needs pyarrow: pip install 'rapt-audit\[data\]'"):
        load_dataset(str(path))
    with pytest.raises(DataError, match=r"needs `datasets`: pip install 'rapt-audit\[data\]'"):
        load_dataset(str(tmp_path / "d"))


# --- configuration ---------------------------------------------------------------------------------


def test_column_keys_in_config(tmp_path):
    config = build_config(sets=["dataset=reviews.csv", "data.text=review", "data.victim_test=5",
                                "data.attributes=gender, age"])
    assert config.data_args == {"text": "review", "victim_test": 5, "attributes": "gender,age"}
    assert config.split_overrides == {"victim_test": 5}
    assert config.column_args == {"text": "review", "attributes": "gender,age"}
    assert profile_split_sizes("smoke", 1000, config.data_args)["victim_test"] == 5
    json.dumps(config.to_dict())
    other = build_config(sets=["dataset=reviews.csv", "data.text=body", "data.victim_test=5",
                               "data.attributes=gender,age"])
    assert other.cell_id() != config.cell_id()
    toml = tmp_path / "run.toml"
    toml.write_text('dataset = "reviews.csv"\n[data_args]\ntext = "review"\nattributes = ["gender", "age"]\n'
                    "victim_test = 5\n", encoding="utf-8")
    assert build_config(file=toml).cell_id() == config.cell_id()  # a TOML array, a comma list: one cell


def test_column_key_errors():
    with pytest.raises(UnknownNameError, match=r"unknown data key 'txt'. Did you mean 'text'.*\(split sizes\); "
                                               r"text, text_pair, label, attributes, entities, id, group \(columns"):
        build_config(sets=["dataset=r.csv", "data.txt=review"])
    with pytest.raises(UsageError, match=r"data.text name columns of your own.*'sst2' is not a path"):
        build_config(sets=["dataset=sst2", "data.text=review"])
    with pytest.raises(UsageError, match="apply only to --dataset PATH"):
        RunConfig(data_args={"label": "stars"})  # the default dataset is built in too
    with pytest.raises(UsageError, match="dataset 'synthetic' is not a path to a data file"):
        load_dataset("synthetic", columns={"text": "review"})
    with pytest.raises(UsageError, match="data.text= is empty"):
        build_config(sets=["dataset=r.csv", "data.text="])
    with pytest.raises(UsageError, match="data.victim_test='x' is not an integer"):
        build_config(sets=["data.victim_test=x"])


# --- end to end -----------------------------------------------------------------------------------


def test_run_on_own_csv(tmp_path, monkeypatch):
    import rapt_audit

    monkeypatch.delenv("RAPT_AUDIT_DATA", raising=False)
    path = _big_csv(tmp_path / "shop reviews.csv")
    config = RunConfig(defense="identity", attacks="random_guess", dataset=str(path), profile="smoke", device="cpu",
                       data_args={"text": "review", "label": "stars", "attributes": "gender"},
                       out=str(tmp_path / "out"))
    result = rapt_audit.run(config)
    dataset = load_dataset(str(path), columns=config.column_args)
    assert result.dataset["name"] == "file-shop-reviews.csv" == dataset.name
    assert result.env["data_fingerprint"] == dataset.fingerprint
    assert result.signature.startswith(f"data:file-shop-reviews.csv@{dataset.fingerprint[:8]}|")
    assert result.dataset["notes"]["columns"] == {"text": "review", "label": "stars", "attributes": ["gender"]}
    assert result.dataset["label_names"] == ["1", "2"] and set(result.utility) == {"accuracy", "macro_f1"}
    assert "attribute_accuracy.gender" in result.attacks["random_guess"].metrics
    assert result.config["data_args"] == {"text": "review", "label": "stars", "attributes": "gender"}


def test_cli_dry_run_and_missing_file(tmp_path, capsys):
    from rapt_audit.cli import main

    path = _big_csv(tmp_path / "big.csv")
    run = ["run", "--defense", "identity", "--attacks", "random_guess", "--profile", "smoke", "--quiet",
           "--out", str(tmp_path / "out")]
    columns = ["--set", "data.text=review", "--set", "data.label=stars", "--set", "data.attributes=gender"]
    assert main(run + ["--dataset", str(path)] + columns + ["--dry-run"]) == 0
    printed = capsys.readouterr().out
    assert f"file-big.csv, 60 records ({path})" in printed
    assert "columns   csv: text=review, label=stars (1, 2), attributes=gender(2)" in printed
    assert main(run + ["--dataset", str(tmp_path / "nope.csv")]) == 2
    assert "nope.csv: no such file or directory" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
