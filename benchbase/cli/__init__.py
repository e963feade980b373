"""The command line: `benchbase run`, `benchbase data ...`, `benchbase plugins`, ..."""

from __future__ import annotations

from benchbase.cli import (  # noqa: F401  (they register commands)
    backend_test_command,
    check_commands,
    data_commands,
    decode_commands,
    info_commands,
    package_commands,
    rcp_commands,
    report_commands,
    results_commands,
    run_command,
    sweep_command,
    verify_command,
)
from benchbase.cli.app import cli, main

__all__ = ["cli", "main"]
