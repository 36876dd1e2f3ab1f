"""One display-neutral table (issue #64): what every table writer builds once and every renderer draws.

A writer (the leaderboard, the HTML report, the console table of a sweep, the benchmark's first screen and its
matched tables) decides here what a table holds — its columns, each with the direction its measure is better in
(:func:`measure`, from :func:`rapt_audit.scoring.metrics.arrow`, the one place an arrow is computed), its rows of
:class:`Cell` and their notes — and :mod:`rapt_audit.reporting.table_render` draws it as Markdown, HTML or console
text, deciding nothing. A note every cell of a row, of a column or of the whole table carries is said once
(:func:`hoist_notes`), not in each cell.

Text is plain ``str`` where this program wrote it, :class:`Foreign` where it was read from a file or the command
line (a name, a setting, a message: Markdown escapes it, as :func:`rapt_audit.reporting.markdown.markdown_text`
does every such string; HTML escapes every text), and :class:`Code` for a name or path shown as code; a tuple of
these is one text made of parts.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Union

from rapt_audit.api.plugins import load as load_plugins
from rapt_audit.api.types import Estimate
from rapt_audit.scoring.metrics import arrow, declared


class Foreign(str):
    """Text read from a file or the command line (a defense, attack or dataset name, a setting, a message)."""


class Code(str):
    """A name, signature or path shown as code (read from a file: Markdown shows it escaped where it holds markup)."""


#: A text: this program's own (``str``), read from a file (:class:`Foreign`), code (:class:`Code`), or parts of these.
Text = Union[str, tuple]
#: What a cell shows: an estimate with its interval, a number, a text (or a text of parts), or nothing.
Value = Union[Estimate, float, int, str, tuple, None]


@dataclass(frozen=True)
class Tag:
    """A short flag after a row's label (``no privacy``, ``reference``); ``warn`` is one a reader must not miss."""

    text: str
    warn: bool = False


@dataclass(frozen=True)
class Column:
    """One column: its name, the arrow of the direction its measure is better in (``↑``/``↓``, or none), what it
    measures when the name does not say (``sub``), whether it holds numbers (aligned as such) and whether its cells'
    text was read from files (``foreign``: escaped in Markdown); ``note``: one every cell shared
    (:func:`hoist_notes`)."""

    name: Text
    arrow: str = ""
    sub: Text = ""
    numeric: bool = False
    foreign: bool = False
    note: Text = ""


@dataclass(frozen=True)
class Cell:
    """One cell of a row.

    Attributes:
        value: An :class:`~rapt_audit.api.types.Estimate` (shown with its interval), a number (``digits`` decimals,
            ``signed``: with its sign), a :data:`Text`, or ``None`` (empty).
        note: Said after the value, as "(note)"; a note shared by a whole row or column is said once
            (:func:`hoist_notes`).
        bound: Said before the value: ``≥`` for a lower bound.
        arrow: The direction of the measure the cell names (a table with a measure per row): :func:`measure_cell`.
        state: ``skip`` or ``fail``: an outcome without a number; ``value`` says which and ``why`` says why (a
            failure's message is shown everywhere, a skip's reason as small print).
        why: The reason of a skip or a failure (read from a file: always escaped).
        detail: Small print under the value, where the format has any (HTML): an estimate's sample size and method.
        hint: What a pointer over the cell shows (HTML ``title``): an estimate's interval level, method and size.
        foreign: Whether the text was read from a file; ``None``: as its column.
        tags: Flags after the value (a row's label).
        link: The address the value links to.
        strong: The value in bold (a summary row's label).
        span: How many columns the cell spans.
        facts: ``(name, value)`` pairs listed under the value, collapsed where the format can (HTML).
    """

    value: Value = None
    note: Text = ""
    bound: str = ""
    arrow: str = ""
    state: str = ""
    why: str = ""
    detail: str = ""
    hint: str = ""
    foreign: bool | None = None
    digits: int = 3
    signed: bool = False
    tags: tuple[Tag, ...] = ()
    link: str = ""
    strong: bool = False
    span: int = 1
    facts: tuple[tuple[str, str], ...] = ()

    @property
    def valued(self) -> bool:
        """Whether the cell holds a number (an estimate or a number): the cells :func:`hoist_notes` reads."""
        return isinstance(self.value, (Estimate, int, float)) and not isinstance(self.value, bool)


