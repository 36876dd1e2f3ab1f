"""One table model (issue #64): a writer builds a :class:`~rapt_audit.reporting.table.Table` once; Markdown, HTML and
console text only render it. A note every cell of a row or column carries is said once; every arrow comes from the
metric registry; text read from files is escaped in Markdown and HTML alike."""

from __future__ import annotations

import dataclasses
import re
from html.parser import HTMLParser

import pytest

from rapt_audit.api.types import AttackFailure, Estimate
from rapt_audit.reporting import table as model
from rapt_audit.reporting.table import (Block, Cell, Code, Column, Foreign, Line, Tag, estimate_cell, failed, measure,
                                        skipped, table)
from rapt_audit.reporting.table_render import cell_text, to_html, to_markdown, to_text
from rapt_audit.scoring.metrics import arrow

NOTE = "reached in 87 % of resamples"
HOSTILE = "x | <script>alert(1)</script> [l](javascript:alert(1)) *em*"


def _est(value: float) -> Estimate:
    return Estimate(value, value - 0.05, value + 0.05, 40, "bootstrap-percentile")


def _renders(built) -> dict[str, str]:  # noqa: ANN001
    return {"markdown": "\n".join(to_markdown(built)), "html": to_html(built), "text": "\n".join(to_text(built))}


def _reading_table():
    """A matched table: one defense's readings all reached the target in 87 % of resamples, another's every time."""
    columns = [Column("defense", foreign=True), measure("whitebox", "empirical_privacy"),
               measure("bayes", "empirical_privacy"), measure("ner", "empirical_privacy")]
    return table(columns, [
        Line((Cell("mahalanobis"), Cell(_est(0.25), note=NOTE), Cell(_est(0.45), note=NOTE), Cell("not measured"))),
        Line((Cell("t2t"), Cell(_est(0.31)), Cell(_est(0.52), bound="≥"), Cell(_est(0.6)))),
        Line((Cell("embedding"), Cell("not bracketed"), Cell(_est(0.0), note="reached in 60 % of resamples"),
              Cell("not measured")))])


def test_a_note_on_every_cell_of_a_row_is_said_once_after_its_label():
    built = _reading_table()
    first = built.lines[0]
    assert first.note == NOTE and all(not c.note for c in first.cells)
    assert built.lines[2].cells[2].note.startswith("reached in 60")  # one valued cell: said where it is
    for name, text in _renders(built).items():
        assert text.count(NOTE) == 1, name
        assert text.count("reached in 60 % of resamples") == 1, name
    md = to_markdown(built)
    assert f"| mahalanobis ({NOTE}) | 0.250 [0.200, 0.300] | 0.450 [0.400, 0.500] | not measured |" in md
    assert "| t2t | 0.310 [0.260, 0.360] | ≥ 0.520 [0.470, 0.570] | 0.600 [0.550, 0.650] |" in md
    assert f'<th scope="row">mahalanobis<span class="sub">{NOTE}</span></th>' in to_html(built)


def test_a_note_shared_by_a_column_goes_to_its_header_and_one_shared_by_every_cell_under_the_table():
    columns = [Column("cell"), measure("accuracy"), measure("whitebox", "empirical_privacy")]
    by_column = table(columns, [Line((Cell("a"), Cell(0.8), Cell(0.3, note="one seed"))),
                                Line((Cell("b"), Cell(0.7), Cell(0.4, note="one seed")))])
    assert by_column.columns[2].note == "one seed" and all(not c.note for line in by_column.lines for c in line.cells)
    for name, text in _renders(by_column).items():
        assert text.count("one seed") == 1, name
    assert "| cell | accuracy ↑ | whitebox ↑ (one seed) |" in to_markdown(by_column)
    everywhere = table(columns, [Line((Cell("a"), Cell(0.8, note="smoke"), Cell(0.3, note="smoke"))),
                                 Line((Cell("b"), Cell(0.7, note="smoke"), Cell(0.4, note="smoke")))])
    assert everywhere.notes == ("smoke",) and to_markdown(everywhere)[-2:] == ["", "smoke"]
    one_row = table(columns, [Line((Cell("a"), Cell(0.8, note="smoke"), Cell(0.3, note="smoke")))])
    assert one_row.notes == () and one_row.lines[0].note == "smoke"  # its row's, said after its label
    # Different notes, or a text cell with a note of its own, are left where they are.
    mixed = table(columns, [Line((Cell("a"), Cell(0.8, note="x"), Cell(0.3, note="y"))),
                            Line((Cell("b"), Cell(0.7, note="x"), Cell("skipped", note="z")))])
    assert [[c.note for c in line.cells] for line in mixed.lines] == [["", "", "y"], ["", "", "z"]]
    assert mixed.columns[1].note == "x"


def test_an_error_metric_gets_its_down_arrow_in_every_renderer():
    from rapt_audit.defenses import snd  # declares embedding_mse, an error: lower is better

    assert snd.SndDefense and arrow("embedding_mse") == "↓" and arrow("accuracy") == "↑"
    built = table([Column("cell"), measure("accuracy"), measure(Foreign("embedding_mse"))],
                  [Line((Cell("a"), Cell(0.8), Cell(0.07)))])
    for name, text in _renders(built).items():
        assert "embedding_mse ↓" in text and "accuracy ↑" in text and "embedding_mse ↑" not in text, name
    long = table([Column("metric"), Column("value", numeric=True)],
                 [Line((model.measure_cell("embedding_mse"), Cell(0.07)))], labels=0)
    assert all("embedding_mse ↓" in text for text in _renders(long).values())


