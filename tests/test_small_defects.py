"""Issue #60, item 5: small defects, one test each (each failed on the code before its fix)."""

from __future__ import annotations

import pytest

from rapt_audit.api.errors import DataError
from rapt_audit.data import load_dataset


# --- 1. a NaN label in JSON Lines -------------------------------------------------------------------


def test_json_lines_nan_label_is_refused_at_its_line(tmp_path):
    # Python's json reads NaN; it is a missing value, as NaN in Parquet and null are, not a class "nan".
    path = tmp_path / "nan.jsonl"
    path.write_text('{"text": "a", "label": 1}\n\n{"text": "b", "label": NaN}\n{"text": "c", "label": 2}\n',
                    encoding="utf-8")
    with pytest.raises(DataError, match=rf"{path}:3: row 1 \(line 3\) .*no label in column 'label'"):
        load_dataset(str(path))


def test_json_lines_nan_attribute_is_missing_as_null_is(tmp_path):
    path = tmp_path / "nan_attr.jsonl"
    path.write_text('{"text": "a", "label": 1, "g": "f"}\n{"text": "b", "label": 2, "g": NaN}\n', encoding="utf-8")
    dataset = load_dataset(str(path), columns={"attributes": "g"})
    assert [dict(r.attributes) for r in dataset.records] == [{"g": "f"}, {}]
    assert dataset.attribute_values == {"g": ("f",)}


def test_csv_text_nan_stays_a_class(tmp_path):
    # CSV has no NaN value: the cell is the text "nan", which may be a real class (as "NA" or "null" are text).
    path = tmp_path / "nan.csv"
    path.write_text("text,label\na,nan\nb,pos\n", encoding="utf-8")
    assert load_dataset(str(path)).label_names == ("nan", "pos")


# --- 2. a FIFO as --dataset ----------------------------------------------------------------------


