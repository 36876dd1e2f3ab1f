"""A hostile name from a file or the command line lands escaped in every Markdown and HTML output.

The name holds a newline (to break out of a heading), a table pipe, a script tag and a ``javascript:``
link. It goes in as a benchmark's name and description (``benchmark.json``), a ``--title``, and a
defense, attack and dataset name in result files; the leaderboard, ``claims.md``, ``rapt-audit claims``
and the benchmark's HTML report must keep their shape, with no raw tag and no link from it.
"""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from unittest import mock

from rapt_audit.benchmark.render import write_benchmark_report
from rapt_audit.cli.main import main
from rapt_audit.reporting import figures
from rapt_audit.reporting.markdown import markdown_text
from tests.result_factory import benchmark_folder, fake_result, write_sweep

NAME = "bench\n# pwned | cell <script>alert(1)</script> [x](javascript:alert(1)) *em* _u_ `c`"
PIXEL = figures.Figure("x", "x", b"\x89PNG\r\n\x1a\n", b"")  # drawing figures is most of a report's time


def _no_image(fig, stem, caption):
    figures._pyplot().close(fig)
    return figures.Figure(stem, caption, PIXEL.png, b"")


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.urls: list[str] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.urls += [value or "" for name, value in attrs if name in ("href", "src")]

    def handle_data(self, data):
        self.text.append(data)


def _parse(page: str) -> _Tags:
    parser = _Tags()
    parser.feed(page)
    parser.close()
    return parser


def _cells(row: str) -> int:
    return len(re.findall(r"(?<!\\)\|", row)) - 1


def _assert_inert_markdown(md: str, *, heading: bool = True) -> None:
    """No raw tag or link from the name; the heading stays one line; every table keeps its column count."""
    assert "<script" not in md and "](javascript:" not in md and "javascript:" not in md, md
    lines = md.splitlines()
    if heading:
        assert lines[0].startswith("# ") and "pwned" in lines[0] and lines[1] == "", lines[:2]
    assert not any(line.lstrip().startswith("# pwned") for line in lines)  # no heading of its own
    block: list[str] = []
    for line in [*lines, ""]:
        if line.startswith("|"):
            block.append(line)
            continue
        if block:
            assert all(_cells(row) == _cells(block[0]) for row in block), block
        block = []
    import markdown_it  # the [test] extra's markdown-it-py

    page = _parse(markdown_it.MarkdownIt("commonmark").enable(["table", "strikethrough"]).render(md))
    assert "script" not in page.tags and not any(u.lower().lstrip().startswith("javascript") for u in page.urls)
    assert "<script>alert(1)</script>" in "".join(page.text)  # shown as the text it is


def test_the_escaping_flattens_and_defuses():
    text = markdown_text(NAME)
    assert "\n" not in text and "<" not in text and not re.search(r"(?<!\\)[|\]]", text)
    assert markdown_text("random_guess t2t-v1.0 eta=75") == "random_guess t2t-v1.0 eta=75"  # names stay readable


def test_leaderboard_title_and_names_from_results(tmp_path, capsys):
    root = write_sweep(tmp_path / "runs", {
        f"r{eta}": fake_result(defense=NAME, eta=eta, dataset=NAME, privacy={"whitebox": 0.5, NAME: 0.4})
        for eta in (25, 75)})
    out = tmp_path / "leaderboard.md"
    assert main(["leaderboard", str(root), "--out", str(out), "--title", NAME]) == 0
    _assert_inert_markdown(out.read_text(encoding="utf-8"))


def test_claims_name_defenses_and_attacks_escaped(tmp_path, capsys):
    root = write_sweep(tmp_path / "runs", {
        f"r{eta}": fake_result(defense=NAME, eta=eta, privacy={NAME: 0.9 - eta / 200}) for eta in (25, 75)})
    assert main(["claims", str(root)]) == 0
    md = capsys.readouterr().out
    assert "pwned" in md  # the comparison is there, with the names
    _assert_inert_markdown(md, heading=False)


def test_a_benchmark_named_with_markup_renders_inert_everywhere(tmp_path):
    folder = benchmark_folder(tmp_path / "bench", "smoke")
    index_file = folder / "benchmark.json"
    index = json.loads(index_file.read_text(encoding="utf-8"))
    index.update(name=NAME, description=NAME)  # an edited index: the file is the user's
    index_file.write_text(json.dumps(index), encoding="utf-8")
    with mock.patch.object(figures, "_render", _no_image):
        html_file, board, _ = write_benchmark_report(folder)
    for md_file in (board, folder / "claims.md"):
        _assert_inert_markdown(md_file.read_text(encoding="utf-8"))
    page = _parse(html_file.read_text(encoding="utf-8"))
    assert "script" not in page.tags and not any("javascript" in u.lower() for u in page.urls)
    assert "<script>alert(1)</script>" in "".join(page.text)