def test_every_writer_takes_its_arrows_from_the_one_place(monkeypatch, tmp_path):
    """The leaderboard, the report and the sweep's console table each draw an attack's arrow from the metric registry
    through :func:`rapt_audit.reporting.table.direction` (before, two of them printed a literal ↑)."""
    from rapt_audit.pipeline.config import RunConfig
    from rapt_audit.pipeline.sweep import Cell as SweepCell
    from rapt_audit.reporting.group_tables import summary_table
    from rapt_audit.reporting.leaderboard import group_table
    from rapt_audit.reporting.summary import group_results
    from rapt_audit.reporting.sweep_table import format_sweep
    from tests.result_factory import fake_result, t2t_sweep
    from rapt_audit.reporting.collect import collect

    monkeypatch.setattr(model, "arrow", lambda metric: "⇣" if metric == "empirical_privacy" else "⇡")
    (group,) = group_results(collect([t2t_sweep(tmp_path / "runs")]).results)
    board = "\n".join(group_table(group, report=None))
    page = to_html(summary_table(group, detailed=True))
    sweep = format_sweep([(SweepCell((("eta", "50"),), "eta=50", RunConfig()), fake_result())])
    for name, text in (("leaderboard", board), ("report", page), ("sweep", sweep)):
        assert "whitebox ⇣" in text and "accuracy ⇡" in text and "↑" not in text, name


def test_text_read_from_files_is_escaped_in_markdown_and_html_and_this_programs_own_is_not():
    built = table([Column("defense", foreign=True), Column(Foreign(HOSTILE), numeric=True), Column("verdict")],
                  blocks=[Block((Line((Cell(HOSTILE, tags=(Tag("no privacy"),)), Cell(_est(0.5)),
                                       Cell("yes: +0.031 [+0.012, +0.049]"))),
                                 Line((Cell("t2t"), failed(HOSTILE), Cell(Foreign(HOSTILE)))),
                                 Line((Cell(Code(HOSTILE)), skipped(HOSTILE), Cell(("at ", Code("a|b"), " and ",
                                                                                     Foreign(HOSTILE)))))),
                                title=Foreign(HOSTILE))],
                  title=("task ", Foreign(HOSTILE), " at 0.764 [0.745, 0.782]"))
    md = to_markdown(built)
    text = "\n".join(md)
    assert "<script" not in text and "javascript:" not in text and not re.search(r"(?<!\\)\]\(", text)
    rows = [line for line in md if line.startswith("|")]
    assert len({len(re.findall(r"(?<!\\)\|", row)) for row in rows}) == 1, rows  # every row keeps its cells
    assert "yes: +0.031 [+0.012, +0.049]" in text and "at 0.764 [0.745, 0.782]" in text  # own text as written
    assert "0.500 [0.450, 0.550]" in text and r"\[0.745" not in text

    class Tags(HTMLParser):
        def __init__(self) -> None:
            super().__init__()
            self.tags: list[str] = []
            self.text = ""

        def handle_starttag(self, tag, attrs):  # noqa: ANN001
            self.tags.append(tag)

        def handle_data(self, data):  # noqa: ANN001
            self.text += data

    page = Tags()
    page.feed(to_html(built, heading="h3"))
    assert "script" not in page.tags and "a" not in page.tags
    assert page.text.count("<script>alert(1)</script>") >= 6  # shown as the text it is, everywhere it was put


def test_the_cells_of_outcomes_say_what_happened_in_every_format():
    est = _est(0.812)
    assert cell_text(Cell(est)) == "0.812 [0.762, 0.862]"
    assert cell_text(Cell(est, bound="≥", note=NOTE)) == f"≥ 0.812 [0.762, 0.862] ({NOTE})"
    assert cell_text(Cell(0.81234, digits=4)) == "0.8123" and cell_text(Cell(float("inf"))) == "∞"
    detailed = to_html(table([Column("a"), Column("b", numeric=True)],
                             [Line((Cell("x"), estimate_cell(est, detailed=True)))]))
    assert ('<td class="num" title="95% interval, bootstrap-percentile, n = 40"><b>0.812</b> '
            '<span class="ci">[0.762, 0.862]</span><span class="n">n=40 · bootstrap</span></td>') in detailed
    from rapt_audit.reporting.group_tables import outcome_cell

    boom = outcome_cell(AttackFailure("boom"))
    assert boom.state == "fail" and cell_text(boom) == "failed: boom"
    assert cell_text(outcome_cell(None)) == "skipped"


def test_a_row_that_does_not_fill_the_columns_is_refused_before_anything_renders():
    with pytest.raises(ValueError, match="a row of 1 cells in a table of 2 columns"):
        table([Column("a"), Column("b")], [Line((Cell("x"),))])
    spanning = table([Column("a"), Column("b"), Column("c")],
                     [Line((Cell("x"), dataclasses.replace(skipped("why"), span=2)))])
    assert to_markdown(spanning)[-1] == "| x | skipped |  |" and 'colspan="2"' in to_html(spanning)
