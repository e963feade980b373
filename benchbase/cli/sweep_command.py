"""`benchbase sweep SWEEP.yaml`: a grid of runs, one after another, into one folder.

Re-running the same sweep into the same folder goes on where it stopped: finished runs are
skipped, a run with a checkpoint is resumed, a run killed before its first checkpoint is moved
aside and started again.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

import click
from rich.console import Console, Group
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from benchbase.cli.app import cli
from benchbase.cli.run_command import ORG_ENVIRONMENT, run_refusal, run_request
from benchbase.cli.run_command import run as run_command
from benchbase.cli.run_plan import request_workload
from benchbase.cli.sweep_view import SweepView
from benchbase.errors import BenchbaseError, InputError, Terminated
from benchbase.harness.disk_space import (
    SpaceEstimate,
    estimated_resume_bytes,
    estimated_run_bytes,
    space_estimate,
)
from benchbase.plugin_host.registry import Registry
from benchbase.run_folder import RunFolder, find_run_folders
from benchbase.sweeps.folder import (
    FINISHED,
    SweepRecord,
    abandon,
    check_same_runs,
    configuration_folders,
    finished_status,
    hold_sweep_folder,
    next_action,
)
from benchbase.sweeps.runner import RunProcess, StopSignals
from benchbase.sweeps.spec import PlannedRun, SweepSpec, check_resolvable, load_sweep, plan_sweep

__all__ = ["run_arguments", "sweep"]

# `benchbase run`'s exit codes: 3 is a valid run stopped at a limit; 2 from --resume means it
# could not go on from the checkpoints there (the run is then started again).
EXIT_STATUS = {0: "success", 3: "aborted", 143: "interrupted", 130: "interrupted"}
EXIT_BAD_INPUT = 2


@cli.command()
@click.argument("sweep_file", type=click.Path(path_type=Path, exists=True, dir_okay=False))
@click.option("--out", type=click.Path(path_type=Path, file_okay=False),
              help="The sweep's folder (default: runs/sweep-NAME). Run the same sweep into it again to go on.")
@click.option("--dry-run", is_flag=True,
              help="Print the plan, what each run needs next and which runs `benchbase run` would refuse (the same "
                   "checks before the clock); run nothing. Exit status 2 when a run would be refused.")
@click.option("--org", envvar=ORG_ENVIRONMENT, show_envvar=True, metavar="NAME",
              help="The organization submitting the results: MLPerf's submission_org of every run started "
                   "(default: benchbase; a resumed run keeps its own).")
def sweep(sweep_file: Path, out: Path | None, dry_run: bool, org: str | None) -> None:
    """Run SWEEP_FILE's grid (backends x profiles x variants x seeds), one run after another.

    Each configuration (backend, profile, variant) is a folder of seeded runs, so `benchbase
    score` and `benchbase report` read it as one group. Exit status: 0 when every run finished
    (reached its targets or stopped at a limit), 1 when a run failed, 2 for bad input, 130 or
    143 when the sweep was interrupted (the run in progress checkpoints; run the sweep again to
    go on). The sweep file's fields: examples/README.md.
    """
    spec = load_sweep(sweep_file)
    plan = plan_sweep(spec)
    registry = _check_resolvable(spec, sweep_file)
    out = out or Path("runs") / f"sweep-{spec.name}"
    check_same_runs(out, plan, SweepRecord.read(out))
    console = Console()
    # The runs' folders stay side by side: the sweep needs what its runs still to run write, summed.
    space = _space_needed(plan, out, registry)
    if dry_run:
        _dry_run(console, spec, plan, out, registry, space)
        return
    if space.short:  # as `benchbase run` refuses before its clock, the sweep before its first run
        raise InputError(f"{space.shortfall()}; free some space or choose another --out")
    console.print(_plan_view(spec, plan, out))
    _note_runs_left_over(console, plan, out)
    with hold_sweep_folder(out):
        previous = SweepRecord.read(out)
        check_same_runs(out, plan, previous)  # again, now that no other sweep can change the folder
        record = SweepRecord.planned(out, spec, sweep_file, plan, previous)
        _run_all(console, spec, plan, out, record, org)


def _check_resolvable(spec: SweepSpec, source: Path) -> Registry:
    from benchbase.plugin_host import get_plugin_manager  # the registry loads plugins: only for a valid file
    from benchbase.plugin_host.registry import collect_registry

    registry = collect_registry(get_plugin_manager())
    check_resolvable(spec, source, registry)
    return registry


def _dry_run(console: Console, spec: SweepSpec, plan: list[PlannedRun], out: Path, registry: Registry,
            space: SpaceEstimate) -> None:
    """The plan, each run checked as `benchbase run` checks it before its clock starts, and the disk
    space the runs still to run need (a warning where the sweep would refuse to start)."""
    refusals = {run.name: run_refusal(run.options, registry) for run in plan}
    console.print(_plan_view(spec, plan, out, refusals))
    if space.short:
        console.print(f"[yellow]disk space: warning:[/] {escape(str(space.shortfall()))}; the sweep would refuse "
                      "to start", soft_wrap=True)
    else:
        console.print(f"disk space: {escape(space.describe())}", soft_wrap=True)
    _note_runs_left_over(console, plan, out)
    refused = [name for name, refusal in refusals.items() if refusal is not None]
    if refused:
        raise InputError(f"{len(refused)} of {len(plan)} planned runs would be refused by `benchbase run` "
                         "(the table says why)")


def _space_needed(plan: list[PlannedRun], out: Path, registry: Registry) -> SpaceEstimate:
    """Each run still to run estimated as `benchbase run` (or its --resume) estimates it, summed;
    a run `benchbase run` would refuse counts nothing (the dry run's table says why)."""
    needed, runs = 0, 0
    for planned in plan:
        folder, action = planned.folder(out), next_action(planned.folder(out))
        if action == "skip":
            continue
        try:
            with run_command.make_context("run", list(planned.options)) as context:
                workload = request_workload(run_request(dict(context.params)), registry)
        except (click.ClickException, InputError):
            continue
        needed += (estimated_resume_bytes(workload, RunFolder(folder)) if action == "resume"
                   else estimated_run_bytes(workload))
        runs += 1
    return space_estimate(out, needed, f"the sweep ({runs} run{'' if runs == 1 else 's'} still to run)")


def _plan_view(spec: SweepSpec, plan: list[PlannedRun], out: Path,
               refusals: dict[str, str | None] | None = None) -> Group:
    """One row per run (its folder's name says backend, profile, variant and seed), what it needs
    next and (a dry run) whether `benchbase run` would refuse it, then the options: the ones
    every run shares and each variant's own."""
    shared = " ".join(spec.common_options()) or "(the workload as registered)"
    variants = [f"variant {variant.name}: "
                f"{' '.join(_variant_options(variant.strategy, variant.settings)) or '(no overrides)'}"
                for variant in spec.variants if variant.name]
    runs = f"{len(plan)} run{'' if len(plan) == 1 else 's'}"
    table = Table(title=escape(f"sweep {spec.name}: {runs} of {spec.workload} into {out}"), title_justify="left")
    table.add_column("#", justify="right")
    table.add_column("run", no_wrap=True)
    table.add_column("next")
    if refusals is not None:
        table.add_column("checks before the clock", overflow="fold")
    for index, run in enumerate(plan, 1):
        action = next_action(run.folder(out))
        cells = [str(index), escape(run.name),
                 f"done ({finished_status(run.folder(out))})" if action == "skip" else action]
        if refusals is not None:
            refusal = refusals[run.name]
            cells.append("[green]pass[/]" if refusal is None else f"[red]refused:[/] {escape(refusal)}")
        table.add_row(*cells)
    return Group(table, *(Text(line) for line in [f"every run: {shared}", *variants]))


def _note_runs_left_over(console: Console, plan: list[PlannedRun], out: Path) -> None:
    """Runs an earlier version of the sweep file made (a seed since removed) still count in their groups."""
    planned = {run.name for run in plan}
    for folder in configuration_folders(out) or []:
        for run in find_run_folders(folder):
            if f"{folder.name}/{run.name}" not in planned:
                console.print(f"[yellow]note:[/] {escape(str(run))} is no longer in the sweep file; it stays in "
                              f"the {escape(folder.name)} group")


def _run_all(console: Console, spec: SweepSpec, plan: list[PlannedRun], out: Path, record: SweepRecord,
             org: str | None) -> None:
    for run in plan:
        if next_action(run.folder(out)) == "skip":
            record.runs[run.name].update(status=finished_status(run.folder(out)))
    record.save()
    view = SweepView(console, spec.name, plan, record, out)
    stopped_at: PlannedRun | None = None
    with StopSignals() as stop, view:
        for run in plan:
            if next_action(run.folder(out)) == "skip":
                continue
            if not stop.received:
                _run_one(view, stop, run, out, record, org)
            if stop.received:
                stopped_at = run
                break
    if stop.received:
        record.stop("interrupted", stopped_at)
        raise SweepStopped(stop.received, stopped_at, f"benchbase sweep {record.data['source']} --out {out}")
    _finish(console, plan, out, record)


def _run_one(view: SweepView, stop: StopSignals, run: PlannedRun, out: Path, record: SweepRecord,
             org: str | None) -> None:
    action = next_action(run.folder(out))
    if action == "restart":
        moved = abandon(out, run)
        view.note(f"{run.name}: killed before its first checkpoint; moved to {moved} and started again")
    code = _attempt(view, stop, run, out, record, "resume" if action == "resume" else "start", org)
    if action == "resume" and code == EXIT_BAD_INPUT and not stop.received:
        moved = abandon(out, run)
        view.note(f"{run.name}: could not be resumed (see {run.log(out)}); moved to {moved} and started again")
        code = _attempt(view, stop, run, out, record, "start", org)
    status = EXIT_STATUS.get(code, "failed")
    if code < 0:  # ended by a signal it could not handle (SIGKILL: the out-of-memory killer, say)
        status = "interrupted"
    record.set_status(run, status, code)
    view.finished(run, status, code)


def _attempt(view: SweepView, stop: StopSignals, run: PlannedRun, out: Path, record: SweepRecord,
             action: str, org: str | None) -> int:
    """One `benchbase run` (or `run --resume`) of ``run``, watched until it exits; its exit code."""
    arguments = run_arguments(run, out, action, org)
    record.set_status(run, "running")
    process = RunProcess(arguments, run.log(out), f"{action} {run.name}")
    stop.current = process
    view.started(run, action)
    try:
        if stop.received:  # a signal between the decision and the start: stop this run at once too
            process.terminate()
        while (code := process.poll()) is None:
            time.sleep(0.2)
    finally:
        stop.current = None
        process.reap()
    record.add_attempt(run, action, code, process.seconds)
    return code


def run_arguments(run: PlannedRun, out: Path, action: str, org: str | None) -> list[str]:
    """`benchbase run`'s arguments to start ``run`` or resume it (a resumed run keeps its own settings)."""
    if action == "resume":
        return ["run", "--resume", str(run.folder(out))]
    # Who submits is not part of the run's identity on record: --org is added here, not planned.
    return run.arguments(out) + (["--org", org] if org is not None else [])


def _finish(console: Console, plan: list[PlannedRun], out: Path, record: SweepRecord) -> None:
    unfinished = [run for run in plan if record.runs[run.name]["status"] not in FINISHED]
    record.stop("failed" if unfinished else "finished")
    groups = " ".join(str(folder) for folder in configuration_folders(out) or [])
    console.print(f"sweep folder: {out}\nscore it: benchbase score {groups}")
    if unfinished:
        described = ", ".join(f"{run.name} ({record.runs[run.name]['status']}, exit "
                              f"{record.runs[run.name]['exit_code']}, see {run.log(out)})" for run in unfinished)
        raise BenchbaseError(f"{len(unfinished)} of {len(plan)} runs did not finish: {described}")


class SweepStopped(BenchbaseError):
    """Ctrl-C or SIGTERM stopped the sweep: one line saying where, and how to go on; 130 or 143."""

    def __init__(self, number: int, stopped_at: PlannedRun | None, again: str):
        how = "Ctrl-C" if number == signal.SIGINT else "SIGTERM"
        where = f" at {stopped_at.name}" if stopped_at is not None else ""
        super().__init__(f"sweep interrupted ({how}){where}; to go on, run it again: {again}")
        self.exit_code = 130 if number == signal.SIGINT else Terminated.exit_code


def _variant_options(strategy: str | None, settings: tuple[str, ...]) -> list[str]:
    return ([f"--strategy {strategy}"] if strategy else []) + list(settings)
