"""The drill-down grid (issue #40 item 3): a reading, or which reason there is none."""

from __future__ import annotations

import re

import pytest

from rapt_audit.api.types import Skip
from rapt_audit.benchmark.drilldown import cells, heatmap
from rapt_audit.benchmark.matched import matched
from rapt_audit.reporting.overview_figures import AtLeast
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
    # The caption names the reference defense; an f-string's lost prefix once printed "{REFERENCE}" on the page.
    assert "identity: its own privacy" in fig.caption and not re.search(r"\{[A-Za-z_]+\}", fig.caption)


def test_a_lower_bound_is_drawn_with_its_sign():
    """A reading the grid can only bound (it stops before the target) says "≥" in its cell, as in the tables."""
    import dataclasses

    table = matched(_with_local(0.10, worst=True), fractions=(0.9,), resamples=50)
    readings = table.readings["whitebox"][0.9]
    a = next(i for i, r in enumerate(readings) if r.defense == "a")
    readings[a] = dataclasses.replace(readings[a], kind="lower bound")
    defenses, grid = cells(table, 0.9, ["whitebox"])
    value = dict(zip(defenses, grid))["a"][0]
    assert isinstance(value, AtLeast) and value == readings[a].value.value
    svg = heatmap(table, 0.9, ["whitebox"], stem="heatmap-bound").svg.decode()
    assert f"≥{value:.2f}" in svg and "≥: a lower bound" in heatmap(table, 0.9, ["whitebox"], stem="h").caption


def test_the_long_table_has_a_line_per_setting_and_measure_and_a_defenses_own_diagnostics_apart():
    from dataclasses import replace

    from rapt_audit.reporting.leaderboard import long_table
    from rapt_audit.reporting.summary import group_results

    group = _with_local(0.10, worst=True)
    runs = []
    for row in group.rows:  # b reports a variant of its utility of its own, as SnD does (accuracy.client_only)
        for run in row.runs:
            utility = dict(run.result.utility)
            if row.defense == "b":
                utility["accuracy.client_only"] = utility["accuracy"]
            runs.append(replace(run, result=replace(run.result, utility=utility)))
    (grouped,) = group_results(runs)
    lines = long_table(grouped, report=None)
    body = [line for line in lines if line.startswith("| ") and not line.startswith("| defense")]
    # identity 1 + a 3 + b 3 settings, each: accuracy + whitebox + worst_case; the 2 baselines: accuracy only.
    assert len(body) == 7 * 3 + 2 + 3 and all(line.count(" | ") == 5 for line in body)
    own = lines[lines.index("A defense's own diagnostics (variants of its utility it reports beside the service's):"):]
    assert [line for line in own if "client_only" in line] == [line for line in body if "client_only" in line]
    assert len([line for line in own if "client_only" in line]) == 3


def test_the_small_multiples_put_every_bounded_attack_on_shared_axes():
    from rapt_audit.reporting.overview_figures import small_multiples_figure

    group = _with_local(0.10, worst=True)
    fig = small_multiples_figure(group, "accuracy", ["whitebox", "worst_case", "no_such_attack"], stem="attacks-1")
    assert fig is not None and "shared axes" in fig.caption
    svg = fig.svg.decode("utf-8")
    assert "whitebox" in svg and "worst_case" in svg and "no_such_attack" not in svg
    assert small_multiples_figure(group, "accuracy", ["no_such_attack"], stem="x") is None
