"""The command reference, ``docs/cli.md``, rendered from the parsers: every command of ``rapt-audit``, its help, its
usage, its options and its examples, so that the page says what ``--help`` says and cannot drift from the code.

Regenerate it from a checkout with ``python -m rapt_audit.cli.reference`` (``--check`` only compares, exit 1 when
the file differs); ``tests/test_cli_reference.py`` fails when the committed page is not what the parsers give.
The parsers are read only through :func:`rapt_audit.cli.main.build_parser`, the one function that builds them,
so a command moved between modules changes nothing here.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

from rapt_audit.api.files import write_text_atomic
from rapt_audit.cli.main import build_parser

#: The page in a checkout (rapt_audit/cli/reference.py → docs/cli.md).
PAGE = Path(__file__).resolve().parents[2] / "docs" / "cli.md"
#: The command that rewrites the page, as the page and the test's message give it.
REGENERATE = "python -m rapt_audit.cli.reference"
#: Usage lines are wrapped at this width whatever the terminal, so the page is the same on every machine.
WIDTH = 100


def commands(parser: argparse.ArgumentParser, *, help_text: str | None = None
             ) -> Iterator[tuple[argparse.ArgumentParser, str | None, int]]:
    """``parser`` and every sub-command below it, depth first in the order they were added: each with the one-line
    help its parent gives it (None for the top level) and its depth (0 for ``rapt-audit``)."""
    stack = [(parser, help_text, 0)]
    while stack:
        current, text, depth = stack.pop()
        yield current, text, depth
        children = []
        for action in _subcommands(current):
            helps = {choice.dest: choice.help for choice in action._choices_actions}
            children += [(sub, helps.get(name), depth + 1) for name, sub in action.choices.items()]
        stack.extend(reversed(children))


def _subcommands(parser: argparse.ArgumentParser) -> list[argparse._SubParsersAction]:
    # argparse keeps a parser's arguments in _actions only: there is no public accessor.
    return [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]


def _formatter(parser: argparse.ArgumentParser) -> argparse.HelpFormatter:
    """The parser's own help formatter at a fixed width (argparse's default reads the terminal's)."""
    return parser.formatter_class(prog=parser.prog, width=WIDTH)


def _usage(parser: argparse.ArgumentParser) -> str:
    formatter = _formatter(parser)
    formatter.add_usage(parser.usage, parser._actions, parser._mutually_exclusive_groups)
    return formatter.format_help().strip()


def _cell(text: str) -> str:
    """Text as one Markdown table cell: on one line, its pipes escaped."""
    return " ".join(text.split()).replace("|", "\\|")


def _text(block: str | None, parser: argparse.ArgumentParser) -> str:
    """A description or epilog: preformatted where the parser prints it as written, else one paragraph."""
    if not block:
        return ""
    if issubclass(parser.formatter_class, argparse.RawDescriptionHelpFormatter):
        return f"```text\n{block.strip(chr(10))}\n```\n\n"
    return " ".join(block.split()) + "\n\n"


def _options(parser: argparse.ArgumentParser) -> str:
    """The table of a parser's arguments (``--help`` itself and sub-command choices left out), as ``--help`` words
    them: argparse's own formatter gives each argument's spelling and expands ``%(default)s`` in its help."""
    formatter = _formatter(parser)
    rows = []
    for action in parser._actions:
        if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)) or action.help == argparse.SUPPRESS:
            continue
        spelled = formatter._format_action_invocation(action)
        default = action.default
        shown = "" if default in (None, False, [], argparse.SUPPRESS) or action.nargs == 0 else f"`{default}`"
        rows.append(f"| `{_cell(spelled)}` | {_cell(formatter._expand_help(action) if action.help else '')} | "
                    f"{_cell(shown)} |")
    if not rows:
        return ""
    return "| argument | meaning | default |\n|---|---|---|\n" + "\n".join(rows) + "\n\n"


def _command_table(parser: argparse.ArgumentParser) -> str:
    rows = [f"| [`{name}`](#{_anchor(sub.prog)}) | {_cell(choice.help or '')} |"
            for action in _subcommands(parser)
            for choice, (name, sub) in zip(action._choices_actions, action.choices.items())]
    return "| command | what it does |\n|---|---|\n" + "\n".join(rows) + "\n\n" if rows else ""


def _anchor(prog: str) -> str:
    """The anchor a Markdown renderer gives the heading ``` `PROG` ``` (lower case, spaces as dashes)."""
    return prog.lower().replace(" ", "-")


def render(parser: argparse.ArgumentParser | None = None) -> str:
    """The Markdown of every command of ``parser`` (default: ``rapt-audit``'s, from :func:`build_parser`)."""
    parser = parser or build_parser()
    parts = [f"# `{parser.prog}` command reference\n\n"
             f"Generated from the parsers by `{REGENERATE}`: do not edit it by hand (`tests/test_cli_reference.py` "
             "fails when it differs from what the parsers give). Every command also answers `--help`.\n\n"]
    for current, text, depth in commands(parser):
        parts.append(f"{'#' * max(2, depth + 1)} `{current.prog}`\n\n")  # the top level and its commands alike
        if text:
            parts.append(_cell(text) + "\n\n")
        parts.append(f"```text\n{_usage(current)}\n```\n\n")
        parts += [_text(current.description, current), _options(current), _command_table(current),
                  _text(current.epilog, current)]
    return "".join(parts).rstrip("\n") + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    """Write ``docs/cli.md`` (or ``--out FILE``); with ``--check``, exit 1 when it differs and write nothing."""
    cli = argparse.ArgumentParser(prog=f"python -m {__name__}", description=__doc__.split("\n\n")[0])
    cli.add_argument("--out", type=Path, default=PAGE, help=f"the page to write (default: {PAGE})")
    cli.add_argument("--check", action="store_true", help="compare only: exit 1 when the page is out of date")
    args = cli.parse_args(argv)
    page = render()
    current = args.out.read_text(encoding="utf-8") if args.out.is_file() else None
    if args.check:
        if current != page:
            print(f"{args.out} is out of date; regenerate it with {REGENERATE}", file=sys.stderr)
            return 1
        return 0
    if current != page:
        write_text_atomic(args.out, page)
    print(f"{args.out}: {'unchanged' if current == page else 'written'}")
    return 0


__all__ = ["PAGE", "REGENERATE", "commands", "main", "render"]


if __name__ == "__main__":
    sys.exit(main())
