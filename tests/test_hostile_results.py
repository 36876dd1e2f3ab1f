"""Hostile result files: any string in a result lands escaped in the report and in the leaderboard.

Results, and the leaderboards built from them, come from other people. Whatever a string field
holds (markup, quotes, Markdown table syntax, newlines), the rendered page must contain exactly the
elements and attributes the template puts there, and each leaderboard row exactly its columns.
"""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from rapt_audit.reporting.collect import Collection, Loaded
from rapt_audit.reporting.leaderboard import render_leaderboard
from rapt_audit.reporting.report import build_report
from tests.result_factory import fake_result

HOSTILE = st.lists(st.sampled_from(list("<>\"'&|\\`*_[]()#!:/ =\n\tajs;") + ["javascript:", "<script>",
                                                                                "<img src=x onerror=1>"]),
                   min_size=1, max_size=12).map("".join)


class _Structure(HTMLParser):
    """Start tags with their attribute names, and every URL-bearing attribute value."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, tuple[str, ...]]] = []
        self.urls: list[str] = []

    def handle_starttag(self, tag, attrs):  # noqa: ANN001, ANN201
        self.tags.append((tag, tuple(sorted(name for name, _ in attrs))))
        self.urls += [value or "" for name, value in attrs if name in ("href", "src")]


def _collection(name: str) -> Collection:
    results = [fake_result(defense=name, eta=25, dataset=name, privacy={"whitebox": 0.4, name: "skipped: " + name}),
               fake_result(defense="t2t", eta=75)]
    return Collection(results=[Loaded(Path(f"r{i}/result.json"), r) for i, r in enumerate(results)])


def _structure(page: str) -> _Structure:
    parser = _Structure()
    parser.feed(page)
    return parser


@settings(max_examples=4, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(name=HOSTILE)
@example(name='"><img src=x onerror=alert(1)>')
@example(name="' onmouseover='alert(1)")
@example(name="javascript:alert(1)")
def test_report_structure_does_not_depend_on_strings(name):
    benign, hostile = (_structure(build_report(_collection(n)).html) for n in ("plain", name))
    assert sorted(hostile.tags) == sorted(benign.tags)  # as a multiset: rows sort by name
    assert not any(url.strip().lower().startswith("javascript") for url in hostile.urls)


def _cells(row: str) -> int:
    return len(re.findall(r"(?<!\\)\|", row)) - 1


@settings(max_examples=40, deadline=None, derandomize=True)
@given(name=HOSTILE)
def test_leaderboard_rows_keep_their_columns(name):
    text = render_leaderboard(_collection(name), report="report.html")
    tables = [line for line in text.splitlines() if line.startswith("|")]
    header = _cells(tables[0])
    assert all(_cells(line) == header for line in tables if not line.startswith("|---"))
    assert "<" not in text.replace("&lt;", "")  # no raw markup from a result reaches the Markdown
