"""Writing a report: one Markdown file and one self-contained HTML file with every table and
figure, and one CSV per table."""

from __future__ import annotations

from pathlib import Path

from benchbase.atomic import atomic_write_text
from benchbase.report.html import figures_beside, render_html
from benchbase.report.report_table import ReportTable

__all__ = ["write_tables"]


def write_tables(tables: list[ReportTable], out: Path, figures: list[Path] = ()) -> list[Path]:
    """Write report.md, report.html and TABLE.csv files into out; returns the paths written."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for table in tables:
        path = out / f"{table.slug}.csv"
        atomic_write_text(path, table.to_csv())
        written.append(path)
    markdown = out / "report.md"
    beside, rest = figures_beside(tables, list(figures))
    sections = ["# benchbase report", ""]
    for table in tables:  # each figure under the table of its numbers, as in report.html
        sections += [table.to_markdown(), *(_markdown_image(figure, out) for figure in beside.get(table.slug, []))]
    sections += [_markdown_image(figure, out) for figure in rest]
    atomic_write_text(markdown, "\n".join(sections))
    html = out / "report.html"
    atomic_write_text(html, render_html(tables, list(figures)))
    return [markdown, html, *written]


def _markdown_image(figure: Path, out: Path) -> str:
    return f"![{figure.stem}]({figure.relative_to(out) if figure.is_relative_to(out) else figure})\n"
