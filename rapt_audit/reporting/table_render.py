"""The renderers of a :class:`~rapt_audit.reporting.table.Table`: Markdown, HTML and console text (issue #64).

They draw what the table holds and decide nothing: the columns, their arrows and every note are the table's. Each
format says a value the one way it has — an estimate as ``0.812 [0.771, 0.850]`` (in HTML its value bold, its
interval muted), a number with the table's decimals, a note after its value as "(note)" (in HTML as small print) —
and escapes what was read from a file: :func:`~rapt_audit.reporting.markdown.markdown_text` in Markdown, every text
in HTML. Small print (an estimate's sample size, a skip's reason) is HTML's alone: a Markdown or console cell is one
short line.
"""

from __future__ import annotations

import html
import math
import re
from typing import Callable

from rapt_audit.api.types import Estimate
from rapt_audit.reporting.markdown import markdown_text
from rapt_audit.reporting.table import Cell, Code, Column, Foreign, Line, Table, Text

e = html.escape

#: A name shown as Markdown code only where it holds nothing a backtick could end (else as escaped text); in a
#: table's cell, no pipe either (a pipe ends a cell even inside code).
_CODE_SAFE = re.compile(r"[\w.:@/=,+|%()-]+")
_CELL_CODE_SAFE = re.compile(r"[\w.:@/=,+%()-]+")


def markdown_of(text: Text, *, foreign: bool = False, cell: bool = False) -> str:
    """``text`` as Markdown: this program's own text as written, text read from a file escaped, code as code
    (``cell``: inside a table's cell)."""
    if isinstance(text, tuple):
        return "".join(markdown_of(part, foreign=foreign, cell=cell) for part in text)
    if isinstance(text, Code):
        return f"`{text}`" if (_CELL_CODE_SAFE if cell else _CODE_SAFE).fullmatch(text) else markdown_text(text)
    return markdown_text(text) if foreign or isinstance(text, Foreign) else str(text)


def html_of(text: Text) -> str:
    """``text`` as HTML: every part escaped, code in ``<code>``."""
    if isinstance(text, tuple):
        return "".join(html_of(part) for part in text)
    return f"<code>{e(text)}</code>" if isinstance(text, Code) else e(str(text))


def plain_of(text: Text) -> str:
    """``text`` as console text."""
    return "".join(map(str, text)) if isinstance(text, tuple) else str(text)


def estimate_text(est: Estimate, *, digits: int = 3, signed: bool = False) -> tuple[str, str]:
    """An estimate's value and its interval as text: ``("0.812", "[0.771, 0.850]")`` (``signed``: ``+0.812``)."""
    spec = f"{'+' if signed else ''}.{digits}f"
    return format(est.value, spec), f"[{format(est.ci_low, spec)}, {format(est.ci_high, spec)}]"


def number_text(cell: Cell) -> str:
    """A cell's value alone, as text: an estimate with its interval, a number with its decimals, a text as it is."""
    value = cell.value
    if isinstance(value, Estimate):
        return " ".join(estimate_text(value, digits=cell.digits, signed=cell.signed))
    if isinstance(value, bool) or value is None:
        return "" if value is None else str(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, tuple):
        return plain_of(value)
    if isinstance(value, float):
        if math.isinf(value):
            return "∞" if value > 0 else "-∞"
        return f"{value:{'+' if cell.signed else ''}.{cell.digits}f}"
    return str(value)


