"""A report table for a terminal or a pipe narrower than its columns: a block per group, a line or
so per row, every header and cell whole.

rich fits a wide table into 80 columns (a pipe's width, a CI log's) by cutting its headers to
"gro… tar…" and folding each cell down a column, a dozen lines a row; read as "header value" pairs,
the same rows keep every word and need no width but their own.
"""

from __future__ import annotations

import textwrap

from rich.console import Console, RenderableType
from rich.table import Table
from rich.text import Text

from benchbase.report.report_table import ReportTable

__all__ = ["fitted", "narrow_view"]

INDENT = "  "
UNBOUNDED = 100_000
"""Columns to measure a table's natural width in."""
PAIR_GAP = "  "
"""Between two "header value" pairs on a line: wider than the space inside a header such as "CV %"."""


def fitted(table: ReportTable, shown: Table | Text, console: Console) -> RenderableType:
    """``shown`` (the table as rich draws it) where the console is wide enough for it, else the narrow view."""
    # Measured without the console's bound, which rich would clamp the answer to.
    if isinstance(shown, Text) or console.measure(shown, options=console.options.update_width(UNBOUNDED)).maximum \
            <= console.width:
        return shown
    return narrow_view(table, console.width)


def narrow_view(table: ReportTable, width: int) -> Text:
    """The title; then, per value of the first column (a group), its name and one block per row:
    the second column's cell (a target), then the other columns as "header value" pairs wrapped
    within ``width``; then the notes."""
    rows = table.formatted_rows()
    label_width = max((len(row[1]) for row in rows), default=0)
    lines = [table.title]
    for group in dict.fromkeys(row[0] for row in rows):
        lines += ["", group]
        for row in (row for row in rows if row[0] == group):
            pairs = [f"{header}{':' if header == 'note' else ''} {cell}"
                     for header, cell in zip(table.headers[2:], row[2:])]
            lines += _row_lines(f"{INDENT}{row[1]:<{label_width}}{PAIR_GAP}", pairs, width)
    if table.notes:
        lines += ["", *(wrapped for note in table.notes for wrapped in textwrap.wrap(note, width))]
    return Text("\n".join(lines))


def _row_lines(label: str, pairs: list[str], width: int) -> list[str]:
    """The pairs after ``label``, a line filled before the next begins, continuation lines under
    the first pair; a pair longer than a line (a note) wraps on its own words."""
    hanging = " " * len(label)
    room = max(width - len(label), 20)
    lines: list[str] = []
    current = ""
    for pair in pairs:
        candidate = f"{current}{PAIR_GAP}{pair}" if current else pair
        if len(candidate) <= room:
            current = candidate
            continue
        if current:
            lines.append(current)
        pieces = textwrap.wrap(pair, room) or [""]
        lines += pieces[:-1]
        current = pieces[-1]
    lines.append(current)
    return [(label if index == 0 else hanging) + line for index, line in enumerate(lines)]
