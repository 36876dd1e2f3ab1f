"""Hostile result files: any string in a result lands escaped in the report, its figures and the leaderboard.

Results, and the leaderboards built from them, come from other people. Whatever a string field
holds (markup, quotes, Markdown syntax, URLs, TeX, control characters, newlines), the rendered page
must contain exactly the elements, attributes and links the template puts there, each figure must
be well-formed SVG with nothing active in it, and each leaderboard line keep its Markdown shape.

Every hostile document is first checked against the result schema: these are files that
``read_result`` accepts, so they are exactly what can reach a report.
"""

from __future__ import annotations

import base64
import functools
import re
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from rapt_audit.pipeline.result_schema import validate_result_document
from rapt_audit.pipeline.results import RunResult
from rapt_audit.reporting import figures
from rapt_audit.reporting.collect import Collection, Loaded, Problem
from rapt_audit.reporting.leaderboard import render_leaderboard
from rapt_audit.reporting.report import build_report
from rapt_audit.reporting.summary import group_results
from tests.result_factory import est, fake_result

HOSTILE = st.lists(st.sampled_from(list("<>\"'&|\\`*_~[]()#!:/@.$ =\n\tajsw;") + ["javascript:", "<script>", "www.",
                                                                                  "<img src=x onerror=1>", "-->"]),
                   min_size=1, max_size=12).map("".join)
# Markup fragments, or any Unicode text (control characters and NUL included; hypothesis leaves out lone
# surrogates, which the schema check refuses). "identity" is excluded: that name rightly adds a "no privacy" tag.
TEXT = st.one_of(HOSTILE, st.text(max_size=24)).filter(lambda t: t != "identity")

#: Strings that have broken escaping somewhere (HTML, attributes, URLs, SVG/XML, TeX, templates, Markdown).
BATTERY = ['"><script>alert(1)</script>', "' onmouseover='alert(1)", "javascript:alert(1)", "</style><b>x</b>",
           "<svg onload=alert(1)>", "]]><!--", "-- -->", "{{7*7}}${7*7}", "\u202eevil\u202c", "nul\x00byte",
           r"$\foo$", "&lt;script&gt;", "../../x", "https://example.invalid/x.png", "_x_ | ~~y~~ [l](//e.invalid)",
           "a\r\n# heading\n> quote", "<img src=//example.invalid/i.png>", "x" * 400]
SAFE_ID = re.compile(r"[A-Za-z0-9_-]+")
SVG_NAMESPACES = {"http://www.w3.org/2000/svg", "http://www.w3.org/1999/02/22-rdf-syntax-ns#",
                  "http://creativecommons.org/ns#", "http://purl.org/dc/elements/1.1/"}


def _hostile_result(text: str, *, defense: str, eta: float, index: int) -> RunResult:
    """A result in which every free string holds ``text``: names, parameters and their keys, dataset notes,
    warnings, skip reasons, metric names, details, provenance. Checked against the schema, then read."""
    doc = fake_result(defense=defense, eta=eta, dataset=text, signature=f"{text}|sig",
                      privacy={"whitebox": 0.4, f"x{text}": 0.3, f"y{text}": text}).to_dict()
    doc["cell_id"] = f"{text}#{index}"
    doc["warnings"] = [text]
    doc["config"].update(profile=text, model=text, attacks=text, out=text, defense_args={text: text},
                         attack_args={text: {text: text}}, data_args={text: text})
    doc["dataset"].update(task=text, source=text, label_names=[text], notes={f"n{text}": text})
    # Prefixed keys: free-form dicts, but a key that happens to be "eta" must keep its typed value.
    doc["defense"]["params"][f"p{text}"] = text
    doc["defense"]["release_meta"][f"r{text}"] = text
    doc["env"].update(git_sha=text, model=text, device=text, python=text, platform=text, started_at=text,
                      model_fingerprint=text, data_fingerprint=text, versions={text: text})
    doc["utility"][f"u{text}"] = est(0.7).to_dict()
    for outcome in doc["attacks"].values():
        if "skipped" not in outcome:
            outcome["empirical_privacy"]["method"] = text
            outcome["metrics"][f"m{text}"] = est(0.5).to_dict()
            outcome["details"] = {"records": 100, f"d{text}": text}
    validate_result_document(doc, "hostile")
    return RunResult.from_dict(doc)