@dataclass(frozen=True)
class Line:
    """One row: its cells, the first ``Table.labels`` of them naming it; ``anchor``: its id (links point at it);
    ``note``: one all its valued cells shared, said once after its label (:func:`hoist_notes`)."""

    cells: tuple[Cell, ...]
    anchor: str = ""
    note: Text = ""


@dataclass(frozen=True)
class Block:
    """Rows under one title (a release kind); an empty title: rows under no heading of their own."""

    lines: tuple[Line, ...]
    title: Text = ""


@dataclass(frozen=True)
class Table:
    """A table: its columns, its blocks of rows, the notes said under it, a title over it (shown as the caller's
    heading), how many leading columns name a row (``labels``: the first is the row's header; 0: no row has a header)
    and the kind of table it is (``kind``: the HTML class the page's style and its tests find it by)."""

    columns: tuple[Column, ...]
    blocks: tuple[Block, ...]
    title: Text = ""
    notes: tuple[Text, ...] = ()
    labels: int = 1
    kind: str = ""

    @property
    def lines(self) -> list[Line]:
        """Every row, block after block."""
        return [line for block in self.blocks for line in block.lines]


def table(columns: list[Column] | tuple[Column, ...], lines: list[Line] | tuple[Line, ...] = (), *,
          blocks: list[Block] | tuple[Block, ...] = (), title: Text = "", notes: tuple[Text, ...] | list[Text] = (),
          labels: int = 1, kind: str = "") -> Table:
    """A :class:`Table` of ``lines`` (one block without a title) or of ``blocks``, its shared notes said once
    (:func:`hoist_notes`): every writer builds its tables with this.

    Raises:
        ValueError: when a row's cells do not fill the columns (a writer's mistake, named before anything renders).
    """
    found = tuple(blocks) or (Block(tuple(lines)),)
    built = Table(tuple(columns), found, title=title, notes=tuple(notes), labels=labels, kind=kind)
    for line in built.lines:
        if sum(c.span for c in line.cells) != len(built.columns):
            raise ValueError(f"a row of {sum(c.span for c in line.cells)} cells in a table of {len(built.columns)} "
                             f"columns ({[str(c.value) for c in line.cells[:2]]}): give each column one cell")
    return hoist_notes(built)


def direction(metric: str) -> str:
    """:func:`rapt_audit.scoring.metrics.arrow` of ``metric``, the plugins loaded first where it is not declared yet
    (a plugin declares its metrics when imported; a broken third-party plugin leaves the built-ins' declared and the
    table renders)."""
    if declared(metric) is None:
        try:
            load_plugins()
        except Exception:  # noqa: BLE001 - a broken third-party plugin must not stop a table of stored files
            pass
    return arrow(metric)


def measure(name: Text, metric: str | None = None, *, sub: Text = "", numeric: bool = True,
            foreign: bool = False) -> Column:
    """A column of a declared measure, ``name`` shown with the arrow of ``metric`` (default: ``name``)."""
    return Column(name, arrow=direction(metric if metric is not None else str(name)), sub=sub, numeric=numeric,
                  foreign=foreign)


def measure_cell(metric: str) -> Cell:
    """A cell naming a measure (read from a file) with its arrow: a table with one measure per row."""
    return Cell(Foreign(metric), arrow=direction(metric))