def _in_thread(function, seconds: float = 20.0):
    """``function()``'s return value or exception, or a failure (not a hung suite) if it blocks."""
    import threading

    outcome: dict = {}

    def target():
        try:
            outcome["value"] = function()
        except BaseException as exc:  # noqa: BLE001 - handed back to the test
            outcome["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), "blocked: the FIFO was opened"
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


@pytest.mark.skipif(not hasattr(__import__("os"), "mkfifo"), reason="no FIFOs on this system")
def test_fifo_dataset_is_refused_before_it_is_opened(tmp_path, capsys):
    import os

    from rapt_audit.cli import main
    from rapt_audit.data.files import file_format

    fifo = tmp_path / "pipe.csv"
    os.mkfifo(fifo)
    with pytest.raises(DataError, match=r"pipe.csv is not a regular file"):
        file_format(fifo)
    run = ["run", "--defense", "identity", "--attacks", "random_guess", "--profile", "smoke", "--quiet",
           "--out", str(tmp_path / "out"), "--dataset", str(fifo), "--dry-run"]
    assert _in_thread(lambda: main(run)) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "rapt-audit: error: --dataset" in err and "not a regular file" in err


# --- 3. split sizes larger than the dataset -------------------------------------------------------


def test_too_large_split_size_names_the_key_size_records_and_fix(monkeypatch):
    from rapt_audit.data import SplitSizes, make_splits
    from rapt_audit.data.base import SplitSizeError

    monkeypatch.setenv("RAPT_AUDIT_DATA", "")
    dataset = load_dataset("synthetic")
    n = len(dataset.records)
    sizes = SplitSizes(victim_train=200, victim_test=999999, attacker_train=200, attacker_valid=100)
    with pytest.raises(SplitSizeError, match=rf"has {n} records .*data\.victim_test=999999 alone is more than the "
                                             r"dataset holds; lower them with --set data.<part>=N") as caught:
        make_splits(dataset, sizes, seed=0)
    assert caught.value.key == "victim_test" and "\n" not in str(caught.value)
    # Together too many, none alone: the largest is the one to lower first.
    with pytest.raises(SplitSizeError, match=r"data\.victim_train=400 is the largest") as caught:
        make_splits(dataset, SplitSizes(victim_train=400, victim_test=150, attacker_train=100, attacker_valid=None),
                    seed=0)
    assert caught.value.key == "victim_train"


def _bench(tmp_path, splits: str):
    path = tmp_path / "b.toml"
    path.write_text('name = "b"\nprofile = "smoke"\nseeds = [0]\nattacks = ["random_guess"]\n\n'
                    f'[splits]\n{splits}\n\n[datasets]\nutility = "synthetic"\n\n[defenses.identity]\n',
                    encoding="utf-8")
    return path


def test_benchmark_dry_run_refuses_too_large_split_at_its_line(tmp_path, monkeypatch, capsys):
    from rapt_audit.cli import main

    monkeypatch.setenv("RAPT_AUDIT_DATA", "")
    path = _bench(tmp_path, "victim_train = 100\nvictim_test = 999999")
    assert main(["benchmark", "run", str(path), "--dry-run", "--out", str(tmp_path / "o")]) == 2
    captured = capsys.readouterr()  # a dry run lists its problems with the plan, on standard output
    assert f"{path}:8:" in captured.out + captured.err and "victim_test" in captured.out + captured.err


# --- 4. a cache path that is a file -------------------------------------------------------------


@pytest.mark.parametrize("where", ["cache", "releases"])
def test_release_cache_below_a_file_warns_and_the_run_goes_on(tmp_path, monkeypatch, where):
    import warnings

    import rapt_audit
    from rapt_audit.api import files
    from rapt_audit.pipeline.config import RunConfig

    cache = tmp_path / "cache"
    if where == "cache":
        cache.write_text("not a folder", encoding="utf-8")  # RAPT_AUDIT_CACHE itself is a file
    else:
        (cache / "releases").parent.mkdir()
        (cache / "releases").write_text("not a folder", encoding="utf-8")  # a file where a subfolder goes
    monkeypatch.setenv("RAPT_AUDIT_CACHE", str(cache))
    monkeypatch.setenv("RAPT_AUDIT_DATA", "")
    monkeypatch.setattr(files, "_warned_unwritable", False)
    config = RunConfig(defense="identity", attacks="random_guess", dataset="synthetic", profile="smoke", device="cpu",
                       out=str(tmp_path / "out"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = rapt_audit.run(config)
    assert "random_guess" in result.attacks and (tmp_path / "out" / "result.json").is_file()
    unwritable = [w for w in caught if "cannot be written" in str(w.message)]
    assert len(unwritable) == 1 and "working from memory" in str(unwritable[0].message)


def test_release_store_below_a_file_keeps_the_release(tmp_path, monkeypatch):
    from rapt_audit.api import files
    from rapt_audit.api.types import Release
    from rapt_audit.pipeline.cache import ReleaseStore

    (tmp_path / "file").write_text("x", encoding="utf-8")
    monkeypatch.setattr(files, "_warned_unwritable", False)
    store = ReleaseStore(tmp_path / "file" / "releases")
    with pytest.warns(UserWarning, match="cannot be written .*working from memory"):
        store.save("ab" * 32, Release(uids=("u",), texts=("t",)))
    assert store.load("ab" * 32, uids=["u"]) is None


# --- 5. slim while a run holds the folder ---------------------------------------------------------


def _held_elsewhere(folder):
    """Hold ``folder``'s lock from another thread (flock locks of two descriptors conflict), as a running
    benchmark or cell does; returns the event that lets go."""
    import threading

    from rapt_audit.api.locks import hold_out_dir

    taken, release = threading.Event(), threading.Event()

    def hold():
        with hold_out_dir(folder):
            taken.set()
            release.wait(30)

    thread = threading.Thread(target=hold, daemon=True)
    thread.start()
    assert taken.wait(10)
    return release, thread


@pytest.mark.parametrize("held", ["benchmark", "cell"])
def test_slim_refuses_a_folder_a_run_holds(tmp_path, capsys, held):
    from rapt_audit.cli import main
    from tests.test_slim import result_with_per_record

    path = result_with_per_record(tmp_path / "bench" / "cell-a")
    before = path.read_bytes()
    release, thread = _held_elsewhere(tmp_path / "bench" if held == "benchmark" else path.parent)
    try:
        assert main(["slim", str(tmp_path / "bench")]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "in use by rapt-audit process" in err
        assert str(tmp_path / "bench") in err and "slim" in err
        assert path.read_bytes() == before  # nothing stripped
    finally:
        release.set()
        thread.join(10)
    assert main(["slim", str(tmp_path / "bench")]) == 0  # once the run has let go
    assert path.read_bytes() != before


# --- 6. directional formatting characters in text defenses ------------------------------------------

RLO, PDF, LRI, PDI = "\u202e", "\u202c", "\u2066", "\u2069"
# spaCy glues a control to its word or tags a lone one as any part of speech: PCT2T kept a lone U+202E tagged
# INTJ and replaced the U+202C tagged NOUN by a word, so all after it displayed reversed.
BIDI_TEXTS = [f"hello {RLO} I paid Bob {PDF} ok", f"hello {RLO}my password is 1234{PDF}.", f"see this {RLO}the dog{PDF}.",
              f"{RLO}very big dog{PDF} barked at me", f"my {LRI}secret{PDI} plan is {RLO}here{PDF}",
              f"we se{RLO}cret plan{PDF} it", f"hello {LRI} {PDI} ok"]


@pytest.mark.parametrize(("name", "args"), [("pct2t", {}), ("t2t", {"unit": "word"}), ("t2t", {"unit": "token"})])
def test_text_defenses_keep_directional_pairs_balanced(warm_pos_cache, name, args):
    import numpy as np

    import rapt_audit.defenses  # noqa: F401 - registers the built-ins
    from rapt_audit.api.plugins import DEFENSES
    from rapt_audit.pipeline.context import RunContext

    ctx = RunContext(seed=3, profile="smoke", device="cpu", cache_dir=warm_pos_cache)
    defense = DEFENSES.get(name)(**args)
    for seed in range(3):
        released, _ = defense.privatize(BIDI_TEXTS, eta=25.0, rng=np.random.default_rng(seed), ctx=ctx)
        for before, after in zip(BIDI_TEXTS, released):
            # Each opener with its closer: both kept (as written) or both dropped, never an opener alone.
            counts = [after.count(c) for c in (RLO, PDF, LRI, PDI)]
            assert counts in ([before.count(c) for c in (RLO, PDF, LRI, PDI)], [0, 0, 0, 0]), (before, after)


def test_word_mechanisms_keep_directional_controls(warm_pos_cache):
    from rapt_audit.defenses._word_mechanism import rewrite_words
    from rapt_audit.mechanisms.calibration import ReplacementCount
    from rapt_audit.mechanisms.privatize import split_bidi
    from rapt_audit.pipeline.context import RunContext

    ctx = RunContext(seed=3, profile="smoke", device="cpu", cache_dir=warm_pos_cache)
    out, _ = rewrite_words(ctx, BIDI_TEXTS, lambda units: (["w"] * len(units), ReplacementCount()))
    for before, after in zip(BIDI_TEXTS, out):
        assert [after.count(c) for c in (RLO, PDF, LRI, PDI)] == [before.count(c) for c in (RLO, PDF, LRI, PDI)]
    assert split_bidi(f"se{RLO}cret{PDF}") == ("", "secret", RLO + PDF) and split_bidi("dog") == ("", "dog", "")


# --- 7. links in a published folder ------------------------------------------------------------------


def test_copy_published_never_copies_a_link(tmp_path):
    from types import SimpleNamespace

    from rapt_audit.benchmark.extend import copy_published

    published, out = tmp_path / "published", tmp_path / "out"
    cell = published / "cell-a"
    cell.mkdir(parents=True)
    (cell / "result.json").write_text("{}", encoding="utf-8")
    secret = tmp_path / "secret.txt"
    secret.write_text("private", encoding="utf-8")
    (cell / "stray").symlink_to(secret)  # leaves the published folder
    (cell / "inside").symlink_to(cell / "result.json")  # stays inside: not ours either
    (published / "cell-b").symlink_to(tmp_path)  # a whole cell folder that is a link out
    joined = SimpleNamespace(index={"cells": [{"name": "cell-a"}, {"name": "cell-b"}]}, cells={"cell-a", "cell-b"})
    ext = SimpleNamespace(published=SimpleNamespace(folder=published, joined=joined))
    out.mkdir()
    with pytest.warns(UserWarning, match=r"not copied: .*stray is a symbolic link"):
        copy_published(ext, out)
    assert sorted(p.name for p in (out / "cell-a").iterdir()) == ["result.json"]
    assert not (out / "cell-b").exists() and not (out / "cell-b").is_symlink()
    assert not any(p.is_symlink() for p in out.rglob("*"))
