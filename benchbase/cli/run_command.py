"""`benchbase run`: one time-to-accuracy run through the harness."""

from __future__ import annotations

import time
from pathlib import Path

import click
from pydantic import ValidationError
from rich.console import Console
from rich.progress import Progress

from benchbase.cli.app import cli
from benchbase.cli.reporter import RunReporter
from benchbase.data.workload_data import default_cache, ensure_workload_data
from benchbase.errors import BenchbaseError, InputError, Terminated, describe_validation_error
from benchbase.harness import Harness, run_benchmark
from benchbase.harness.launch import launch_workers
from benchbase.harness.plan import checked_plan
from benchbase.harness.resume import find_resume_point
from benchbase.harness.world import World, coordinator_for
from benchbase.overrides import apply_overrides, division_of, open_changes, parse_override
from benchbase.plugins import get_plugin_manager
from benchbase.process_guard import end_with_parent
from benchbase.registry import collect_registry
from benchbase.run_folder import RunFolder, series_member
from benchbase.specs import RunConfig, WorkloadSpec
from benchbase.specs.workload import PRECISIONS

__all__ = ["run", "with_overrides"]

# A collective waits at most the run's time limit plus this: rank 0's untimed work (an evaluation
# finishing past the limit) must not time the others out, and a dead rank is noticed at once anyway.
COLLECTIVE_SLACK_S = 3600


@cli.command()
@click.option("--workload", "workload_name", help="Workload name (see `benchbase workloads`) or a YAML file.")
@click.option("--backend", "backend_name", help="Backend name (see `benchbase plugins`).")
@click.option("--hw", "hardware", help="Hardware profile name or a YAML file.")
@click.option("--out", type=click.Path(path_type=Path), help="Run folder (default: runs/WORKLOAD-BACKEND-HW-TIME).")
@click.option("--seed", type=click.IntRange(0, 2**31 - 1), default=0, show_default=True)
@click.option("--max-minutes", type=click.FloatRange(min=0.01), help="Override the workload's time limit.")
@click.option("--max-epochs", type=click.IntRange(min=1), help="Override the workload's epoch limit.")
@click.option("--target", "targets", multiple=True, metavar="METRIC=VALUE",
              help="Replace the workload's targets, e.g. --target paper_cer=40 (repeatable; metrics: wer, paper_cer "
                   "= the paper's CER, cer = jiwer's reference-length CER).")
@click.option("--data", type=click.Path(path_type=Path), help="A prepared feature store (required for LibriSpeech).")
@click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto", show_default=True)
@click.option("--precision", type=click.Choice(PRECISIONS),
              help="Override the workload's model.precision (a different run, logged and checked as such): fp32, "
                   "tf32 and fp16 (GPUs only), bf16 mixed precision, int8-emulated fake quantization.")
@click.option("--cache", type=click.Path(path_type=Path), help="Where the synthetic corpus is cached.")
@click.option("--no-final-eval", is_flag=True,
              help="Skip the untimed evaluation of every dev and test subset after run_stop (quick runs).")
@click.option("--runs", type=click.IntRange(1, 1000), default=1, show_default=True,
              help="Seeded runs (seed, seed+1, ...) into OUT/run-0, OUT/run-1, ... for `benchbase score`.")
@click.option("--devices", type=click.IntRange(1, 1024),
              help="Train on N devices instead of the profile's count (an override the log records).")
@click.option("--profile", "profile_steps", type=click.IntRange(1, 1000), default=None, metavar="STEPS",
              help="Trace STEPS training steps (from the 3rd) with the framework's profiler into RUN_DIR/profile.")
@click.option("--checkpoint-every", type=click.IntRange(1, 10_000_000), metavar="BATCHES",
              help="Checkpoint every BATCHES batches instead of the workload's cadence (preemptible machines).")
@click.option("--resume", "resume", type=click.Path(path_type=Path), metavar="RUN_DIR",
              help="Continue a killed or preempted run from its newest complete checkpoint (its settings come "
                   "from RUN_DIR/config.json; no other option applies).")
@click.option("--set", "settings", multiple=True, metavar="SPEC.PATH=VALUE",
              help="Override a field of the workload or the hardware profile, e.g. --set "
                   "workload.evaluation.beam_width=64 --set hardware.pipeline.global_batch=150 (repeatable). "
                   "Changing what the workload pins puts the run in the open division.")
