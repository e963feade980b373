"""`benchbase score` and `benchbase report`: run folders into scores, tables and figures.

Each RUN_DIR is one group (one row): a run folder, or a folder of run folders (run-0, ...).
"""

from __future__ import annotations

import json
from pathlib import Path

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from benchbase.cli.app import cli
from benchbase.cli.narrow_table import fitted
from benchbase.errors import InputError
from benchbase.report import CostModel, ReportTable, load_groups
from benchbase.report.comparison import pick_baseline, report_tables, score_table, scored_groups
from benchbase.report.output import write_tables
from benchbase.report.paper import paper_tables
from benchbase.report.profile_table import across_workloads, profile_json, profile_tables

__all__ = ["PROFILE_KEY", "report", "rich_table", "score"]

PROFILE_KEY = "performance_profile"
"""`score --json`'s key for the profile across workloads, beside the groups' names."""
RUN_DIRS = click.argument("run_dirs", nargs=-1, type=click.Path(path_type=Path, exists=True, file_okay=False))


@cli.command()
@RUN_DIRS
@click.option("--json", "as_json", is_flag=True, help="Print the scores as JSON.")
def score(run_dirs: tuple[Path, ...], as_json: bool) -> None:
    """Olympic score per target: drop the fastest and slowest run, average the rest.

    Over runs of two or more workloads, also AlgoPerf's performance profile: per submitter
    (backend and hardware profile), its time to each workload's targets over the fastest's."""
    # The RCP verdicts (reference convergence points) read every run's log: imported here, not for every command.
    from benchbase.rcp.checking import rcp_of_groups
    from benchbase.rcp.tables import with_rcp_column

    if not run_dirs:
        raise InputError("score: name at least one RUN_DIR")
    groups = load_groups(list(run_dirs))
    scored, rcps, across = scored_groups(groups), rcp_of_groups(groups), across_workloads(groups)
    if as_json:
        scores = {item.group.name: {**{label: _score_json(s) for label, s in item.scores.items()},
                                    "left_out": [str(path) for path in item.group.left_out],
                                    "duplicates": [{"run": str(copy), "repeats": str(original)}
                                                   for copy, original in item.group.duplicates],
                                    "unreadable": unreadable_parts(item.group),
                                    "rcp": _rcp_json(rcps[item.group.name])}
                  for item in scored}
        # Beside the groups, only where there are runs of two or more workloads to aggregate.
        profile = {} if across is None else {PROFILE_KEY: profile_json(across)}
        click.echo(json.dumps({**scores, **profile}, indent=2))
        return
    console = Console()
    table = with_rcp_column(score_table(scored), rcps)
    console.print(fitted(table, rich_table(table), console))
    for profile_table in [] if across is None else profile_tables(across):
        console.print(fitted(profile_table, rich_table(profile_table), console))
    _warn_left_out(console, scored)


@cli.command()
@RUN_DIRS
@click.option("--baseline", help="Group (folder or hardware-profile name) that percentages refer to; default: first.")
@click.option("--out", type=click.Path(path_type=Path, file_okay=False), default=Path("report"), show_default=True,
              help="Folder for report.md, the CSV tables and figures/.")
@click.option("--paper", is_flag=True, help="Also show the paper's own tables as a reference.")
@click.option("--lifetime-years", type=click.FloatRange(min=0.01), default=3.0, show_default=True,
              help="Amortize the hardware price over this many years of continuous use.")
@click.option("--price-per-hour", type=click.FloatRange(min=0), help="Use this hourly price instead (e.g. a cloud's).")
@click.option("--window", nargs=2, type=float, metavar="START SECONDS",
              help="Utilization figure window on the run clock (default: 25 s after warm-up).")
@click.option("--no-figures", is_flag=True, help="Skip the PNG figures.")
@click.option("--from-db", metavar="URL", help="Also report every group of runs in this results database "
              "(`benchbase results add`): a SQLite file or a SQLAlchemy URL.")