def _collection(texts: list[str]) -> Collection:
    """Per text: a row named by it and a t2t row beside it, both full of it, and an unusable input naming it."""
    coll = Collection()
    for i, text in enumerate(texts):
        for j, (defense, eta) in enumerate(((text, 25), ("t2t", 75))):
            coll.results.append(Loaded(Path(f"r{i}-{j}/result.json"),
                                       _hostile_result(text, defense=defense, eta=eta, index=j)))
        coll.problems.append(Problem(Path(f"{text}/result.json"), "corrupt", text))
    return coll


class _Structure(HTMLParser):
    """Start tags with their attribute names, the values of ids and URL attributes, and the text."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, tuple[str, ...]]] = []
        self.ids: list[str] = []
        self.urls: list[str] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, tuple(sorted(name for name, _ in attrs))))
        self.ids += [value or "" for name, value in attrs if name == "id"]
        self.urls += [value or "" for name, value in attrs if name in ("href", "src")]

    def handle_data(self, data):
        self.text.append(data)


def _structure(page: str) -> _Structure:
    parser = _Structure()
    parser.feed(page)
    parser.close()
    return parser


# A 1×1 PNG. Saving each figure as PNG and SVG is 90 % of a report's time; the figures' own text is
# checked in test_figures_are_inert_svg_whatever_the_names, so page tests draw but do not save them.
PIXEL = base64.b64decode("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5Er"
                         "kJggg==")


def _no_image(fig, stem, caption):
    figures._pyplot().close(fig)
    return figures.Figure(stem, caption, PIXEL, b"")


def _report_html(texts: list[str]) -> str:
    with mock.patch.object(figures, "_render", _no_image):
        return build_report(_collection(texts), files_rel="figures").html


def _report_structure(texts: list[str]) -> _Structure:
    return _structure(_report_html(texts))


def _assert_same_structure(hostile: _Structure, benign: _Structure) -> None:
    assert sorted(hostile.tags) == sorted(benign.tags)  # as a multiset: rows sort by name
    assert all(SAFE_ID.fullmatch(i) for i in hostile.ids), hostile.ids
    for url in hostile.urls:  # in-page anchors, the figure files, and the embedded PNGs: nothing else
        assert (url.startswith("#") and SAFE_ID.fullmatch(url[1:])
                or re.fullmatch(r"figures/[A-Za-z0-9_-]+\.(png|svg)", url)
                or url.startswith("data:image/png;base64,")), url


@functools.lru_cache(maxsize=1)
def _benign_report() -> _Structure:
    return _report_structure(["plain"])


@settings(max_examples=25, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(text=TEXT)
@example(text='"><img src=x onerror=alert(1)>')
@example(text="' onmouseover='alert(1)")
@example(text="javascript:alert(1)")
@example(text=r"$\frac{$")
@example(text="a b")  # a space: a section id of the old kind ("-attack-a b") was not a valid id
def test_report_structure_does_not_depend_on_strings(text):
    hostile = _report_structure([text])
    _assert_same_structure(hostile, _benign_report())
    if text.strip():  # the name is shown as the text it is (html.escape round-trips through a parser)
        assert text in "".join(hostile.text)


@settings(max_examples=2, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(text=TEXT)
@example(text=r"$\foo$ $x^$")  # TeX: drawn as math text, a parse error stopped the whole report
@example(text="nul\x00 \x1b[2J \u202eevil -- --> ]]> <script>")  # characters XML cannot hold, comment ends
@example(text="y" * 500)  # a name this long made an image too wide for matplotlib to save
def test_figures_are_inert_svg_whatever_the_names(text):
    group = group_results(_collection([text]).results)[0]
    made = figures.group_figures(group, "accuracy", prefix="g1-")
    assert len(made) == 2
    for fig in made.values():
        assert SAFE_ID.fullmatch(fig.stem), fig.stem  # a file name under the figures folder, nothing else
        assert fig.png.startswith(b"\x89PNG")
        root = ET.fromstring(fig.svg)  # well-formed XML
        for node in root.iter():
            namespace, local = node.tag[1:].split("}")
            assert namespace in SVG_NAMESPACES, node.tag  # SVG, and the RDF metadata matplotlib writes
            assert local not in {"script", "foreignObject", "a", "iframe", "image"}, node.tag
            for name, value in node.attrib.items():
                assert not name.lower().startswith("on"), name
                if name.endswith("href"):
                    assert value.startswith("#"), value  # glyph references only


def _markdown_html(text: str) -> str:
    import markdown_it  # the [test] extra's markdown-it-py: missing, the test fails rather than skipping

    return markdown_it.MarkdownIt("commonmark").enable(["table", "strikethrough"]).render(text)


def _cells(row: str) -> int:
    return len(re.findall(r"(?<!\\)\|", row)) - 1


def _link_triggers(markdown: str) -> int:
    prose = re.sub(r"(?<!\\)`[^`\n]*`", "", markdown)  # code spans (an escaped backtick opens none)
    return len(re.findall(r"(?<!\\)[:@]|(?i:www)(?<!\\)\.", prose))


def _shape(line: str) -> str:
    return "table" if line.startswith("|") else line[:2] if line[:1] in "#>-" else "text" if line else ""


@settings(max_examples=40, deadline=None, derandomize=True)
@given(text=TEXT)
@example(text="https://example.invalid www.example.invalid a@example.invalid")
@example(text="_x_ ~~y~~ <b>")
def test_leaderboard_lines_keep_their_shape(text):
    benign_md = render_leaderboard(_collection(["plain"]), report="report.html")
    hostile_md = render_leaderboard(_collection([text]), report="report.html")
    assert [_shape(line) for line in hostile_md.splitlines()] == [_shape(line) for line in benign_md.splitlines()]
    tables = [line for line in hostile_md.splitlines() if line.startswith("|")]
    header = _cells(tables[0])
    assert all(_cells(line) == header for line in tables if not line.startswith("|---"))
    assert "<" not in hostile_md.replace("&lt;", "")  # no raw markup from a result reaches the Markdown
    # GitHub turns https://x, www.x and a@b.x into links by itself: every ':', '@' and 'www.' from the result
    # is escaped, so there are as many unescaped ones as in the template (code spans are never linked).
    assert _link_triggers(hostile_md) == _link_triggers(benign_md), hostile_md
    benign, hostile = (sorted(t for t in _structure(_markdown_html(md)).tags if t != ("code", ()))
                       for md in (benign_md, hostile_md))
    # No emphasis, strike-through, link, image or table cell from the result. (Code spans are left out of
    # the comparison: the template shows a plain name as code and any other name as escaped text.)
    assert hostile == benign
    urls = _structure(_markdown_html(hostile_md)).urls
    assert urls and all(re.fullmatch(r"report\.html#(row|group)-[A-Za-z0-9_-]+", u) for u in urls), urls


@pytest.mark.browser
def test_hostile_report_in_headless_chromium(tmp_path):
    """A battery of nasty strings in every field: in a real browser the DOM has the benign page's elements,
    attributes and links, no script runs or logs, and the page requests nothing."""
    from tests.chromium import find_chromium, load_page

    binary = find_chromium()
    doms = {}
    for kind, texts in (("benign", [f"plain{i}" for i in range(len(BATTERY))]), ("hostile", BATTERY)):
        page_file = tmp_path / f"{kind}.html"
        page_file.write_text(_report_html(texts), encoding="utf-8")
        page = load_page(binary, page_file, workdir=tmp_path / f"chromium-{kind}")
        assert page.console == [], page.console
        assert page.requests == [], page.requests
        doms[kind] = _structure(page.dom)
    _assert_same_structure(doms["hostile"], doms["benign"])
    assert not any(tag == "script" or any(a.startswith("on") for a in attrs) for tag, attrs in doms["hostile"].tags)
    assert "alert(1)" in "".join(doms["hostile"].text)  # the strings are there, as text
