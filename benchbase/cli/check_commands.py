"""`benchbase check`: validate compliance logs and run folders against a rule set.

Exit codes: 0 every log passes and is of a finished run (a result), 1 some log fails, 2 the input
cannot be checked at all, 4 every log passes but some are of runs that did not finish (crashed,
interrupted, stopped on an error: compliant logs, no results).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import click
from rich.console import Console, Group
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from benchbase.cli.app import cli
from benchbase.cli.resumable import resume_command
from benchbase.cli.titled import titled
from benchbase.compliance.checker import FAIL, PASS, UNFINISHED, CheckReport, check_paths
from benchbase.compliance.rules import DEFAULT_RULESET, load_ruleset
from benchbase.errors import BenchbaseError
from benchbase.plugin_host import get_plugin_manager
from benchbase.plugin_host.registry import collect_registry
from benchbase.run_folder import RunFolder
from benchbase.specs import WorkloadSpec

if TYPE_CHECKING:
    from benchbase.rcp.checking import GroupJudgement

__all__ = ["check", "registered_workloads", "report_table"]

STATUS_STYLE = {"pass": "green", "fail": "bold red", "skip": "dim"}
VERDICT_SHOWN = {"pass": "[green]PASS[/]", "unfinished": "[bold yellow]UNFINISHED[/]", "fail": "[bold red]FAIL[/]"}
UNFINISHED_EXIT_CODE = 4
"""Compliant logs, not results: apart from 1 (a rule fails) so that a script can tell a run to redo
from a log to fix, and from `benchbase run`'s 3 (stopped at a limit), which is a result."""


class NotAResult(BenchbaseError):
    """Every log passes, but some are of runs that did not finish."""

    exit_code = UNFINISHED_EXIT_CODE


@cli.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--rules", "rules", default=DEFAULT_RULESET, show_default=True,
              help="Rule-set version shipped with benchbase, or a rule-set YAML file.")
@click.option("--json", "as_json", is_flag=True, help="Print the findings as JSON instead of tables.")
@click.option("--verbose", "-v", is_flag=True, help="Show passing and skipped rules too.")
def check(paths: tuple[Path, ...], rules: str, as_json: bool, verbose: bool) -> None:
    """Validate compliance logs (LOG_OR_RUN_DIR: a log, a run folder, or a folder of runs); a folder holding
    a whole submission set is also held to its workload's reference convergence points.

    Exit status: 0 every log passes and is a result, 1 some log fails, 2 unusable input, 4 every log
    passes but some are of runs that did not finish (UNFINISHED: crashed or interrupted, no result)."""
    ruleset = load_ruleset(rules)
    workloads = registered_workloads()
    reports = check_paths(list(paths), ruleset, workloads)
    judged = _rcp_judgements(paths)
    if as_json:
        click.echo(json.dumps({"passed": all(r.passed for r in reports) and all(j.passed for j in judged),
                               "verdict": _overall_verdict(reports),
                               "logs": [r.to_dict() | {"resume": _resume_of(r)} for r in reports],
                               "rcp": {judgement.group.name: {label: verdict.explanation for label, verdict
                                                              in judgement.verdicts.items()} | {
                                   "passed": judgement.passed} for judgement in judged}}, indent=2))
    else:
        console = Console()
        for report in reports:
            console.print(report_table(report, verbose, lead=_why_no_result(report)))
            for note in report.notes:
                console.print(f"  {escape(note)}")
        console.print(_summary(reports, ruleset.version))
        for judgement in judged:
            verdict = "[green]PASS[/]" if judgement.passed else "[bold red]FAIL[/]"
            console.print(f"{verdict} {escape(judgement.group.name)}: reference convergence points "
                          f"({len(judgement.group.runs)} runs; `benchbase rcp check` for the numbers)")
            for label, found in judgement.verdicts.items():
                if not found.passed:
                    console.print(f"  {escape(label)}: {escape(found.explanation)}")
    failed = sum(not report.passed for report in reports)
    unconverged = [judgement.group.name for judgement in judged if not judgement.passed]
    if failed or unconverged:
        # A BenchbaseError (exit 1), not click's Exit: main() runs click with standalone_mode=False,
        # where an Exit's code is returned and then dropped.
        raise BenchbaseError(f"{failed} of {len(reports)} log(s) fail rule set {ruleset.version}" if failed else
                             f"{len(unconverged)} set(s) of runs converge faster than the reference allows: "
                             f"{', '.join(unconverged)}")
    unfinished = sum(report.verdict == UNFINISHED for report in reports)
    if unfinished:
        raise NotAResult(f"{unfinished} of {len(reports)} log(s) are of runs that did not finish: compliant logs, "
                         f"not results (exit code {UNFINISHED_EXIT_CODE})")


