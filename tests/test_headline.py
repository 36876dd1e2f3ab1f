"""The benchmark's first screen (issue #40 item 1): one row per defense at a target, the answer first."""

from __future__ import annotations

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