@click.pass_context
def run(context, workload_name, backend_name, hardware, out, seed, max_minutes, max_epochs, targets, data, device,
        precision, cache, no_final_eval, runs, devices, profile_steps, checkpoint_every, resume, settings):
    """Train WORKLOAD with BACKEND on HW until every target is reached (or the limits).

    A backend that trains one process per device (torch) on several devices runs in that many
    processes, started through torch's launcher; under `torchrun` (one machine or several) each
    process joins the run torchrun describes.

    Exit status: 0 when every run reached every target, 3 when a run stopped at a limit
    first (status aborted), 2 for bad input.
    """
    if resume is not None:
        _refuse_other_options(context)
        if _resume(resume) != "success":
            raise click.exceptions.Exit(3)
        return
    for option, value in (("--workload", workload_name), ("--backend", backend_name), ("--hw", hardware)):
        if value is None:
            raise InputError(f"{option} is required (or --resume RUN_DIR)")
    world = World.from_environment()
    manager = get_plugin_manager()
    registry = collect_registry(manager)
    for failure in manager.failures if world.leader else ():
        click.echo(f"benchbase: warning: {failure.describe()}", err=True)
    backend_class = registry.backend(backend_name)
    parsed = [parse_override(text) for text in settings]
    workload = apply_overrides(with_overrides(registry.workload(workload_name), max_minutes, max_epochs, targets,
                                              precision),
                               [(path, value) for root, path, value in parsed if root == "workload"], "workload")
    profile = apply_overrides(registry.profile(hardware),
                              [(path, value) for root, path, value in parsed if root == "hardware"], "hardware")
    registered = registry.workloads.get(workload.name)
    changes = open_changes(None if registered is None else registered.model_dump(mode="json"),
                           workload.model_dump(mode="json"))
    division = {"overrides": tuple(settings), "division": division_of(changes), "open_changes": tuple(changes)}
    # Before any data is synthesized or prepared: a run the backend or this machine cannot do fails in a second.
    plan = checked_plan(backend_class, backend_name, workload, profile, device=device, devices=devices,
                        profile_steps=profile_steps or 0, world=world)
    console = Console(stderr=False, quiet=not world.leader)
    # A precision other than the workload's own is in the default folder's name: it is a different run.
    chosen = f"-{precision}" if precision and precision != registry.workload(workload_name).model.precision else ""
    out = out or Path("runs") / (f"{workload.name}-{backend_name}-{profile.name}{chosen}-"
                                 f"{time.strftime('%Y%m%d-%H%M%S')}")
    folders = [out if runs == 1 else series_member(out, index) for index in range(runs)]
    if backend_class.capabilities.process_model == "process_per_device" and plan.count > 1 and not world.distributed:
        for folder in folders:  # the workers would each find out; one line here instead
            RunFolder.check_available(folder)
        store = _prepare_data(console, workload, data, cache or default_cache())
        arguments = _worker_arguments(workload_name, backend_name, hardware, seed, max_minutes, max_epochs, targets,
                                      store, device, precision, cache, no_final_eval, devices, profile_steps,
                                      checkpoint_every, settings)
        statuses = [_launch_run(plan.count, arguments, folder, seed + index, profile.pipeline.threads, console)
                    for index, folder in enumerate(folders)]
    else:
        statuses = _run_here(world, plan, manager, backend_class, backend_name, workload, profile, folders, seed,
                             data, cache, device, devices, profile_steps, checkpoint_every, no_final_eval, console,
                             division)
    if any(status != "success" for status in statuses):
        raise click.exceptions.Exit(3)


def _run_here(world, plan, manager, backend_class, backend_name, workload, profile, folders, seed, data, cache,
              device, devices, profile_steps, checkpoint_every, no_final_eval, console, division) -> list[str]:
    """The runs in this process: alone, or as one rank of a torch.distributed world."""
    coordinator = coordinator_for(world, plan.kind, timeout_seconds=workload.max_minutes * 60 + COLLECTIVE_SLACK_S)
    try:
        if world.distributed:
            end_with_parent()  # the launcher's agent is the parent: a worker never outlives it
        store = _prepare_in_turns(world, coordinator, console, workload, data, cache or default_cache())
        reporter = RunReporter(console)
        if world.leader:  # rank 0 owns the lifecycle hooks, the reporter among them
            manager.register(reporter, name="benchbase-reporter")
        statuses = []
        for index, folder in enumerate(folders):
            config = RunConfig(workload=workload, backend=backend_name, hardware=profile, seed=seed + index,
                               out=folder, data=store, device=device, devices=devices,
                               profile_steps=profile_steps or 0, checkpoint_every=checkpoint_every,
                               final_evaluation=not no_final_eval, **division)
            try:
                result = run_benchmark(config, manager, backend_class, coordinator)
            finally:
                reporter.close()
            if result is not None:
                statuses.append(result.status)
                console.print(f"run folder: {folder}")
        # The other ranks leave with 0: rank 0 alone reports the run's status.
        return statuses if world.leader else ["success"] * len(folders)
    finally:
        coordinator.close()


def _prepare_in_turns(world: World, coordinator, console: Console, workload: WorkloadSpec, data: Path | None,
                      cache: Path) -> Path:
    """Rank 0 synthesizes or checks the data first, then each machine's first rank, then the rest:
    never two processes writing one cache (ranks on one machine, or machines sharing a disk)."""
    store = None
    for turn in (world.leader, world.local_rank == 0, True):
        if turn and store is None:
            store = _prepare_data(console, workload, data, cache)
        coordinator.barrier()
    assert store is not None
    return store


