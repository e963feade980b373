"""A report table as plain data, rendered as Markdown or CSV here and as rich by the CLI."""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass, field

__all__ = ["NA", "ReportTable", "format_cell"]

NA = "NA"


@dataclass
class ReportTable:
    title: str
    headers: list[str]
    rows: list[list]
    digits: int = 2
    notes: list[str] = field(default_factory=list)
    name: str = ""
    """File name stem for its CSV; derived from the title when empty."""

    @property
    def slug(self) -> str:
        words = "".join(char if char.isalnum() else " " for char in (self.name or self.title).lower()).split()
        return "-".join(words[:8])

    @property
    def empty(self) -> bool:
        """No rows: renderers show the title and the notes (which say why) without a bare grid."""
        return not self.rows

    def formatted_rows(self) -> list[list[str]]:
        return [[format_cell(value, self.digits) for value in row] for row in self.rows]

    def to_markdown(self) -> str:
        lines = [f"### {self.title}", ""]
        if not self.empty:
            lines += ["| " + " | ".join(self.headers) + " |", "|" + "|".join("---" for _ in self.headers) + "|"]
            lines += ["| " + " | ".join(row) + " |" for row in self.formatted_rows()] + [""]
        lines += [f"{note}  " for note in self.notes]
        return "\n".join(lines).rstrip() + "\n"

    def to_csv(self) -> str:
        # CSV keeps full precision for a spreadsheet; None stays NA as in the paper.
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow(self.headers)
        for row in self.rows:
            writer.writerow([NA if value is None else round(value, 6) if isinstance(value, float) else value
                             for value in row])
        return buffer.getvalue()


def format_cell(value, digits: int = 2) -> str:
    if value is None:
        return NA
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return str(value)
