"""`benchbase rcp make` and `benchbase rcp check`: MLPerf's reference convergence points (docs/rcp.md).

`check` exit codes: 0 every group passes every target, 1 some verdict is not a pass, 2 the input
cannot be judged (an unreadable run or RCP file, open-division runs, another workload, ...).
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table
from rich.text import Text

from benchbase.atomic import atomic_write_text
from benchbase.cli.app import cli
from benchbase.cli.report_commands import rich_table
from benchbase.errors import BenchbaseError
from benchbase.report import RunGroup, load_groups

__all__ = ["rcp"]

RUN_DIRS = click.argument("run_dirs", nargs=-1, required=True,
                          type=click.Path(path_type=Path, exists=True, file_okay=False))


@cli.group()
def rcp() -> None:
    """Reference convergence points: may a set of runs converge in this few epochs? (MLPerf's RCP rule)"""


@rcp.command()
@RUN_DIRS
@click.option("--out", type=click.Path(path_type=Path, dir_okay=False),
              help="Write the RCP file here (atomically); without it, print it.")
@click.option("--submission-runs", type=click.IntRange(3, 500), default=5, show_default=True,
              help="Runs a submission set will have; each batch size needs twice as many reference runs.")
def make(run_dirs: tuple[Path, ...], out: Path | None, submission_runs: int) -> None:
    """An RCP file from reference runs (RUN_DIRS: run folders, folders of runs, sweep folders).

    Every run must be closed-division, of one workload and backend, and reach every target.
    """
    from benchbase.rcp import make_rcp
    from benchbase.rcp.tables import points_table

    groups = load_groups(list(run_dirs))
    command = ["benchbase", "rcp", "make", *map(str, run_dirs), *(["--out", str(out)] if out else []),
               "--submission-runs", str(submission_runs)]
    console = Console(stderr=out is None)  # printed to stdout, the file stays parseable there
    _warn_left_out(console, groups)
    made = make_rcp(groups, submission_runs, shlex.join(command))
    if out is None:
        click.echo(made.to_json(), nl=False)
        console.print(rich_table(points_table(made, "the runs above")))
        return
    atomic_write_text(out, made.to_json())
    console.print(rich_table(points_table(made, str(out))))
    console.print(f"wrote {out}: {sum(len(batch.runs) for batch in made.batches)} reference runs of {made.workload}")


@rcp.command()
@RUN_DIRS
@click.option("--rcp", "rcp_path", type=click.Path(path_type=Path, dir_okay=False),
              help="The RCP file to hold the runs to; default: the one that ships for their workload.")
@click.option("--json", "as_json", is_flag=True, help="Print the verdicts as JSON.")
def check(run_dirs: tuple[Path, ...], rcp_path: Path | None, as_json: bool) -> None:
    """Hold each group of runs (as `benchbase score` groups them) to the reference's convergence, per target."""
    from benchbase.rcp import judge_group, load_rcp, rcp_for
    from benchbase.rcp.checking import verdict_json
    from benchbase.rcp.tables import verdict_table

    groups = load_groups(list(run_dirs))
    given = None if rcp_path is None else (load_rcp(rcp_path), str(rcp_path))
    judgements = [judge_group(group, *(given or rcp_for(group, None))) for group in groups]
    if as_json:
        click.echo(json.dumps({judgement.group.name: {
            "passed": judgement.passed, "rcp": judgement.source, "batch": judgement.batch,
            "runs": [str(run.path) for run in judgement.group.runs],
            "targets": {label: verdict_json(verdict) for label, verdict in judgement.verdicts.items()}}
            for judgement in judgements}, indent=2))
    else:
        console = Console()
        for judgement in judgements:
            console.print(_left_notes(rich_table(verdict_table(judgement))))
        _warn_left_out(console, groups)
    failed = [judgement.group.name for judgement in judgements if not judgement.passed]
    if failed:
        raise BenchbaseError(f"{len(failed)} of {len(judgements)} group(s) do not meet the RCP: {', '.join(failed)}")


def _left_notes(shown: Table | Text) -> Table | Text:
    """The note column reads as sentences, so from the left."""
    for column in getattr(shown, "columns", ()):
        if column.header == "note":
            column.justify = "left"
    return shown


def _warn_left_out(console: Console, groups: list[RunGroup]) -> None:
    for group in groups:
        for folder in group.left_out:
            console.print(f"[yellow]left out of {group.name}:[/] {folder} has no result.json (killed or still running)")
        for copy, original in group.duplicates:
            console.print(f"[yellow]left out of {group.name}:[/] {copy} repeats {original}")
