"""The benchmark's first screen (issue #40 item 1, issue #65): one deployable choice per row at a target, the
answer first; the frontier read at the target and its rank apart."""

from __future__ import annotations

import pytest

import re
from dataclasses import replace

import numpy as np

from rapt_audit.api.types import Estimate
from rapt_audit.benchmark.headline import (COLUMNS, FRONTIER_COLUMNS, MEASURE, NOTATION, deployable, frontier,
                                           headline, headline_html, headline_markdown, reading_text)
from rapt_audit.benchmark.matched import matched
from rapt_audit.reporting.summary import fmt_estimate, group_results
from tests.test_paired_bootstrap import _parts, _with_local


def test_the_headline_gives_each_defense_its_deployable_setting_worst_case_and_verdict_against_sending_nothing():
    table = matched(_with_local(0.10, worst=True), fractions=(0.9,), resamples=200)
    lines = headline(table, 0.9)
    cells = {line.cells[0]: line for line in lines}
    # Reference rows first: the no-privacy ceiling and each local-only baseline.
    assert [line.group for line in lines[:3]] == ["reference"] * 3
    assert {"identity (no privacy)", "local (client=table)", "local (client=bow)"} <= set(cells)
    a, b = cells["a"].cells, cells["b"].cells
    assert cells["a"].group == cells["b"].group == "releases text"
    # The deployable setting is the most private setting whose utility reaches the target: η=100 (η=25 does not).
    target = table.targets[0.9].value
    rows = [r for r in table.group.rows if r.defense == "a"]
    assert deployable(rows, "accuracy", target).setting == "η=100" == a[1] == b[1]
    assert a[4] == "whitebox" and a[5].startswith("yes: +")  # 0.80 against the best client's ~0.75
    assert len(COLUMNS) <= 8 and all(len(line.cells) == len(COLUMNS) for line in lines)
    # a is b with 2 % of its records more private: a ranks first, b second, in the frontier table (the ranks'own).
    ranked = frontier(table, 0.9)
    assert [line.cells[0] for line in ranked] == ["a", "b"] and [line.cells[3] for line in ranked] == ["1", "2"]
    text = headline_markdown([table], (0.9,), "one line of provenance")
    assert text.splitlines()[0] == ("**sst2 — each defense's most private setting that keeps 90 % of the no-privacy "
                                    f"utility (accuracy ≥ {target:.3f})**")
    assert "| *reference* |" in text and "| *releases text* |" in text and text.rstrip().endswith("provenance")
    assert "| " + " | ".join(FRONTIER_COLUMNS) + " |" in text


def _own(table, defense: str, setting: str):
    return next(r for r in table.group.rows if (r.defense, r.setting) == (defense, setting))


def test_a_row_shows_its_own_settings_worst_case_with_its_interval_never_the_frontier_reading():
    """Issue #65: a row is one deployable choice, so its privacy is that setting's own worst case (seeds combined,
    the per-setting tables' estimate), not the frontier read at the target, which lies between two settings."""
    table = matched(_with_local(0.10, worst=True), fractions=(0.9,), resamples=200)
    lines = [line for line in headline(table, 0.9) if line.group != "reference"]
    readings = {r.defense: r for r in table.readings[MEASURE][0.9]}
    assert lines
    for line in lines:
        row = _own(table, line.cells[0], line.cells[1])
        assert line.cells[2] == fmt_estimate(row.utility["accuracy"])
        assert line.cells[3] == fmt_estimate(row.privacy[MEASURE])  # its value and its interval
        # The fixture's frontier at the target lies between η=25 and η=100: not η=100's own privacy.
        reading = readings[line.cells[0]]
        assert reading.kind == "interpolated" and reading.between == ("η=25", "η=100")
        assert reading_text(reading) not in line.cells
    # Ordered by what the row shows: its own privacy, the most private first.
    shown = [_own(table, line.cells[0], line.cells[1]).privacy[MEASURE].value for line in lines]
    assert shown == sorted(shown, reverse=True)
    # The frontier table holds the readings, each with the settings it lies between, ordered by the reading.
    ranked = frontier(table, 0.9)
    assert [line.cells[1] for line in ranked] == [reading_text(readings[line.cells[0]]) for line in ranked]
    assert all(line.cells[2] == "η=25, η=100" for line in ranked)
    values = [readings[line.cells[0]].value.value for line in ranked]
    assert values == sorted(values, reverse=True)


def test_the_notation_line_is_the_same_in_the_report_and_the_leaderboard_and_says_what_orders_the_rows():
    import html

    table = matched(_with_local(0.10, worst=True), fractions=(0.9,), resamples=100)
    markdown = headline_markdown([table], (0.9,), "provenance")
    page = html.unescape(headline_html([table], (0.9,), "provenance"))
    assert NOTATION in markdown.split("\n\n") and f"<p class='note'>{NOTATION}</p>" in page
    assert "own worst-case privacy" in NOTATION and "ordered by that privacy" in NOTATION
    assert "interpolated" in NOTATION and "ordered by that reading, and the rank" in NOTATION
    assert '<table class="frontier">' in page and all(html.escape(c) in headline_html([table], (0.9,), "")
                                                      for c in FRONTIER_COLUMNS)
    assert headline_markdown([], (0.9,), "provenance") == "" == headline_html([], (0.9,), "provenance")