def estimate_cell(est: Estimate, *, detailed: bool = False, note: Text = "", bound: str = "") -> Cell:
    """An estimate's cell; ``detailed``: with its sample size and method as small print and its interval's level,
    method and size as the hint (the report's per-setting tables)."""
    if not detailed:
        return Cell(est, note=note, bound=bound)
    method = est.method.replace("bootstrap-percentile", "bootstrap") if est.method else ""
    return Cell(est, note=note, bound=bound, detail=f"n={est.n}" + (f" · {method}" if method else ""),
                hint=f"{est.level:.0%} interval, {est.method or 'method not recorded'}, n = {est.n}")


def skipped(reason: str, text: str = "skipped") -> Cell:
    """A cell of an outcome that was not measured, with the reason."""
    return Cell(text, state="skip", why=reason)


def failed(message: str) -> Cell:
    """A cell of an attack that failed: never a number, always the message."""
    return Cell("failed", state="fail", why=message)


def hoist_notes(built: Table) -> Table:
    """``built`` with each note said once: one that every valued cell of the whole table (two rows at least) carries
    goes under it, one that every valued cell of a row carries goes after the row's label, one every valued cell of a column carries
    goes in its header. A line's note is hoisted when at least two of its cells hold a number, all of them carry
    that one note and no other cell of it carries another (the matched tables' "reached in 87 % of resamples" is
    said once per defense, not once per attack)."""
    shared = _shared([c for line in built.lines for c in line.cells[built.labels:]])
    if shared and sum(any(c.valued for c in line.cells[built.labels:]) for line in built.lines) > 1:
        return replace(_mapped(built, lambda line, col, c: _dropped(c, shared)), notes=(*built.notes, shared))
    blocks = []
    for block in built.blocks:
        lines = []
        for line in block.lines:
            note = _shared(list(line.cells[built.labels:]))
            cells = line.cells[:built.labels] + tuple(_dropped(c, note) for c in line.cells[built.labels:])
            lines.append(replace(line, cells=cells, note=note or line.note))
        blocks.append(replace(block, lines=tuple(lines)))
    built = replace(built, blocks=tuple(blocks))
    columns = list(built.columns)
    for index in range(built.labels, len(columns)):
        # A row whose cell spans several columns has no cell of this column alone: it neither shares nor blocks.
        note = _shared([line.cells[index] for line in built.lines if len(line.cells) == len(columns)])
        if note:
            columns[index] = replace(columns[index], note=note)
            built = _mapped(built, lambda line, col, c, i=index, n=note: _dropped(c, n) if col == i else c)
    return replace(built, columns=tuple(columns))


def _shared(cells: list[Cell]) -> Text:
    """The one note that every valued cell of ``cells`` (two at least) carries, where no other cell carries
    another; ``""`` otherwise."""
    valued = [c for c in cells if c.valued]
    notes = {c.note for c in valued}
    others = {c.note for c in cells if not c.valued and c.note}
    if len(valued) < 2 or len(notes) != 1 or not next(iter(notes)) or others - notes:
        return ""
    return next(iter(notes))


def _dropped(cell: Cell, note: Text) -> Cell:
    return replace(cell, note="") if note and cell.note == note else cell


def _mapped(built: Table, change) -> Table:  # noqa: ANN001 - (line, column index, cell) -> cell
    """``built`` with ``change`` applied to every value cell (not the labels), by the column it stands in."""
    blocks = []
    for block in built.blocks:
        lines = []
        for line in block.lines:
            cells, col = list(line.cells), 0
            for i, cell in enumerate(line.cells):
                if col >= built.labels:
                    cells[i] = change(line, col, cell)
                col += cell.span
            lines.append(replace(line, cells=tuple(cells)))
        blocks.append(replace(block, lines=tuple(lines)))
    return replace(built, blocks=tuple(blocks))


__all__ = ["Block", "Cell", "Code", "Column", "Foreign", "Line", "Table", "Tag", "Text", "Value", "direction",
           "estimate_cell", "failed", "hoist_notes", "measure", "measure_cell", "skipped", "table"]
