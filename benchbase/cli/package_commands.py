"""`benchbase package make`, `benchbase package check` and `benchbase summarize`: an MLPerf-Training-shaped
submission package of run folders, the checks MLPerf's package checker makes, and its result
summary (docs/submitting.md).

`package check` exit codes: 0 every check passes or is skipped, 1 some check fails, 2 the folder is
no package or cannot be read.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from benchbase.atomic import atomic_write_text
from benchbase.cli.app import cli
from benchbase.cli.check_commands import STATUS_STYLE, registered_workloads
from benchbase.compliance.rules import DEFAULT_RULESET, load_ruleset
from benchbase.errors import BenchbaseError
from benchbase.packaging import PackageCheck, check_package, make_package, summarize_package, summary_csv, summary_json
from benchbase.rcp.tables import FAIL, FAILED_SCORE

__all__ = ["package", "summarize"]

PACKAGE_DIR = click.argument("folder", type=click.Path(path_type=Path, exists=True, file_okay=False))
SUMMARY_SHOWN = ("system", "benchmark", "target", "runs", "olympic_minutes", "rcp", "rcp_norm_factor", "score")


@cli.group()
def package() -> None:
    """MLPerf-style submission packages: make one of run folders, check one."""


@package.command()
@click.argument("run_dirs", nargs=-1, required=True, type=click.Path(path_type=Path, exists=True, file_okay=False))
@click.option("--org", required=True, help="The submitting organization: the package's ORG folder.")
@click.option("--system", required=True, help="The system's name: systems/SYSTEM.json and results/SYSTEM/ "
              "(SYSTEM-BACKEND each where the runs are of several backends).")
@click.option("--out", required=True, type=click.Path(path_type=Path),
              help="The package's folder (new, or empty); it is complete or absent.")
def make(run_dirs: tuple[Path, ...], org: str, system: str, out: Path) -> None:
    """A package of RUN_DIRS (run folders, folders of runs, sweep folders) in one division: one system per backend
    (SYSTEM, or SYSTEM-BACKEND for several)."""
    made = make_package(list(run_dirs), org, system, out)
    console = Console()
    for (made_system, workload), count in made.results.items():
        console.print(f"{escape(str(made.folder.result_folder(made_system, workload)))}: {count} result file(s)")
    console.print(f"wrote {escape(str(made.folder.root))}: system(s) {escape(', '.join(made.systems))}, "
                  f"implementations {escape(', '.join(made.implementations))}; `benchbase package check "
                  f"{escape(str(out))}` checks it")


@package.command()
@PACKAGE_DIR
@click.option("--rules", default=DEFAULT_RULESET, show_default=True,
              help="Rule-set version shipped with benchbase, or a rule-set YAML file, for the result files.")
@click.option("--json", "as_json", is_flag=True, help="Print the verdicts as JSON instead of a table.")
def check(folder: Path, rules: str, as_json: bool) -> None:
    """Check a package (FOLDER: the package or one ORG folder in it) as MLPerf's package checker would."""
    checks = check_package(folder, load_ruleset(rules), registered_workloads())
    failed = [found for found in checks if not found.passed]
    if as_json:
        click.echo(json.dumps({"passed": not failed, "checks": [asdict(found) for found in checks]}, indent=2))
    else:
        console = Console()
        console.print(_checks_table(checks, str(folder)))
        counts = {status: sum(found.status == status for found in checks) for status in STATUS_STYLE}
        console.print(f"{len(checks)} checks: {counts['pass']} pass, {counts['fail']} fail, {counts['skip']} skipped")
    if failed:
        raise BenchbaseError(f"{folder}: {len(failed)} check(s) fail: "
                             f"{', '.join(f'{found.check} ({found.subject})' for found in failed)}")


@cli.command()
@PACKAGE_DIR
@click.option("--csv", "csv_path", type=click.Path(path_type=Path, dir_okay=False), help="Write the summary as CSV.")
@click.option("--json", "json_path", type=click.Path(path_type=Path, dir_okay=False), help="Write it as JSON.")
def summarize(folder: Path, csv_path: Path | None, json_path: Path | None) -> None:
    """MLPerf's result summary of a package: per system, workload and target, the olympic score in minutes."""
    rows = summarize_package(folder, registered_workloads())
    table = Table(title=f"{folder}: olympic minutes to each target, x the RCP's norm factor where one applies",
                  title_justify="left")
    for column in SUMMARY_SHOWN:
        table.add_column(column)
    for row in rows:
        table.add_row(*(escape(_summary_cell(row, column)) for column in SUMMARY_SHOWN))
    console = Console()
    console.print(table)
    for path, text in ((csv_path, summary_csv(rows)), (json_path, summary_json(rows))):
        if path is not None:
            atomic_write_text(path, text)
            console.print(f"wrote {escape(str(path))}")


def _summary_cell(row: dict, column: str) -> str:
    """A summary cell as shown; an empty score of a set that fails the RCP says why it is empty."""
    if column == "score" and row["score"] is None and row["rcp"] == FAIL:
        return f"none {FAILED_SCORE}"
    return "" if row[column] is None else str(row[column])


def _checks_table(checks: list[PackageCheck], source: str) -> Table:
    verdict = "[bold red]FAIL[/]" if any(not found.passed for found in checks) else "[green]PASS[/]"
    table = Table(title=f"{verdict} {escape(source)}", title_justify="left")
    for column in ("check", "subject", "status", "details"):
        table.add_column(column, overflow="fold")
    for found in checks:
        style = STATUS_STYLE[found.status]
        table.add_row(found.check, escape(found.subject), f"[{style}]{found.status}[/]",
                      escape("\n".join(found.messages)))
    return table