def _line_text(cell: Cell, column: Column, escape: Callable[[Text, bool], str], *, note: Text = "",
               markdown: bool = False) -> str:
    """One cell as one line of text (Markdown when ``markdown``, else console text)."""
    foreign = column.foreign if cell.foreign is None else cell.foreign
    text = escape(cell.value, foreign) if isinstance(cell.value, (str, tuple)) else number_text(cell)
    if cell.bound:
        text = f"{cell.bound} {text}"
    if cell.arrow:
        text += f" {cell.arrow}"
    if cell.state == "fail" and cell.why:  # the message is a plugin's: the line is escaped as one text
        text = escape(f"{plain_of(cell.value)}: {cell.why}", True)
    if cell.facts:
        text = "; ".join(f"{escape(k, True)}: {escape(v, True)}" for k, v in cell.facts)
    if markdown and cell.link:
        text = f"[{text}]({cell.link})"
    if markdown and cell.strong:
        text = f"**{text}**"
    text += "".join(f" ({escape(tag.text, False)})" for tag in cell.tags)
    for said in (cell.note, note):
        if said:
            text += f" ({escape(said, False)})"
    return text


def _heading(column: Column, escape: Callable[[Text, bool], str]) -> str:
    text = f"{escape(column.name, False)} {column.arrow}".rstrip()
    return text + "".join(f" ({escape(said, False)})" for said in (column.sub, column.note) if said)


def _spread(line: Line, table: Table, render: Callable[[Cell, Column, Text], str]) -> list[str]:
    """A row's cells as texts, one per column (a cell spanning columns is followed by empty ones)."""
    out, col = [], 0
    for i, cell in enumerate(line.cells):
        out.append(render(cell, table.columns[col], line.note if i == 0 else ""))
        out += [""] * (cell.span - 1)
        col += cell.span
    return out


def to_markdown(table: Table) -> list[str]:
    """The Markdown lines of ``table``: its title in bold, the table, then its notes, each a paragraph."""
    def escape(text: Text, foreign: bool) -> str:
        return markdown_of(text, foreign=foreign, cell=True)

    lines = [f"**{markdown_of(table.title)}**", ""] if table.title else []
    lines += ["| " + " | ".join(_heading(c, escape) for c in table.columns) + " |",
              "|" + "|".join("---:" if c.numeric else "---" for c in table.columns) + "|"]
    for block in table.blocks:
        if block.title:
            lines.append(f"| *{markdown_of(block.title)}* |" + " |" * (len(table.columns) - 1))
        lines += ["| " + " | ".join(_spread(line, table, lambda c, col, note: _line_text(
            c, col, escape, note=note, markdown=True))) + " |" for line in block.lines]
    for note in table.notes:
        lines += ["", markdown_of(note)]
    return lines


def to_text(table: Table) -> list[str]:
    """The console lines of ``table``: its title, a header and one line per row, columns padded to line up
    (numbers right-aligned, at least 8 wide), then its notes."""
    def escape(text: Text, foreign: bool) -> str:
        return plain_of(text)

    rows = [_spread(line, table, lambda c, col, note: _line_text(c, col, escape, note=note))
            for line in table.lines]
    heads = [_heading(c, escape) for c in table.columns]
    widths = [max([len(h), *(len(r[i]) for r in rows)] + ([8] if c.numeric else []))
              for i, (h, c) in enumerate(zip(heads, table.columns))]

    def joined(texts: list[str]) -> str:
        return "  ".join(f"{t:>{w}}" if c.numeric else f"{t:<{w}}"
                         for t, w, c in zip(texts, widths, table.columns)).rstrip()

    lines = [plain_of(table.title)] if table.title else []
    lines.append(joined(heads))
    for block in table.blocks:
        if block.title:
            lines.append(plain_of(block.title))
        lines += [joined(_spread(line, table, lambda c, col, note: _line_text(c, col, escape, note=note)))
                  for line in block.lines]
    return lines + [plain_of(note) for note in table.notes]


