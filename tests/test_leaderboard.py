"""The Markdown leaderboard: grouping by signature, one row per setting, links into the report."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

from rapt_audit.api.types import Estimate
from rapt_audit.cli import main
from rapt_audit.pipeline.results import write_result
from tests.result_factory import SIG_A, SIG_B, fake_result, t2t_sweep

ROOT = Path(__file__).resolve().parent.parent


def _tables(md: str) -> dict[str, list[str]]:
    """Signature → the table rows (without header) under it."""
    out: dict[str, list[str]] = {}
    current = None
    for line in md.splitlines():
        found = re.search(r"Signature `([^`]+)`", line)
        if found:
            current = found.group(1)
            out[current] = []
        elif current and line.startswith("| ") and not line.startswith("| defense"):
            out[current].append(line)
    return out


def test_rows_are_grouped_by_signature_and_never_mixed(tmp_path):
    runs = t2t_sweep(tmp_path / "runs")
    write_result(fake_result(defense="pct2t", eta=75, signature=SIG_B, privacy={"whitebox": 0.61}), runs / "b1")
    write_result(fake_result(defense="t2t", eta=75, signature=SIG_B, privacy={"whitebox": 0.41}), runs / "b2")
    out = tmp_path / "leaderboard.md"
    assert main(["leaderboard", str(runs), "-o", str(out)]) == 0
    md = out.read_text(encoding="utf-8")
    assert md.startswith("# rapt-audit leaderboard") and "**Profile: smoke.**" in md.splitlines()[2]
    tables = _tables(md)
    assert set(tables) == {SIG_A, SIG_B}
    assert len(tables[SIG_A]) == 4 and len(tables[SIG_B]) == 2
    assert all("0.610" not in row and "0.410" not in row for row in tables[SIG_A])
    assert any(row.startswith("| pct2t | η=75 |") and "0.610 [0.590, 0.630]" in row for row in tables[SIG_B])
    # random_guess exists only under SIG_A, so SIG_B's table has no such column.
    header_b = md.split(f"Signature `{SIG_B}`")[1].split("\n| defense")[1].split("\n")[0]
    assert "random_guess" not in header_b and "whitebox ↑" in header_b
    assert any("(no privacy)" in row and "η=∞" in row for row in tables[SIG_A])


def test_seeds_of_one_setting_make_one_row(tmp_path):
    runs = tmp_path / "runs"
    for seed, value in ((0, 0.50), (1, 0.54), (2, 0.52)):
        write_result(fake_result(eta=75, seed=seed, privacy={"whitebox": value}), runs / f"seed={seed}")
    out = tmp_path / "lb.md"
    assert main(["leaderboard", str(runs), "-o", str(out)]) == 0
    rows = _tables(out.read_text(encoding="utf-8"))[SIG_A]
    assert len(rows) == 1 and "| 0,1,2 |" in rows[0]
    assert "0.520 [" in rows[0]  # the mean of the three seeds


def test_each_utility_column_shows_its_declared_direction(tmp_path):
    result = fake_result(eta=75)
    result.utility["embedding_mse.denoised"] = Estimate(0.07, 0.06, 0.08, 100)  # an error: lower is better
    write_result(result, tmp_path / "runs" / "a")
    out = tmp_path / "lb.md"
    assert main(["leaderboard", str(tmp_path / "runs"), "-o", str(out)]) == 0
    header = next(line for line in out.read_text(encoding="utf-8").splitlines() if line.startswith("| defense |"))
    assert "| accuracy ↑ |" in header and "| embedding_mse.denoised ↓ |" in header


def test_links_point_at_rows_of_the_report(tmp_path):
    runs = t2t_sweep(tmp_path / "runs")
    report = tmp_path / "reports" / "demo" / "index.html"
    assert main(["report", str(runs), "--out", str(report)]) == 0
    out = tmp_path / "leaderboard.md"
    assert main(["leaderboard", str(runs), "-o", str(out), "--report", str(report)]) == 0
    md = out.read_text(encoding="utf-8")
    links = re.findall(r"\]\(([^)#]+)#([^)]+)\)", md)
    assert len(links) == 5  # the group heading plus four rows
    html = report.read_text(encoding="utf-8")
    for path, anchor in links:
        assert path == "reports/demo/index.html"
        assert f"id='{anchor}'" in html or f'id="{anchor}"' in html, anchor


def test_skipped_everywhere_attack_is_listed_not_tabled(tmp_path):
    runs = tmp_path / "runs"
    for eta in (50.0, math.inf):
        write_result(fake_result(eta=eta, privacy={"whitebox": 0.3, "mutual_info": "needs token_embeddings"}),
                     runs / f"eta={eta}")
    out = tmp_path / "lb.md"
    assert main(["leaderboard", str(runs), "-o", str(out)]) == 0
    md = out.read_text(encoding="utf-8")
    assert "mutual_info ↑" not in md and "Not applicable here: `mutual_info` (needs token_embeddings)" in md


def test_synthetic_rows_are_flagged(tmp_path):
    runs = t2t_sweep(tmp_path / "runs", synthetic=True)
    out = tmp_path / "lb.md"
    assert main(["leaderboard", str(runs), "-o", str(out)]) == 0
    assert "SYNTHETIC DEMO DATA" in out.read_text(encoding="utf-8")


def test_no_results_exits_2(tmp_path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["leaderboard", str(empty), "-o", str(tmp_path / "lb.md")]) == 2
    assert "holds no result.json" in capsys.readouterr().err
    assert not (tmp_path / "lb.md").exists()


def test_committed_leaderboard_states_its_profile_and_links_resolve():
    """The committed leaderboard.md: profile at the top, every report link points at a committed file."""
    md = (ROOT / "leaderboard.md").read_text(encoding="utf-8")
    if "rendered" not in md:
        pytest.skip("leaderboard.md has not been generated yet")
    # The committed leaderboard is a benchmark's: it opens with its first screen (issue 40), the headline table of
    # deployable choices (issue 65), and under its tables the notation line and one line of provenance that names
    # the profile.
    from rapt_audit.benchmark.headline import COLUMNS, NOTATION

    paragraphs = md.split("\n\n")
    title, caption, table = paragraphs[:3]
    assert table.startswith("| " + " | ".join(COLUMNS) + " |")
    assert NOTATION in paragraphs and "— profile cpu," in paragraphs[paragraphs.index(NOTATION) + 1]
    links = re.findall(r"\]\(([^)#]+\.html)#([^)]+)\)", md)
    assert links, "no report links"
    for path, anchor in links:
        target = ROOT / path
        assert target.is_file(), path
        assert f"id='{anchor}'" in target.read_text(encoding="utf-8") or f'id="{anchor}"' in target.read_text(
            encoding="utf-8"), anchor


def test_settings_are_labelled_by_their_privacy_parameter(tmp_path):
    """η, a target replacement probability (with the calibrated η) and ε each get their own label."""
    runs = tmp_path / "runs"
    target = fake_result(eta=100, privacy={"whitebox": 0.4})
    target.defense["params"]["replacement"] = 0.45
    target.defense["release_meta"]["eta"] = 87.25
    target.cell_id = "replacement1"
    cape = fake_result(defense="cape", eta=None, privacy={"whitebox": 0.7})
    cape.defense["params"] = {"epsilon": 5.0}
    identity = fake_result(defense="identity", eta=None, privacy={"whitebox": 0.0})
    for name, result in (("target", target), ("cape", cape), ("identity", identity)):
        write_result(result, runs / name)
    out = tmp_path / "lb.md"
    assert main(["leaderboard", str(runs), "-o", str(out)]) == 0
    rows = _tables(out.read_text(encoding="utf-8"))[SIG_A]
    assert any(r.startswith("| t2t | p=0.45 (η=87.2) |") for r in rows), rows
    assert any(r.startswith("| cape | ε=5 |") for r in rows), rows
    assert any(r.startswith("| identity (no privacy) | no privacy |") for r in rows), rows


def test_many_git_states_are_counted_not_listed(tmp_path):
    """A grid run in slices over several sessions ran from many commits: the header names three and counts the rest."""
    runs = tmp_path / "runs"
    for i, eta in enumerate((25, 50, 75, 100, 125)):
        result = fake_result(eta=eta)
        result.env["git_sha"] = f"{i}" * 40 + ("-dirty" if i % 2 else "")
        write_result(result, runs / f"eta={eta}")
    out = tmp_path / "lb.md"
    assert main(["leaderboard", str(runs), "-o", str(out)]) == 0
    header = next(line for line in out.read_text(encoding="utf-8").splitlines() if "from stored results" in line)
    assert "(git 000000000000, 111111111111-dirty, 222222222222 and 2 more)" in header
