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

__all__ = ["FIGURE_TABLES", "figures_beside", "render_html"]

_ENVIRONMENT = jinja2.Environment(loader=jinja2.PackageLoader("benchbase.report", "templates"),
                                  autoescape=True, undefined=jinja2.StrictUndefined, keep_trailing_newline=True)


@dataclass(frozen=True)
class _Cell:
    text: str
    kind: str
    """number, missing (NA) or text: how the cell aligns and shows."""


FIGURE_TABLES = {"accuracy-over-time": "last-evaluation", "utilization": "throughput-utilization",
                 "throughput-over-time": "throughput-utilization", "throughput-same-batch": "tta-same-batch",
                 "performance-profile": "performance-profile", "time-breakdown": "time-breakdown"}
"""A figure's file stem -> the table (its CSV name) that holds its numbers: the figure is shown
under it. A report of several workloads suffixes both with the workload's name, but for the
performance profile, the one figure and table across workloads."""


def figures_beside(tables: list[ReportTable], figures: list[Path]) -> tuple[dict[str, list[Path]], list[Path]]:
    """Each figure under its table (table slug -> figures, in order), and those of no table in the report."""
    slugs = {table.slug for table in tables}
    beside: dict[str, list[Path]] = {}
    rest = []
    for figure in figures:
        home = next((table_name + figure.stem[len(stem):] for stem, table_name in FIGURE_TABLES.items()
                     if figure.stem == stem or figure.stem.startswith(f"{stem}-")), None)
        if home in slugs:
            beside.setdefault(home, []).append(figure)
        else:
            rest.append(figure)
    return beside, rest


def render_html(tables: list[ReportTable], figures: list[Path], title: str = "benchbase report") -> str:
    pngs = [figure for figure in figures if figure.suffix.lower() == ".png"]
    beside, rest = figures_beside(tables, pngs)
    shown = [{"slug": table.slug, "title": table.title, "headers": table.headers, "notes": table.notes,
              "empty": table.empty, "figures": [_picture(figure) for figure in beside.get(table.slug, [])],
              "rows": [[_cell(value, table.digits) for value in row] for row in table.rows]} for table in tables]
    subtitle = (f"{len(tables)} table(s), {len(pngs)} figure(s); written by benchbase {__version__} on "
                f"{time.strftime('%Y-%m-%d %H:%M %Z')}")
    return _ENVIRONMENT.get_template("report.html.j2").render(title=title, subtitle=subtitle, tables=shown,
                                                              figures=[_picture(figure) for figure in rest],
                                                              all_figures=[figure.stem for figure in pngs],
                                                              version=__version__)


def _picture(figure: Path) -> dict[str, str]:
    return {"name": figure.stem, "data": base64.b64encode(figure.read_bytes()).decode("ascii")}


def _cell(value, digits: int) -> _Cell:
    text = format_cell(value, digits)
    if value is None:
        return _Cell(text, "missing")
    if isinstance(value, int | float) and not isinstance(value, bool):
        return _Cell(text, "number")
    return _Cell(text, "text")