def _why_no_result(report: CheckReport) -> list[str]:
    """For a run that did not finish, the cause first: what fails after it (no evaluation logged,
    no thread use recorded) follows from the run having stopped. Then how to go on, if it can."""
    if not report.unfinished:
        return []
    follows = "" if report.passed else "; what fails below may follow from that"
    lead = [f"[yellow]not a result:[/] {escape(report.unfinished)}{follows}"]
    if command := _resume_of(report):
        lead.append(f"continue it with: {escape(command)}")
    return lead


def _resume_of(report: CheckReport) -> str | None:
    """The command that continues the run of an unfinished log in its run folder, else None."""
    log = Path(report.source)
    folder = RunFolder(log.parent)
    return resume_command(folder) if report.unfinished and log == folder.compliance_log else None


def _summary(reports: list[CheckReport], version: str) -> str:
    passed = sum(report.passed for report in reports)
    unfinished = sum(report.verdict == UNFINISHED for report in reports)
    line = f"{passed}/{len(reports)} log(s) pass rule set {version}"
    return line + (f", {unfinished} of them of a run that did not finish (not a result)" if unfinished else "")


def _overall_verdict(reports: list[CheckReport]) -> str:
    """The worst of the logs' verdicts: fail, then unfinished, then pass."""
    verdicts = {report.verdict for report in reports}
    return FAIL if FAIL in verdicts else UNFINISHED if UNFINISHED in verdicts else PASS


def _rcp_judgements(paths: tuple[Path, ...]) -> list[GroupJudgement]:
    """MLPerf's RCP rule on each group of runs among ``paths`` that is a whole submission set:
    as many closed-division runs as the RCP of their workload judges at once (a single run, or a
    group of another size, is no set, and its logs are all `check` judges)."""
    from benchbase.rcp.checking import rcp_of_groups
    from benchbase.report import load_groups

    try:
        groups = load_groups([path for path in paths if path.is_dir()])
    except BenchbaseError:
        return []  # the logs' own findings say what is wrong with these folders
    judgements = [found.judgement for found in rcp_of_groups(groups).values() if found.judgement is not None]
    return [judgement for judgement in judgements if len(judgement.group.runs) == judgement.rcp.submission_runs]


def report_table(report: CheckReport, verbose: bool = False, lead: Sequence[str] = ()) -> Group:
    """The findings under the log's verdict; ``lead`` (rich markup): lines between the two."""
    table = Table()
    table.add_column("rule")
    table.add_column("status")
    table.add_column("details", overflow="fold")
    for finding in report.findings:
        if finding.status == "pass" and not verbose:
            continue
        style = STATUS_STYLE[finding.status]
        # A passing rule has nothing to report: say what it checked, so rules of one kind tell apart.
        detail = escape("\n".join(finding.messages[:20])) or f"[dim]{escape(finding.description)}[/]"
        table.add_row(finding.rule, f"[{style}]{finding.status}[/]", detail)
    if not table.rows:
        table.add_row("all rules", "[green]pass[/]", f"{len(report.findings)} rules")
    heading = titled(f"{VERDICT_SHOWN[report.verdict]} {escape(report.source)} (rules {report.ruleset})", table)
    if not lead:
        return heading
    title, _ = heading.renderables
    return Group(title, *(Text.from_markup(f"  {line}") for line in lead), table)


def registered_workloads() -> dict[str, WorkloadSpec]:
    """Workloads by name. A broken plugin is skipped, and none may redefine a built-in
    workload, so `check` judges a log of a built-in workload by benchbase's own spec."""
    return collect_registry(get_plugin_manager()).workloads
