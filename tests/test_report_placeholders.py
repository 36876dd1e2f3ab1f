"""No unformatted placeholder reaches a reader (issue #64): the report's per-target captions printed a raw
"{REFERENCE}: its own privacy, for reference." (a string that had lost its ``f``).

Every caption, heading, table header and note of a benchmark's ``index.html``, and every heading, table title and
table header of its ``leaderboard.md`` and ``claims.md``, is read back and searched for what an unformatted string
leaves: ``{NAME}``, ``%s`` / ``%(name)d``, ``None``, ``nan``. The committed CPU grid is rendered again for it (slow,
and shared with the claims test: :mod:`tests.committed_grid`); a small benchmark is checked the same way on every run.
"""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from tests.committed_grid import render, rendered_grid
from tests.result_factory import benchmark_folder

#: What a string that was never formatted leaves: a format field, a printf conversion, Python's None or a NaN.
LEFTOVER = re.compile(r"\{[A-Za-z_]\w*(?:\.\w+)*(?:![rsa])?(?::[^{}]*)?\}|%(?:\(\w+\))?[sdifr]\b|\bNone\b"
                      r"|(?i:\bnan\b)")
#: The elements whose text is a caption, a heading or a table header.
WATCHED = {"caption", "figcaption", "title", "th", "h1", "h2", "h3", "h4", "h5", "h6"}


class _Captions(HTMLParser):
    """The text of every caption, heading, table header and note (an element of class ``note``), and every image's
    alternative text (a figure's caption)."""

    def __init__(self) -> None:
        super().__init__()
        self.open: list[bool] = []
        self.texts: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        if tag == "img":
            self.texts.append(found.get("alt") or "")
            return
        if tag in {"br", "meta", "link", "hr", "input"}:
            return
        self.open.append(tag in WATCHED or "note" in (found.get("class") or "").split())

    def handle_endtag(self, tag: str) -> None:
        if self.open and tag not in {"br", "img", "meta", "link", "hr", "input"}:
            self.open.pop()

    def handle_data(self, data: str) -> None:
        if any(self.open) and data.strip():
            self.texts.append(data)


def html_texts(page: str) -> list[str]:
    """The captions, headings, table headers and notes of ``page``."""
    parser = _Captions()
    parser.feed(page)
    parser.close()
    return parser.texts


def markdown_texts(text: str) -> list[str]:
    """A Markdown file's headings, its lines in bold or italics (table titles) and the header row of each table."""
    lines = text.splitlines()
    found = [line for line in lines if line.startswith("#") or re.fullmatch(r"\*{1,2}.+\*{1,2}:?", line.strip())]
    found += [line for line, below in zip(lines, lines[1:])
              if line.startswith("|") and re.fullmatch(r"\|[-:|]+", below)]
    return found


def leftovers(texts: list[str]) -> list[str]:
    """Each text that holds an unformatted placeholder, with what was found in it."""
    return [f"{match.group()!r} in {text.strip()[:160]!r}" for text in texts for match in LEFTOVER.finditer(text)]


def _check(folder: Path, *, html: Path | None = None, markdown: tuple[Path, ...] = ()) -> None:
    page = (html or folder / "index.html").read_text(encoding="utf-8")
    texts = html_texts(page)
    assert len(texts) > 20, "the report's captions and headings were not found"  # the parser reads the page
    found = leftovers(texts)
    for path in markdown or (folder / "leaderboard.md", folder / "claims.md"):
        headings = markdown_texts(path.read_text(encoding="utf-8"))
        assert headings, f"{path} has no heading"
        found += [f"{path.name}: {f}" for f in leftovers(headings)]
    assert not found, "unformatted placeholders:\n" + "\n".join(found)


def test_the_check_finds_every_kind_of_leftover_and_passes_clean_text():
    bad = ["{REFERENCE}: its own privacy, for reference.", "privacy at %s of the ceiling", "%(share)d %", "seed None",
           "reading nan", "mean NaN", "{table.utility:.3f}"]
    assert [len(leftovers([text])) for text in bad] == [1] * len(bad)
    clean = ["identity: its own privacy, for reference.", "utility = 90 % of the ceiling", "none reaches it",
             "rank of that reading (95 %)", "{", "a set {1, 2}", "nano", "sd = 0.1", "Nonetheless"]
    assert leftovers(clean) == []
    page = ("<h2>one</h2><table><caption>{X}</caption><thead><tr><th>a %s</th></tr></thead><tbody><tr><td>None</td>"
            "</tr></tbody></table><p class='note'>nan</p><p>None</p><figure><img alt='{Y}'></figure>")
    assert [t.strip() for t in html_texts(page)] == ["one", "{X}", "a %s", "nan", "{Y}"]  # never a plain cell
    md = "# a\n\n**b**\n\n| c | d |\n|---|---:|\n| None | e |\n\n*f:*\n\ntext None\n"
    assert markdown_texts(md) == ["# a", "**b**", "*f:*", "| c | d |"]


def test_a_rendered_benchmark_says_no_placeholder(tmp_path: Path):
    """A small benchmark (invented numbers), rendered as the committed grid is: every caption and heading formatted."""
    _check(render(benchmark_folder(tmp_path / "bench", "smoke")))


@pytest.fixture(scope="module")
def grid(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return rendered_grid(tmp_path_factory)


@pytest.mark.slow
def test_the_committed_report_says_no_placeholder(grid: Path):
    _check(grid)
