"""The command line: `benchbase run`, `benchbase data ...`, `benchbase plugins`, ..."""

from __future__ import annotations

from benchbase.cli import check_commands, data_commands, info_commands, report_commands, run_command  # noqa: F401  (they register commands)
from benchbase.cli.app import cli, main

__all__ = ["cli", "main"]