def _launch_run(processes: int, arguments: list[str], folder: Path, seed: int, threads: int | None,
                console: Console) -> str:
    """One run in ``processes`` workers through torch's launcher; its status from rank 0's result."""
    failures = launch_workers(processes, [*arguments, "--out", str(folder), "--seed", str(seed)], threads)
    if any(failure.exit_code == Terminated.exit_code for failure in failures):
        raise Terminated()
    # Rank 0 exits 3 when the run ended aborted at a limit: a status, not a failure.
    broken = [failure for failure in failures if not (failure.rank == 0 and failure.exit_code == 3)]
    if broken:
        described = "; ".join(f"rank {failure.rank} exited with code {failure.exit_code}" for failure in broken)
        raise BenchbaseError(f"{described} (each rank's own error is above; run folder {folder})")
    return "aborted" if failures else "success"


def _worker_arguments(workload_name, backend_name, hardware, seed, max_minutes, max_epochs, targets, store, device,
                      precision, cache, no_final_eval, devices, profile_steps, checkpoint_every,
                      settings) -> list[str]:
    """`benchbase run` as each worker runs it: the same choices, the prepared store (--out and --seed per run)."""
    arguments = ["run", "--workload", workload_name, "--backend", backend_name, "--hw", hardware,
                 "--data", str(store), "--device", device]
    for option, value in (("--max-minutes", max_minutes), ("--max-epochs", max_epochs), ("--precision", precision),
                          ("--cache", cache), ("--devices", devices), ("--profile", profile_steps),
                          ("--checkpoint-every", checkpoint_every)):
        if value is not None:
            arguments += [option, str(value)]
    for target in targets:
        arguments += ["--target", target]
    for setting in settings:
        arguments += ["--set", setting]
    if no_final_eval:
        arguments.append("--no-final-eval")
    return arguments


def _refuse_other_options(context: click.Context) -> None:
    given = [f"--{name.replace('_', '-')}" for name, value in context.params.items()
             if name != "resume" and context.get_parameter_source(name) == click.core.ParameterSource.COMMANDLINE]
    if given:
        raise InputError(f"--resume takes every setting from the run's config.json; drop {', '.join(given)}")


def _resume(folder_path: Path) -> str:
    """`benchbase run --resume RUN_DIR`: the run goes on from its newest complete checkpoint."""
    folder = RunFolder(folder_path)
    if not folder.config.is_file():
        raise InputError(f"{folder.config}: not found; --resume needs the folder of a run that started")
    if folder.result.exists():
        raise InputError(f"{folder.root}: the run finished ({folder.result.name} exists); there is nothing to resume")
    try:
        config = RunConfig.model_validate_json(folder.config.read_bytes())
    except ValidationError as error:
        raise InputError(describe_validation_error(str(folder.config), error)) from None
    manager = get_plugin_manager()
    backend_class = collect_registry(manager).backend(config.backend)
    plan = checked_plan(backend_class, config.backend, config.workload, config.hardware, device=config.device,
                        devices=config.devices)
    if plan.count > 1 and backend_class.capabilities.process_model != "single_process":
        raise InputError(f"{folder.root}: resuming a run of {plan.count} processes is not supported yet "
                         "(only rank 0's state is in its checkpoints)")
    point = find_resume_point(folder)
    for reason in point.skipped:
        click.echo(f"benchbase: warning: passed over {reason}", err=True)
    console = Console(stderr=False)
    console.print(f"resuming {folder.root} from {folder.relative(point.checkpoint)} (batch {point.batch_index})")
    reporter = RunReporter(console)
    manager.register(reporter, name="benchbase-reporter")
    try:
        result = Harness(config, manager, backend_class, resume=point).run()
    finally:
        reporter.close()
    console.print(f"run folder: {folder.root}")
    return result.status


def with_overrides(workload: WorkloadSpec, max_minutes: float | None, max_epochs: int | None,
                   targets: tuple[str, ...], precision: str | None = None) -> WorkloadSpec:
    """The workload with the command line's overrides, validated like the YAML itself."""
    data = workload.model_dump()
    if precision is not None:
        data["model"]["precision"] = precision
    if max_minutes is not None:
        data["max_minutes"] = max_minutes
    if max_epochs is not None:
        data["max_epochs"] = max_epochs
    if targets:
        data["tta"]["targets"] = [_parse_target(text) for text in targets]
    try:
        return WorkloadSpec.model_validate(data)
    except ValidationError as error:
        raise InputError(describe_validation_error(f"workload {workload.name!r} with overrides", error)) from None


def _parse_target(text: str) -> dict:
    metric, separator, value = text.partition("=")
    try:
        if not separator:
            raise ValueError
        return {"metric": metric.strip().lower(), "value": float(value)}
    except ValueError:
        raise InputError(f"--target {text!r}: expected METRIC=VALUE, e.g. paper_cer=40") from None


def _prepare_data(console: Console, workload: WorkloadSpec, data: Path | None, cache: Path) -> Path:
    with Progress(console=console, transient=True) as progress:
        tasks: dict[str, int] = {}

        def report(label: str, done: int, total: int) -> None:
            if label not in tasks:
                tasks[label] = progress.add_task(label, total=total)
            progress.update(tasks[label], completed=done, total=total)

        return ensure_workload_data(workload, data, cache, report)
