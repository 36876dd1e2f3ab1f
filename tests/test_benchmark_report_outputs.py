"""``rapt-audit benchmark report DIR --out X`` writes no file into DIR (issue #64): the claims follow the outputs a
user sent elsewhere (``claims.md`` beside ``--leaderboard``, else beside ``--out``), or go where ``--claims`` says."""

from __future__ import annotations

from pathlib import Path
from unittest import mock

import pytest

from rapt_audit.benchmark.render import claims_file
from rapt_audit.cli.main import main
from rapt_audit.reporting import figures
from tests.committed_grid import no_image
from tests.result_factory import benchmark_folder


def _files(folder: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()}


@pytest.fixture(scope="module")
def bench(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished smoke benchmark (invented numbers), never rendered in its own folder."""
    return benchmark_folder(tmp_path_factory.mktemp("bench") / "bench", "smoke")


def _report(capsys, *args: str) -> str:  # noqa: ANN001
    capsys.readouterr()
    with mock.patch.object(figures, "_render", no_image):
        assert main(["benchmark", "report", *args]) == 0
    return capsys.readouterr().out


def test_the_claims_go_beside_the_outputs_named():
    assert claims_file("d") == Path("d/claims.md")
    assert claims_file("d", out="x/index.html") == Path("x/claims.md")
    assert claims_file("d", out="x/index.html", leaderboard="y/board.md") == Path("y/claims.md")
    assert claims_file("d", out="x/index.html", claims="z/c.md") == Path("z/c.md")


def test_a_report_sent_elsewhere_writes_nothing_into_the_benchmark_folder(bench: Path, tmp_path: Path, capsys):
    before = _files(bench)
    out = tmp_path / "site" / "index.html"
    board = tmp_path / "md" / "board.md"
    printed = _report(capsys, str(bench), "--out", str(out), "--leaderboard", str(board))
    assert _files(bench) == before  # not a byte of it changed, nothing was added
    claims = tmp_path / "md" / "claims.md"
    assert out.is_file() and board.is_file() and claims.read_text(encoding="utf-8").startswith("# The seed papers'")
    assert f"{out}, {board} and {claims}" in printed
    # --claims: where it says.
    named = tmp_path / "claims" / "judged.md"
    printed = _report(capsys, str(bench), "--out", str(tmp_path / "c" / "index.html"), "--leaderboard",
                      str(tmp_path / "c" / "lb.md"), "--claims", str(named))
    assert named.read_bytes() == claims.read_bytes() and str(named) in printed
    assert not (tmp_path / "c" / "claims.md").exists() and _files(bench) == before


def test_claims_that_would_overwrite_another_output_or_an_input_are_refused(bench: Path, tmp_path: Path, capsys):
    out = tmp_path / "site" / "index.html"
    for claims in (out, bench / "benchmark.json"):
        capsys.readouterr()
        assert main(["benchmark", "report", str(bench), "--out", str(out), "--claims", str(claims)]) == 2
        assert "--claims" in capsys.readouterr().err
    assert not out.exists()


def test_with_out_alone_the_claims_go_beside_the_report(tmp_path: Path, capsys):
    """The leaderboard keeps its default (DIR/leaderboard.md); the claims are not written into DIR."""
    folder = benchmark_folder(tmp_path / "bench", "smoke")
    out = tmp_path / "site" / "index.html"
    printed = _report(capsys, str(folder), "--out", str(out))
    assert (tmp_path / "site" / "claims.md").is_file() and not (folder / "claims.md").exists()
    assert (folder / "leaderboard.md").is_file() and str(tmp_path / "site" / "claims.md") in printed
