"""A table under a title of its own line, which wraps at the terminal's width, not the table's.

rich wraps a table's title within the table's width, so a title longer than a few narrow columns
("PASS runs/ds2-mini-torch-cpu-20261127-135822/mllog.log (rules 1.9)" over "all rules | pass")
breaks mid-path even on a terminal wide enough for it.
"""

from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text

__all__ = ["titled"]


def titled(title: str, table: Table) -> Group:
    """``table`` under ``title`` (rich markup), in the style rich gives table titles."""
    return Group(Text.from_markup(title, style="table.title"), table)
