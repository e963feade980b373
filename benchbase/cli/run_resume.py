"""`benchbase run --resume RUN_DIR`: a killed or preempted run goes on from its newest complete checkpoint.

A run of one process goes on in this process. A run of several processes (a process-per-device
backend on several devices) goes on as it ran: this process checks that the folder can be
resumed (one line and exit 2 if not, before any worker starts), then starts the workers through
torch's launcher, each running the same `run --resume RUN_DIR`; under torchrun, on one machine
or several, each process joins the world torchrun describes. Rank 0 chooses the checkpoint,
moves the interrupted segment aside and owns the clock, the log and the data order, as in the
run; it tells the others where training goes on, and each rank loads its own checkpoint.
"""

from __future__ import annotations

from pathlib import Path

import click
import pluggy
from pydantic import ValidationError
from rich.console import Console

from benchbase.backend import Backend
from benchbase.cli.framework_logs import load_backend
from benchbase.cli.launched_run import COLLECTIVE_SLACK_S, launched_status
from benchbase.cli.reporter import RunReporter
from benchbase.errors import BenchbaseError, InputError, describe_validation_error
from benchbase.harness import Harness
from benchbase.harness.devices import checked_plan
from benchbase.harness.disk_space import estimated_resume_bytes, space_shortfall
from benchbase.harness.follower import follow
from benchbase.harness.resume import ResumePoint, find_resume_point
from benchbase.harness.resume_state import ResumeState
from benchbase.harness.world import Coordinator, World, coordinator_for
from benchbase.plugin_host import get_plugin_manager
from benchbase.plugin_host.registry import collect_registry
from benchbase.process_guard import end_with_parent
from benchbase.run_folder import RunFolder
from benchbase.specs import RunConfig
from benchbase.telemetry.environment import environment_changes, run_environment

__all__ = ["resume_run"]


def resume_run(folder_path: Path) -> str:
    """Resume the run in ``folder_path``; its status (in a rank other than 0: "success")."""
    folder = RunFolder(folder_path)
    config = _resumable_config(folder)
    world = World.from_environment()
    if world.leader:  # rank 0 writes the folder; as `benchbase run` checks before its clock
        _check_space(folder, config)
    manager = get_plugin_manager()
    backend_class = load_backend(collect_registry(manager), config.backend)
    _check_environment(folder, config, backend_class)
    plan = checked_plan(backend_class, config.backend, config.workload, config.hardware, device=config.device,
                        devices=config.devices, world=world)
    if world.distributed:
        return _resume_rank(world, folder, config, manager, backend_class, plan.kind)
    if backend_class.capabilities.process_model == "process_per_device" and plan.count > 1:
        find_resume_point(folder, plan.count)  # what cannot be resumed is refused here, before any worker
        return launched_status(plan.count, ["run", "--resume", str(folder.root)], folder.root,
                               config.hardware.pipeline.threads)
    return _resume_here(folder, config, manager, backend_class, find_resume_point(folder), None)


def _resumable_config(folder: RunFolder) -> RunConfig:
    """The run's config, where the folder holds a run that started and did not finish."""
    if not folder.config.is_file():
        raise InputError(f"{folder.config}: not found; --resume needs the folder of a run that started")
    if folder.result.exists():
        raise InputError(f"{folder.root}: the run finished ({folder.result.name} exists); there is nothing to resume")
    try:
        config = RunConfig.model_validate_json(folder.config.read_bytes())
    except ValidationError as error:
        raise InputError(describe_validation_error(str(folder.config), error)) from None
    # The folder as given now: config.json names it as the run's first command did (maybe relative).
    return config.model_copy(update={"out": folder.root})


def _check_environment(folder: RunFolder, config: RunConfig, backend_class: type[Backend]) -> None:
    """Refused in one line when this process runs other software (or another CPU or GPU) than the
    run recorded at its init: a run that changed its software midway measured neither version,
    and its result.json would contradict its log. The machine's name may change (a preempted run
    resumed on another node of the same kind: MACHINE_IDENTITY); the resume records its host."""
    if not config.environment:  # a folder from before runs recorded their environment in config.json
        return
    changes = environment_changes(config.environment, run_environment(config.backend, backend_class.__module__))
    if changes:
        raise InputError(f"{folder.config}: the run started with other software or hardware than this resume "
                         f"has ({'; '.join(changes)}); resume it with what it started with, or start a new run")


def _check_space(folder: RunFolder, config: RunConfig) -> None:
    """Refused in one line when the folder's filesystem cannot hold what the rest of the run
    writes. Exit 1, not 2: `benchbase sweep` takes a resume's 2 for checkpoints it cannot go on
    from, and would start the run again from nothing."""
    shortfall = space_shortfall(folder.root, estimated_resume_bytes(config.workload, folder), "resuming the run")
    if shortfall:
        raise BenchbaseError(f"{shortfall}; free some space, then resume it again")


def _resume_rank(world: World, folder: RunFolder, config: RunConfig, manager: pluggy.PluginManager,
                 backend_class: type[Backend], device_kind: str) -> str:
    """One rank of a resumed run of several processes: rank 0 chooses the checkpoint and tells the others."""
    coordinator = coordinator_for(world, device_kind,
                                  timeout_seconds=config.workload.max_minutes * 60 + COLLECTIVE_SLACK_S)
    try:
        end_with_parent()  # the launcher's agent is the parent: a worker never outlives it
        if world.leader:
            try:
                point = find_resume_point(folder, world.size)
            except InputError:
                coordinator.gather(None)  # the others learn there is nothing to go on from
                raise
            coordinator.gather(point.state.to_dict())
            status = _resume_here(folder, config, manager, backend_class, point, coordinator)
        else:
            chosen = coordinator.gather(None)[0]
            if chosen is None:
                raise InputError(f"{folder.checkpoints}: rank 0 found no complete checkpoint to resume from")
            follow(config, backend_class, coordinator, resume=ResumeState.from_dict(chosen))
            status = "success"  # rank 0 alone reports the run's status
        coordinator.barrier()  # every rank leaves together, once rank 0 has written everything
        return status
    finally:
        coordinator.close()


def _resume_here(folder: RunFolder, config: RunConfig, manager: pluggy.PluginManager, backend_class: type[Backend],
                 point: ResumePoint, coordinator: Coordinator | None) -> str:
    """The harness goes on from ``point`` in this process (alone, or as rank 0)."""
    for reason in point.skipped:
        click.echo(f"benchbase: warning: passed over {reason}", err=True)
    console = Console(stderr=False)
    console.print(f"resuming {folder.root} from {folder.relative(point.checkpoint)} (batch {point.batch_index})")
    reporter = RunReporter(console)
    manager.register(reporter, name="benchbase-reporter")
    try:
        result = Harness(config, manager, backend_class, coordinator, resume=point).run()
    finally:
        reporter.close()
    console.print(f"run folder: {folder.root}")
    return result.status