def _above_the_reference():
    """:func:`_with_local`'s group with a's η=100 replaced by a setting right on identity's records at every seed,
    plus 5 % of the records identity misclassifies: above the no-privacy reference, by construction."""
    group = _with_local(0.10, worst=True)
    ceiling = {int(run.result.config["seed"]): np.array(run.result.utility["accuracy"].per_record.num)
               for row in group.rows if row.defense == "identity" for run in row.runs}
    runs = []
    for row in group.rows:
        for run in row.runs:
            if (row.defense, row.setting) == ("a", "η=100"):
                correct = ceiling[int(run.result.config["seed"])].copy()
                wrong = np.flatnonzero(correct == 0.0)
                correct[wrong[: wrong.size // 3]] = 1.0
                run = replace(run, result=replace(run.result, utility={"accuracy": _parts(correct)}))
            runs.append(run)
    (grouped,) = group_results(runs)
    return grouped


def test_a_setting_above_the_reference_keeps_a_share_bounded_by_its_meaning():
    """Issue #65: "share of the service's gain kept: at most 1.200". The ratio exceeds one where a setting's utility
    exceeds the reference's; the table shows it as all of the gain (≥ 1), with the reason in its note."""
    from rapt_audit.benchmark.render import LOCAL_NOTE, local_rows

    table = matched(_above_the_reference(), fractions=(0.9,), resamples=300)
    margins = {(m.row.defense, m.row.setting): m for m in table.against_local}
    above = margins[("a", "η=100")]
    assert above.verdict == "beats sending nothing" and above.share.value > 1.0  # the raw ratio is above one
    shares = {(r[0], r[1]): r[4] for r in local_rows(table)}
    assert shares[("a", "η=100")].startswith("≥ 1 (above the reference)")
    assert "≥ 1 (above the reference)" in LOCAL_NOTE and "above the reference's" in LOCAL_NOTE
    # No share cell shows a number above one, whatever its verdict.
    for text in shares.values():
        assert all(float(x) <= 1.0 for x in re.findall(r"\d+\.\d+", text)), text


def test_a_share_whose_interval_reaches_above_one_says_so_and_never_shows_at_most_more_than_all():
    from rapt_audit.benchmark.paired import Margin
    from rapt_audit.benchmark.render import _share_cell

    def cell(low: float, high: float, share: tuple[float, float, float]) -> str:
        return _share_cell(Margin(row=None, margin=Estimate((low + high) / 2, low, high),
                                  share=Estimate(share[0], share[1], share[2])))

    assert cell(-0.01, 0.04, (0.9, -0.2, 1.2)) == "not established (anywhere from none to ≥ 1)"  # was "at most 1.200"
    assert cell(-0.01, 0.04, (0.5, -0.2, 0.8)) == "at most 0.800 (not established)"
    assert cell(0.01, 0.05, (0.95, 0.7, 1.15)) == "0.950 [0.700, ≥ 1]"
    assert cell(0.02, 0.06, (1.2, 1.05, 1.4)) == "≥ 1 (above the reference)"
    assert cell(0.01, 0.065, (1.208, 0.667, 2.147)) == "≥ 1 (above the reference) [0.667, ≥ 1]"  # embedding η=∞
    assert cell(0.02, 0.06, (1.0000000002, 1.0, 1.0000000004)) == "1.000 [1.000, 1.000]"  # the reference itself


def test_a_table_without_the_worst_case_column_has_no_headline():
    from tests.test_paired_bootstrap import _group

    assert headline(matched(_group(0.0), fractions=(0.9,), resamples=50), 0.9) == []


#: Measures the headline table once the page has laid out, into an attribute --dump-dom prints.
PROBE = """<script>window.addEventListener('load', () => {
  const t = document.querySelector('table.headline'), r = t.getBoundingClientRect();
  document.body.setAttribute('data-probe', JSON.stringify({top: r.top, bottom: r.bottom, left: r.left,
    right: r.right, scroll: t.scrollWidth, client: t.clientWidth,
    page: document.documentElement.scrollWidth, width: window.innerWidth, height: window.innerHeight}));
});</script>"""


@pytest.mark.browser
def test_the_first_screen_shows_the_headline_whole_at_1280_by_800(tmp_path):
    """The report's headline table lies inside the first 1,280 × 800 screen, whole, with no horizontal scrolling
    of the table or the page (measured by the browser's own layout, not by counting characters)."""
    import json
    import re

    from rapt_audit.benchmark.headline import headline_html
    from rapt_audit.reporting.collect import Collection
    from rapt_audit.reporting.report import write_report
    from tests.chromium import find_chromium, load_page

    group = _with_local(0.10, worst=True)
    table = matched(group, fractions=(0.9,), resamples=100)
    coll = Collection(results=[run for row in group.rows for run in row.runs])
    out, _ = write_report([], out=tmp_path / "report.html", collection=coll,
                          headline=headline_html([table], (0.9,), "one line of provenance"))
    page = out.read_text(encoding="utf-8")
    probed = tmp_path / "probed.html"  # the same page, its CSP dropped so that the probe may run
    probed.write_text(re.sub(r"<meta http-equiv='Content-Security-Policy'[^>]*>", "", page).replace(
        "</body>", PROBE + "</body>"), encoding="utf-8")
    seen = load_page(find_chromium(), probed, workdir=tmp_path / "chromium", args=("--window-size=1280,800",))
    found = re.search(r'data-probe="([^"]*)"', seen.dom)
    assert found, "the probe did not run"
    box = json.loads(found.group(1).replace("&quot;", '"'))
    # Headless Chromium's --window-size is the outer window: its viewport is 1,280 wide and a little less high.
    assert box["width"] == 1280 and box["height"] <= 800, box
    assert 0 <= box["top"] and box["bottom"] <= box["height"], box  # on the first screen, whole
    assert box["left"] >= 0 and box["right"] <= box["width"] and box["scroll"] <= box["client"], box
    assert box["page"] <= box["width"], box  # no horizontal scrolling of the page


def test_the_headline_figure_has_a_panel_per_release_kind_the_targets_and_the_baselines(tmp_path):
    from rapt_audit.reporting.overview_figures import headline_figure

    group = _with_local(0.10, worst=True)
    table = matched(group, fractions=(0.9, 0.95), resamples=50)
    fig = headline_figure(group, "accuracy", table.ceiling.value, (0.9, 0.95), "worst_case", stem="headline-1")
    assert fig is not None and fig.png.startswith(b"\x89PNG")
    svg = fig.svg.decode("utf-8")
    assert "releases text" in svg and "worst-case privacy" in svg  # the panel and the axis
    assert "90 %" in fig.caption and "local-only baselines" in fig.caption and "seed(s)" in fig.caption
    assert headline_figure(group, "accuracy", table.ceiling.value, (0.9,), "whitebox_missing", stem="x") is None


#: A benchmark of two datasets: the task's cells and the NER family's cells apart (as sst2-cpu's SST-2 and CoNLL-2003).
TWO_DATASETS = """name = "two-datasets"
description = "the task on one dataset, the NER attacks on another"
profile = "smoke"
seeds = [0, 1]
attacks = ["whitebox", "ner"]

[datasets]
utility = "synthetic"
inversion = "synthetic"
ner = "conll2003"

[defenses.identity]

[defenses.t2t]
eta = [25, 100]
"""


def test_every_mention_of_the_git_states_names_one_list_counted_once(tmp_path):
    """Issue #65: one leaderboard said "and 11 more" and "and 12 more" of the same git states. A joined row keeps its
    task cell's git state only, so the header, counted over the rows, missed the state only attack cells ran from;
    both now name the cells' list."""
    import json
    from unittest import mock

    from rapt_audit.benchmark.render import write_benchmark_report
    from rapt_audit.reporting import figures
    from rapt_audit.reporting.leaderboard import git_states
    from tests.result_factory import benchmark_folder
    from tests.committed_grid import no_image as _no_image

    file = tmp_path / "two-datasets.toml"
    file.write_text(TWO_DATASETS, encoding="utf-8")
    folder = benchmark_folder(tmp_path / "bench", str(file))
    shas: list[str] = []
    for path in sorted(folder.glob("*/result.json")):
        doc = json.loads(path.read_text(encoding="utf-8"))
        # The task's cells ran from four states; the NER dataset's cells from a fifth, which no joined row holds.
        task = [s for s in shas if not s.startswith("f")]
        doc["env"]["git_sha"] = "f" * 40 if "dataset=conll2003" in path.parent.name else f"{len(task) % 4}" * 40
        shas.append(doc["env"]["git_sha"])
        path.write_text(json.dumps(doc), encoding="utf-8")
    with mock.patch.object(figures, "_render", _no_image):
        _, board, joined = write_benchmark_report(folder, out=tmp_path / "out" / "index.html",
                                                  leaderboard=tmp_path / "out" / "leaderboard.md")
    assert {str(i.result.env.get("git_sha")) for i in joined.collection.results} < set(shas)  # the rows miss one
    named = git_states(shas)
    assert named == "000000000000, 111111111111, 222222222222 and 2 more"  # five states, each counted once
    text = board.read_text(encoding="utf-8").replace("\\", "")
    assert f"from stored results (git {named})" in text and f"from git {named};" in text
    assert len(re.findall(r"and \d+ more", text)) == 2  # the header and the "ran" line, no other count
    assert git_states(["a" * 40] * 3 + ["b" * 40 + "-dirty"]) == "aaaaaaaaaaaa, bbbbbbbbbbbb-dirty"  # once each
