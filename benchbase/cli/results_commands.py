"""`benchbase results add | list | time | compare`: a results database of runs from many machines and backends.

--db takes a SQLite file's path or a SQLAlchemy URL (postgresql+psycopg://user@host/db); without
it, $BENCHBASE_RESULTS, else results.sqlite in benchbase's cache folder.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click
from rich.console import Console

from benchbase.cli.app import cli
from benchbase.cli.narrow_table import fitted
from benchbase.cli.report_commands import rich_table
from benchbase.errors import InputError
from benchbase.report.report_table import ReportTable

__all__ = ["results"]

DATABASE = click.option("--db", "database", metavar="URL", envvar="BENCHBASE_RESULTS", show_envvar=True,
                        help="A SQLite file or a SQLAlchemy URL; default: results.sqlite in the benchbase cache.")
WIDE = 160
"""Columns of a table written to a file or a pipe, where rich would otherwise fold it to 80."""


@cli.group()
def results() -> None:
    """A results database: import runs, list them, compare systems or backends."""


@results.command("add")
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path, exists=True, file_okay=False))
@DATABASE
def add(paths: tuple[Path, ...], database: str | None) -> None:
    """Import run folders, folders of runs and sweeps (each run once; again is no error)."""
    from benchbase.results_db import add_imports, database_url, describe, open_for_writing, read_imports

    if not paths:
        raise InputError("results add: name at least one RUN_DIR or sweep folder")
    url = database_url(database)
    imports = read_imports(list(paths))
    with open_for_writing(url) as connection:
        added = add_imports(connection, imports)
    console = _console()
    for item in added:
        # Lines, not tables: a long path wraps where the terminal wraps it, never inside the words.
        console.print(f"{item.path}: added {len(item.added)} run(s), {len(item.already)} already in the database",
                      soft_wrap=True)
        for folder in item.left_out:
            console.print(f"[yellow]left out:[/] {folder} has no result.json (killed or still running)", soft_wrap=True)
    console.print(f"results database: {describe(url)}", soft_wrap=True)


@results.command("list")
@DATABASE
def list_runs(database: str | None) -> None:
    """Every run in the database, the oldest first."""
    from benchbase.results_db import database_to_read, open_for_reading, runs_table

    with open_for_reading(database_to_read(database)) as connection:
        table = runs_table(connection)
    _print_fitted(table)


@results.command("time")
@DATABASE
def time_of_runs(database: str | None) -> None:
    """Where each run's wall time went (data wait, the step's phases, evaluation, checkpoints, the rest),
    with its padding and MFU."""
    from benchbase.results_db import database_to_read, open_for_reading, time_table

    with open_for_reading(database_to_read(database)) as connection:
        table = time_table(connection)
    _print_fitted(table)


@results.command("compare")
@DATABASE
@click.option("--by", type=click.Choice(["system", "backend"]), required=True,
              help="Compare two systems (hardware profiles) or two backends.")
@click.argument("first")
@click.argument("second")
def compare(database: str | None, by: str, first: str, second: str) -> None:
    """FIRST and SECOND side by side per workload and target: TTA median and min-max, epochs, final WER."""
    from benchbase.results_db import comparison_table, database_to_read, open_for_reading

    with open_for_reading(database_to_read(database)) as connection:
        table = comparison_table(connection, "system" if by == "system" else "backend", first, second)
    _print_fitted(table)


def _print_fitted(table: ReportTable) -> None:
    """The table as rich draws it where it fits the width, else a block per group (narrow_table)."""
    console = _console()
    console.print(fitted(table, rich_table(table), console))


def _console() -> Console:
    """A terminal's width; off one (a file, a pipe) the COLUMNS a user sets, else WIDE: rich's own
    80 would fold every row of a table into a dozen lines."""
    if sys.stdout.isatty() or os.environ.get("COLUMNS", "").strip().isdigit():
        return Console()
    return Console(width=WIDE)