def report(run_dirs: tuple[Path, ...], baseline: str | None, out: Path, paper: bool, lifetime_years: float,
           price_per_hour: float | None, window: tuple[float, float] | None, no_figures: bool,
           from_db: str | None) -> None:
    """Tables (TTA, percent of baseline, accuracy, throughput, cost) and figures for RUN_DIRS."""
    if not run_dirs and not paper and not from_db:
        raise InputError("report: name at least one RUN_DIR, --from-db URL, or pass --paper")
    groups = load_groups(list(run_dirs))
    groups += [] if from_db is None else _stored_groups(from_db, {group.name for group in groups})
    tables: list[ReportTable] = []
    if groups:
        scored = scored_groups(groups)
        cost = CostModel(lifetime_years=lifetime_years, price_per_hour=price_per_hour)
        tables += report_tables(scored, pick_baseline(scored, baseline), cost)
    if paper:
        tables += paper_tables()
    figures = [] if no_figures or not groups else _figures(groups, out / "figures",
                                                            None if window is None else (window[0], sum(window)))
    written = write_tables(tables, out, figures)
    console = Console()
    for table in tables:
        console.print(rich_table(table))
    if groups:
        _warn_left_out(console, scored_groups(groups))
    console.print(f"wrote {len(written)} table file(s) and {len(figures)} figure(s) to {out}")


def _stored_groups(url: str, taken: set[str]) -> list:
    from benchbase.results_db import database_to_read, open_for_reading, stored_groups  # SQLAlchemy only for --from-db

    with open_for_reading(database_to_read(url)) as connection:
        return stored_groups(connection, taken)


def _warn_left_out(console: Console, scored) -> None:
    """Runs without a result.json, and copies of a run, are not scored; say so rather than score
    the rest silently. So too for a file of a run that could not be read (warnings, not errors:
    what the scores rest on, result.json and config.json, was read)."""
    for item in scored:
        for line in unreadable_parts(item.group):
            console.print(f"[yellow]{escape(item.group.name)}:[/] {escape(line)}")
        for folder in item.group.left_out:
            console.print(f"[yellow]left out of {item.group.name}:[/] {folder} has no result.json (killed or "
                          "still running)")
        for copy, original in item.group.duplicates:
            console.print(f"[yellow]left out of {item.group.name}:[/] {copy} repeats {original} (the same seed, "
                          "config and evaluations: a copy of one run is one measurement)")


def unreadable_parts(group) -> list[str]:
    """A line per file of the group's runs that could not be read: the compliance log, and the
    parts a report went on without (the runs' metrics and telemetry, once read)."""
    lines = []
    for run in group.runs:
        if problem := run.log_problem():
            lines.append(f"{problem}: scored from result.json alone, which no log backs")
        lines += run.parts_left_out
    return lines


def rich_table(table: ReportTable) -> Table | Text:
    if table.empty:  # a header over no rows reads as a missing result; the notes say why there are none
        return Text("\n".join([table.title, *table.notes]))
    shown = Table(title=table.title, title_justify="left", caption="\n".join(table.notes) or None,
                  caption_justify="left")
    for index, header in enumerate(table.headers):
        shown.add_column(header, justify="left" if index == 0 else "right")
    for row in table.formatted_rows():
        shown.add_row(*row)
    return shown


def _figures(groups, out: Path, window: tuple[float, float] | None) -> list[Path]:
    from benchbase.report.figures import write_figures  # matplotlib loads only when figures are drawn

    return write_figures(groups, out, window)


def _rcp_json(found) -> dict:
    """A group's RCP verdicts (benchbase.rcp.checking.GroupRcp): the file, why there are none, or one per target."""
    from benchbase.rcp.checking import verdict_json

    judgement = found.judgement
    return {"file": found.source, "note": found.note, "passed": None if judgement is None else judgement.passed,
            "targets": {} if judgement is None else {label: verdict_json(verdict)
                                                     for label, verdict in judgement.verdicts.items()}}


def _score_json(score) -> dict:
    return {"score_seconds": score.seconds, "score_minutes": score.minutes, "valid": score.valid, "runs": score.runs,
            "reached": score.converged, "kept_seconds": list(score.kept), "fastest_seconds": score.fastest,
            "slowest_seconds": score.slowest, "stdev_seconds": score.stdev,
            "coefficient_of_variation": score.coefficient_of_variation, "note": score.note}
