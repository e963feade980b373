"""`benchbase run --dry-run`'s view: the run as resolved, every check before the clock passed."""

from __future__ import annotations

from pathlib import Path

from rich.markup import escape
from rich.table import Table

from benchbase.cli.run_plan import ResolvedRun

__all__ = ["run_plan_table"]


def run_plan_table(resolved: ResolvedRun, folders: list[Path], seed: int, org: str, data: str,
                   checkpoint_every: int | None, final_evaluation: bool) -> Table:
    """What `benchbase run` would train, on what, and where it would write, one row per aspect."""
    table = Table(title="dry run: every check before the clock passes; nothing was trained or written",
                  title_justify="left", show_header=False)
    table.add_column("what", style="bold")
    table.add_column("plan", overflow="fold")
    for label, value in _rows(resolved, folders, seed, org, data, checkpoint_every, final_evaluation):
        table.add_row(label, escape(value))
    return table


def _rows(resolved: ResolvedRun, folders: list[Path], seed: int, org: str, data: str, checkpoint_every: int | None,
          final_evaluation: bool) -> list[tuple[str, str]]:
    workload, profile, request = resolved.workload, resolved.profile, resolved.request
    tta = workload.tta
    rows = [
        ("workload", f"{workload.name}, {resolved.division['division']} division"
                     + "".join(f"; {change}" for change in resolved.division["open_changes"])),
        ("backend", f"{request.backend} ({resolved.backend_class.capabilities.process_model.replace('_', ' ')})"),
        ("hardware profile", f"{profile.name}: {profile.devices.count}x {profile.devices.model}, {profile.cpu.model}"),
        ("device plan", _device_plan(resolved)),
        ("precision", workload.model.precision),
        ("targets", f"{', '.join(target.label for target in tta.targets)} on {workload.scored_subset}, "
                    f"{tta.aggregation} of the last {tta.window} evaluations"),
        ("limits", f"{workload.max_epochs} epochs, {workload.max_minutes:g} minutes"),
        ("overrides", " ".join(f"--set {setting}" for setting in request.settings) or "none"),
        ("data", data),
        ("run folders", ", ".join(f"{folder} (seed {seed + index})" for index, folder in enumerate(folders))),
        ("submission_org", org),
        ("final evaluation", "every dev and test subset after run_stop" if final_evaluation else "skipped"),
    ]
    if checkpoint_every is not None:
        rows.append(("checkpoints", f"every {checkpoint_every} batches"))
    if request.profile_steps:
        rows.append(("profiler", f"{request.profile_steps} steps from the 3rd"))
    return rows


def _device_plan(resolved: ResolvedRun) -> str:
    plan = resolved.plan
    threads = f", a budget of {plan.threads} CPU thread(s) per process" if plan.threads else ""
    overridden = " (overrides the profile)" if plan.overridden else ""
    return (f"{plan.count} {plan.kind} device(s){overridden}, {plan.batch_per_device} utterances each of a global "
            f"batch of {plan.batch_per_device * plan.count}{threads}")