def _html_cell(cell: Cell, column: Column, note: Text, *, header: bool) -> str:
    if isinstance(cell.value, Estimate):
        value, interval = estimate_text(cell.value, digits=cell.digits, signed=cell.signed)
        body = f"<b>{value}</b> <span class=\"ci\">{interval}</span>"
    elif isinstance(cell.value, (str, tuple)):
        body = html_of(cell.value)
    else:
        body = e(number_text(cell))
    if cell.bound:
        body = f"{e(cell.bound)} {body}"
    if cell.arrow:
        body += f" {cell.arrow}"
    if cell.link:
        body = f"<a href=\"{e(cell.link)}\">{body}</a>"
    if cell.strong:
        body = f"<strong>{body}</strong>"
    if cell.state == "fail":
        body += f": <span class=\"why\">{e(cell.why)}</span>" if cell.why else ""
    elif cell.state == "skip" and cell.why:
        body += f"<span class=\"why\">{e(cell.why)}</span>"
    if cell.facts:
        items = "".join(f"<li><code>{e(k)}</code>: {e(v)}</li>" for k, v in cell.facts)
        body += f"<details><summary>{len(cell.facts)} facts</summary><ul class=\"details\">{items}</ul></details>"
    body += "".join(f" <span class=\"tag{' warn' if tag.warn else ''}\">{e(tag.text)}</span>" for tag in cell.tags)
    if cell.detail:
        body += f"<span class=\"n\">{e(cell.detail)}</span>"
    body += "".join(f"<span class=\"sub\">{html_of(said)}</span>" for said in (cell.note, note) if said)
    attrs = ""
    css = cell.state or ("num" if column.numeric and not header else "")
    if css:
        attrs += f" class=\"{css}\""
    hint = cell.hint or (cell.why if cell.state else "")
    if hint:
        attrs += f" title=\"{e(hint)}\""
    if cell.span > 1:
        attrs += f" colspan=\"{cell.span}\""
    if header:
        return f"<th scope=\"row\"{attrs}>{body}</th>"
    return f"<td{attrs}>{body}</td>"


def to_html(table: Table, *, heading: str | None = None) -> str:
    """``table`` as HTML: its title as a ``heading`` element (``h3``, ``h4``; ``None``: a note paragraph), the table
    (``class`` its kind; each row's first cell its header, its anchor its id), then its notes as note paragraphs."""
    parts = []
    if table.title:
        parts.append(f"<{heading}>{html_of(table.title)}</{heading}>" if heading
                     else f"<p class=\"note\">{html_of(table.title)}</p>")
    head = "".join(f"<th>{html_of(c.name)}{' ' + c.arrow if c.arrow else ''}"
                   + "".join(f"<span class=\"sub\">{html_of(s)}</span>" for s in (c.sub, c.note) if s) + "</th>"
                   for c in table.columns)
    kind = f" class=\"{e(table.kind)}\"" if table.kind else ""
    body = []
    for block in table.blocks:
        if block.title:
            body.append(f"<tr><th colspan=\"{len(table.columns)}\" scope=\"rowgroup\">{html_of(block.title)}</th></tr>")
        for line in block.lines:
            cells, col = [], 0
            for i, cell in enumerate(line.cells):
                cells.append(_html_cell(cell, table.columns[col], line.note if i == 0 else "",
                                        header=i == 0 and table.labels > 0))
                col += cell.span
            anchor = f" id=\"{e(line.anchor)}\"" if line.anchor else ""
            body.append(f"<tr{anchor}>{''.join(cells)}</tr>")
    parts.append(f"<table{kind}><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>")
    parts += [f"<p class=\"note\">{html_of(note)}</p>" for note in table.notes]
    return "".join(parts)


def heading_text(column: Column) -> str:
    """A column's heading as console text: its name, its arrow, what it measures and its note."""
    return _heading(column, lambda text, foreign: plain_of(text))


def cell_text(cell: Cell, column: Column | None = None) -> str:
    """One cell as console text (what a writer that quotes a cell in a sentence says)."""
    return _line_text(cell, column or Column(""), lambda text, foreign: plain_of(text))


__all__ = ["cell_text", "estimate_text", "heading_text", "html_of", "markdown_of", "number_text", "plain_of", "to_html",
           "to_markdown", "to_text"]
