"""The report as one self-contained HTML file: every table and figure, nothing to fetch.

Rendered with Jinja2 (autoescaped: a group or note text cannot inject markup); figures are
embedded as base64 PNG data URIs and the style sheet is inline, so report.html opens in any
browser from anywhere, attached to an email or a CI artifact, exactly as the Markdown beside it.
"""

from __future__ import annotations

import base64
import time
from dataclasses import dataclass
from pathlib import Path

import jinja2

from benchbase import __version__
from benchbase.report.report_table import ReportTable, format_cell

__all__ = ["render_html"]

_ENVIRONMENT = jinja2.Environment(loader=jinja2.PackageLoader("benchbase.report", "templates"),
                                  autoescape=True, undefined=jinja2.StrictUndefined, keep_trailing_newline=True)


@dataclass(frozen=True)
class _Cell:
    text: str
    kind: str
    """number, missing (NA) or text: how the cell aligns and shows."""


def render_html(tables: list[ReportTable], figures: list[Path], title: str = "benchbase report") -> str:
    shown = [{"slug": table.slug, "title": table.title, "headers": table.headers, "notes": table.notes,
              "empty": table.empty,
              "rows": [[_cell(value, table.digits) for value in row] for row in table.rows]} for table in tables]
    pictures = [{"name": figure.stem, "data": base64.b64encode(figure.read_bytes()).decode("ascii")}
                for figure in figures if figure.suffix.lower() == ".png"]
    subtitle = (f"{len(tables)} table(s), {len(pictures)} figure(s); written by benchbase {__version__} on "
                f"{time.strftime('%Y-%m-%d %H:%M %Z')}")
    return _ENVIRONMENT.get_template("report.html.j2").render(title=title, subtitle=subtitle, tables=shown,
                                                              figures=pictures, version=__version__)


def _cell(value, digits: int) -> _Cell:
    text = format_cell(value, digits)
    if value is None:
        return _Cell(text, "missing")
    if isinstance(value, int | float) and not isinstance(value, bool):
        return _Cell(text, "number")
    return _Cell(text, "text")
