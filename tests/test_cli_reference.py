"""``docs/cli.md`` is what the parsers give (``rapt_audit.cli.reference``): a command, an option or a help text
changed without regenerating the page fails here, with the command that regenerates it."""

from __future__ import annotations

import argparse
import difflib
import re

from rapt_audit.cli.main import build_parser
from rapt_audit.cli.reference import PAGE, REGENERATE, commands, main, render


def test_the_committed_page_is_what_the_parsers_give():
    assert PAGE.is_file(), f"{PAGE} is missing; generate it with {REGENERATE}"
    committed, rendered = PAGE.read_text(encoding="utf-8"), render()
    diff = "".join(difflib.unified_diff(committed.splitlines(True), rendered.splitlines(True), "docs/cli.md (committed)",
                                        "docs/cli.md (from the parsers)", n=1))
    assert committed == rendered, f"docs/cli.md is out of date; regenerate it with {REGENERATE}\n{diff[:4000]}"


def _sections(page: str) -> dict[str, str]:
    """Command (``rapt-audit benchmark run``) → the text under its heading, to the next heading."""
    parts = re.split(r"^#{2,6} `([^`]+)`\n", page, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2]))


def test_every_command_and_option_of_the_parsers_is_on_the_page():
    """Not only equal to what render gives: what render gives holds every command, each with its usage and one row
    per argument it takes, every option spelled (guards against a renderer that silently drops a part)."""
    sections = _sections(render())
    found = [parser for parser, _, _ in commands(build_parser())]
    assert {"rapt-audit run", "rapt-audit benchmark run", "rapt-audit benchmark verify", "rapt-audit plugin new"} <= {
        p.prog for p in found}
    assert list(sections) == [p.prog for p in found], "one section per command, in the parsers' order"
    for parser in found:
        section = sections[parser.prog]
        assert f"usage: {parser.prog}" in section, f"{parser.prog}: no usage"
        rows = [line for line in section.splitlines() if line.startswith("| `") and not line.startswith("| [")]
        arguments = [a for a in parser._actions if a.help != argparse.SUPPRESS
                     and not isinstance(a, (argparse._HelpAction, argparse._SubParsersAction))]
        assert len(rows) == len(arguments), f"{parser.prog}: {len(rows)} rows for {len(arguments)} arguments"
        for action, row in zip(arguments, rows):
            assert all(spelling in row for spelling in action.option_strings), f"{parser.prog}: {row}"


def test_check_names_the_command_that_regenerates_a_stale_page(tmp_path, capsys):
    stale = tmp_path / "cli.md"
    stale.write_text("# an old page\n", encoding="utf-8")
    assert main(["--out", str(stale), "--check"]) == 1
    assert REGENERATE in capsys.readouterr().err and stale.read_text(encoding="utf-8") == "# an old page\n"
    assert main(["--out", str(stale)]) == 0 and stale.read_text(encoding="utf-8") == render()
    assert main(["--out", str(stale), "--check"]) == 0
