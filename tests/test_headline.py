"""The benchmark's first screen (issue #40 item 1): one row per defense at a target, the answer first."""

from __future__ import annotations

import pytest

from rapt_audit.benchmark.headline import COLUMNS, deployable, headline, headline_markdown
from rapt_audit.benchmark.matched import matched
from tests.test_paired_bootstrap import _with_local


def test_the_headline_gives_each_defense_its_deployable_setting_worst_case_and_verdict_against_sending_nothing():
    table = matched(_with_local(0.10, worst=True), fractions=(0.9,), resamples=200)
    lines = headline(table, 0.9)
    cells = {line.cells[0]: line for line in lines}
    # Reference rows first: the no-privacy ceiling and each local-only baseline.
    assert [line.group for line in lines[:3]] == ["reference"] * 3
    assert {"identity (no privacy)", "local (client=table)", "local (client=bow)"} <= set(cells)
    # a is b with 2 % of its records more private: a ranks first, b second, both in one release group.
    a, b = cells["a"].cells, cells["b"].cells
    assert cells["a"].group == cells["b"].group == "releases text"
    assert lines.index(cells["a"]) < lines.index(cells["b"]) and a[6] == "1" and b[6] == "2"
    # The deployable setting is the most private setting whose utility reaches the target: η=100 (η=25 does not).
    target = table.targets[0.9].value
    rows = [r for r in table.group.rows if r.defense == "a"]
    assert deployable(rows, "accuracy", target).setting == "η=100" == a[1]
    assert a[4] == "whitebox" and a[5].startswith("yes: +")  # 0.80 against the best client's ~0.75
    assert len(COLUMNS) <= 8 and all(len(line.cells) == len(COLUMNS) for line in lines)
    text = headline_markdown([table], (0.9,), "one line of provenance")
    assert text.splitlines()[0] == ("**sst2 — the most private defenses at 90 % of the no-privacy utility "
                                    f"(accuracy ≥ {target:.3f})**")
    assert "| *reference* |" in text and "| *releases text* |" in text and text.rstrip().endswith("provenance")


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
