"""The drill-down grid (issue #40 item 3): a reading, or which reason there is none."""

from __future__ import annotations

import pytest

from rapt_audit.api.types import Skip
from rapt_audit.benchmark.drilldown import cells, heatmap
from rapt_audit.benchmark.matched import matched
from tests.test_paired_bootstrap import _with_local


def test_each_cell_is_a_reading_or_says_whether_the_attack_does_not_apply_is_pending_or_did_not_run():
    group = _with_local(0.10, worst=True)
    for row in group.rows:
        if row.defense == "b":  # as a text attack on sentence vectors: it cannot read the release
            row.privacy["whitebox"] = Skip("needs a release of kind texts; defense b releases sequence_embeddings")
        if row.defense == "a":
            row.privacy["whitebox"] = Skip("pending: its cell has not finished")
    table = matched(group, fractions=(0.9,), resamples=50)
    defenses, grid = cells(table, 0.9, ["whitebox", "worst_case"])
    assert defenses == ["identity", "a", "b"]  # the reference first; the local-only baselines are not rows
    by = dict(zip(defenses, grid))
    assert by["a"][0] == "pending" and by["b"][0] == "does not apply"
    identity = next(r for r in table.readings["whitebox"][0.9] if r.defense == "identity")
    assert isinstance(by["a"][1], float) and by["identity"][0] == pytest.approx(identity.value.value)
    fig = heatmap(table, 0.9, ["whitebox", "worst_case"], stem="heatmap-1-90")
    assert fig is not None and "does not apply" in fig.svg.decode() and "hatched" in fig.caption
