"""`benchbase run`: one time-to-accuracy run through the harness."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.markup import escape
from rich.progress import Progress

from benchbase.cli.app import cli
from benchbase.cli.launched_run import COLLECTIVE_SLACK_S, launched_status
from benchbase.cli.plan_view import run_plan_table
from benchbase.cli.reporter import RunReporter
from benchbase.cli.run_plan import ResolvedRun, RunRequest, check_out_folder, resolve_run
from benchbase.cli.run_resume import resume_run
from benchbase.data.store import FeatureStore
from benchbase.data.workload_data import StoreBuild, default_cache, ensure_workload_data, synthetic_paths
from benchbase.errors import InputError
from benchbase.harness import run_benchmark
from benchbase.harness.disk_space import SpaceEstimate, estimated_run_bytes, space_estimate
from benchbase.harness.initialization import check_run_data
from benchbase.harness.world import World, coordinator_for
from benchbase.plugin_host import get_plugin_manager
from benchbase.plugin_host.registry import Registry, collect_registry
from benchbase.process_guard import end_with_parent
from benchbase.run_folder import series_member
from benchbase.specs import RunConfig, WorkloadSpec
from benchbase.specs.model import PRECISIONS
from benchbase.specs.strategy import DEFAULT_STRATEGY

__all__ = ["SET_EXAMPLE", "run", "run_refusal"]

SET_EXAMPLE = ("workload.evaluation.beam_width=64", "hardware.pipeline.readers=2")
"""The --set example `run --help` shows; a test runs it on the cpu profile, so the help never shows one that fails."""

ORG_ENVIRONMENT = "BENCHBASE_SUBMISSION_ORG"
DEFAULT_ORG: str = RunConfig.model_fields["submitter"].default
MAX_ORG_LENGTH: int = next(bound.max_length for bound in RunConfig.model_fields["submitter"].metadata
                           if hasattr(bound, "max_length"))


@cli.command()
@click.option("--workload", "workload_name", help="Workload name (see `benchbase workloads`) or a YAML file.")
@click.option("--backend", "backend_name", help="Backend name (see `benchbase plugins`).")
@click.option("--hw", "hardware", help="Hardware profile name (see `benchbase profiles`), auto (this machine) or a "
                                       "YAML file.")
@click.option("--out", type=click.Path(path_type=Path), help="Run folder (default: runs/WORKLOAD-BACKEND-HW-TIME).")
@click.option("--seed", type=click.IntRange(0, 2**31 - 1), default=0, show_default=True,
              help="Seed of the data order, the initial weights and dropout (the corpus's own seed is fixed); "
                   "with --runs, the first run's.")
@click.option("--max-minutes", type=click.FloatRange(min=0.01), help="Override the workload's time limit.")
@click.option("--max-epochs", type=click.IntRange(min=1), help="Override the workload's epoch limit.")
@click.option("--target", "targets", multiple=True, metavar="METRIC=VALUE",
              help="Replace the workload's targets, e.g. --target paper_cer=40 (repeatable; metrics: wer, paper_cer "
                   "= the paper's CER, cer = jiwer's reference-length CER).")
@click.option("--data", type=click.Path(path_type=Path), help="A prepared feature store (required for LibriSpeech).")
@click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto", show_default=True,
              help="The kind of device to train on: auto takes the profile's; another kind is an override the log "
                   "records.")
@click.option("--precision", type=click.Choice(PRECISIONS),
              help="Override the workload's model.precision (a different run, logged and checked as such): fp32 "
                   "(the workloads' own), bf16 mixed precision and int8-emulated fake quantization on any device; "
                   "tf32 and fp16 on GPUs only.")
@click.option("--strategy", default=DEFAULT_STRATEGY, show_default=True, metavar="NAME",
              help="How the learners of a data-parallel run combine their work: sync (the paper's, the closed "
                   "division's), local_sgd, hierarchical, powersgd, fp16_compress, bf16_compress, adpsgd, h-adpsgd "
                   "or a plugin's (`benchbase plugins`); its parameters with --set strategy.FIELD=VALUE. Any but "
                   "sync makes the run open.")
@click.option("--cache", type=click.Path(path_type=Path), help="Where the synthetic corpus is cached.")
@click.option("--no-final-eval", is_flag=True,
              help="Skip the untimed evaluation of every dev and test subset after run_stop (quick runs).")
@click.option("--runs", type=click.IntRange(1, 1000), default=1, show_default=True,
              help="Seeded runs (seed, seed+1, ...) into OUT/run-0, OUT/run-1, ... for `benchbase score`.")
@click.option("--devices", type=click.IntRange(1, 1024),
              help="Train on N devices instead of the profile's count (an override the log records).")
@click.option("--profile-steps", "profile_steps", type=click.IntRange(1, 1000), metavar="STEPS",
              help="Trace STEPS training steps (from the 3rd) with the framework's profiler into RUN_DIR/profile.")
@click.option("--checkpoint-every", type=click.IntRange(1, 10_000_000), metavar="BATCHES",
              help="Checkpoint every BATCHES batches instead of the workload's cadence (preemptible machines).")
@click.option("--org", envvar=ORG_ENVIRONMENT, show_envvar=True, metavar="NAME",
              help="The organization submitting the result: MLPerf's submission_org in the log, and in config.json "
                   "(default: benchbase).")
@click.option("--resume", "resume", type=click.Path(path_type=Path), metavar="RUN_DIR",
              help="Continue a killed or preempted run from its newest complete checkpoint (its settings come "
                   "from RUN_DIR/config.json; no other option applies).")
@click.option("--set", "settings", multiple=True, metavar="SPEC.PATH=VALUE",
              help=f"Override a field of the workload or the hardware profile, e.g. --set {SET_EXAMPLE[0]} --set "
                   f"{SET_EXAMPLE[1]} (repeatable). Changing what the workload pins puts the run in the open "
                   "division.")
@click.option("--dry-run", is_flag=True,
              help="Resolve the workload, backend, profile and overrides, make every check that refuses a run "
                   "before the clock (the store, the free disk space among them), print the plan and stop: nothing "
                   "is trained and no run folder is written; exit 2 where the run would refuse.")
@click.pass_context
def run(context: click.Context, **options: Any) -> None:
    """Train WORKLOAD with BACKEND on HW until every target is reached (or the limits).

    A backend that trains one process per device (torch) on several devices runs in that many
    processes, started through torch's launcher; under `torchrun` (one machine or several) each
    process joins the run torchrun describes.

    Before the clock, the run's filesystem must have room for what it writes: its checkpoints (those
    kept at once, each the parameters and the optimizer's state) and its logs for its time limit.
    BENCHBASE_DISK_ESTIMATE=SIZE (e.g. 200M, 2G; 0 skips the check) replaces that estimate.

    Exit status: 0 when every run reached every target (with --dry-run: when the run would
    start), 3 when a run stopped at a limit first (status aborted), 2 for bad input.
    """
    if options["resume"] is not None:
        _refuse_other_options(context)
        # A rank of several processes leaves with 0 whatever the status, as below.
        if resume_run(options["resume"]) != "success" and not World.from_environment().distributed:
            raise click.exceptions.Exit(3)
        return
    request = run_request(options)
    world = World.from_environment()
    manager = get_plugin_manager()
    registry = collect_registry(manager)
    for failure in manager.failures if world.leader else ():
        click.echo(f"benchbase: warning: {failure.describe()}", err=True)
    resolved = resolve_run(request, registry, world)
    folders = _run_folders(resolved, options["out"], options["runs"])
    if world.leader:  # before any output or data: a folder that cannot be made is one line, exit 2
        for folder in folders:
            check_out_folder(folder)
    space = _space_estimate(resolved, folders)
    if space.short and world.leader:
        raise InputError(f"{space.shortfall()}; free some space or choose another --out")
    if options["dry_run"]:
        _check_data_before_clock(resolved, folders[0], options)
        table = run_plan_table(resolved, folders, options["seed"], options["org"] or DEFAULT_ORG,
                               _data_description(request.data, options["cache"]),
                               options["checkpoint_every"], not options["no_final_eval"])
        table.add_row("disk space", escape(space.describe()))
        Console().print(table)
        return
    statuses = _run_all(world, manager, resolved, folders, options)
    # Under torchrun (or benchbase's own launcher), every rank of a run that completed leaves with 0,
    # whatever its status: torchrun takes any other code for a crashed worker (it would print a
    # ChildFailedError, restart the group where --max-restarts allows, and leave the other nodes
    # waiting at their exit barrier). The status is in result.json and rank 0's output; benchbase's
    # own launcher reads it from there and exits 3 for an aborted run (docs/clusters.md, "Exit codes").
    if any(status != "success" for status in statuses) and not world.distributed:
        raise click.exceptions.Exit(3)


def _space_estimate(resolved: ResolvedRun, folders: list[Path]) -> SpaceEstimate:
    """What the run (or series) writes, against the free space of its folders' filesystem: every
    run of a series writes beside the others, on the same filesystem."""
    plan = resolved.plan
    per_run = estimated_run_bytes(resolved.workload, gpus=plan.count if plan.kind == "cuda" else 0)
    return space_estimate(folders[0], per_run * len(folders),
                          "the run" if len(folders) == 1 else f"the series of {len(folders)} runs")


def _check_data_before_clock(resolved: ResolvedRun, folder: Path, options: dict[str, Any]) -> None:
    """The refusals that the harness's init makes of the store (harness/initialization.py), made
    by a dry run on the store the run would train on. A synthetic store not built yet is built by
    the run for this workload, and has nothing to refuse."""
    store = resolved.request.data
    if store is None:
        _, store = synthetic_paths(resolved.workload, options["cache"] or default_cache())
        if not FeatureStore.exists(store):
            return
    check_run_data(_run_config(resolved, folder, store, options["seed"], options))


def run_request(options: dict[str, Any]) -> RunRequest:
    """The choices of `benchbase run`'s parsed options that decide what the run is."""
    for option, name in (("--workload", "workload_name"), ("--backend", "backend_name"), ("--hw", "hardware")):
        if options[name] is None:
            raise InputError(f"{option} is required (or --resume RUN_DIR)")
    org = options["org"]
    if org is not None and not 0 < len(org) <= MAX_ORG_LENGTH:
        raise InputError(f"--org {org!r}: expected a name of 1 to {MAX_ORG_LENGTH} characters")
    return RunRequest(
        workload=options["workload_name"], backend=options["backend_name"], hardware=options["hardware"],
        max_minutes=options["max_minutes"], max_epochs=options["max_epochs"], targets=tuple(options["targets"]),
        precision=options["precision"], device=options["device"], devices=options["devices"],
        profile_steps=options["profile_steps"] or 0,
        settings=tuple(options["settings"]), data=options["data"], strategy=options["strategy"])


def run_refusal(arguments: Sequence[str], registry: Registry) -> str | None:
    """What `benchbase run ARGUMENTS` would refuse before any work, in its own one-line words; None
    when it would start. `sweep --dry-run` asks this of every run it plans."""
    try:
        with run.make_context("run", list(arguments)) as context:
            options = dict(context.params)
        resolve_run(run_request(options), registry)
    except click.ClickException as error:
        return error.format_message()
    except InputError as error:
        return str(error)
    return None


def _run_folders(resolved: ResolvedRun, out: Path | None, runs: int) -> list[Path]:
    # A precision other than the workload's own is in the default folder's name: it is a different run.
    chosen = f"-{resolved.request.precision}" if resolved.precision_chosen else ""
    out = out or Path("runs") / (f"{resolved.workload.name}-{resolved.request.backend}-{resolved.profile.name}"
                                 f"{chosen}-{time.strftime('%Y%m%d-%H%M%S')}")
    return [out if runs == 1 else series_member(out, index) for index in range(runs)]


def _data_description(data: Path | None, cache: Path | None) -> str:
    if data is not None:
        return str(data)
    return f"the synthetic corpus's store in {cache or default_cache()} (built on first use)"


def _run_all(world: World, manager, resolved: ResolvedRun, folders: list[Path], options: dict[str, Any]) -> list[str]:
    """Every run's status: in worker processes this command launches, or here."""
    console = Console(stderr=False, quiet=not world.leader)
    request, plan = resolved.request, resolved.plan
    cache = options["cache"] or default_cache()
    if resolved.backend_class.capabilities.process_model == "process_per_device" and plan.count > 1 \
            and not world.distributed:
        store = _prepare_data(console, resolved.workload, request.data, cache)
        arguments = _worker_arguments(options, request, store)
        return [launched_status(plan.count, [*arguments, "--out", str(folder), "--seed", str(options["seed"] + index)],
                                folder, resolved.profile.pipeline.threads)
                for index, folder in enumerate(folders)]
    return _run_here(world, manager, resolved, folders, options, console)


def _run_here(world: World, manager, resolved: ResolvedRun, folders: list[Path], options: dict[str, Any],
              console: Console) -> list[str]:
    """The runs in this process: alone, or as one rank of a torch.distributed world."""
    coordinator = coordinator_for(world, resolved.plan.kind,
                                  timeout_seconds=resolved.workload.max_minutes * 60 + COLLECTIVE_SLACK_S)
    try:
        if world.distributed:
            end_with_parent()  # the launcher's agent is the parent: a worker never outlives it
        store = _prepare_in_turns(world, coordinator, console, resolved.workload, resolved.request.data,
                                  options["cache"] or default_cache())
        reporter = RunReporter(console)
        if world.leader:  # rank 0 owns the lifecycle hooks, the reporter among them
            manager.register(reporter, name="benchbase-reporter")
        statuses = []
        for index, folder in enumerate(folders):
            config = _run_config(resolved, folder, store, options["seed"] + index, options)
            try:
                result = run_benchmark(config, manager, resolved.backend_class, coordinator)
            finally:
                reporter.close()
            if result is not None:
                statuses.append(result.status)
                console.print(f"run folder: {folder}")
        # Every rank leaves the process group together, once rank 0 has written everything: a rank
        # that tore its connections down while rank 0 was still writing could abort at exit
        # (std::terminate in gloo's threads, seen under load), and the launcher would then stop rank 0.
        coordinator.barrier()
        # The other ranks leave with 0: rank 0 alone reports the run's status.
        return statuses if world.leader else ["success"] * len(folders)
    finally:
        coordinator.close()


def _run_config(resolved: ResolvedRun, folder: Path, store: Path, seed: int, options: dict[str, Any]) -> RunConfig:
    request = resolved.request
    return RunConfig(workload=resolved.workload, backend=request.backend, hardware=resolved.profile, seed=seed,
                     out=folder, data=store, device=request.device, devices=request.devices,
                     profile_steps=request.profile_steps, checkpoint_every=options["checkpoint_every"],
                     final_evaluation=not options["no_final_eval"], submitter=options["org"] or DEFAULT_ORG,
                     strategy=resolved.strategy, **resolved.division)


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


def _worker_arguments(options: dict[str, Any], request: RunRequest, store: Path) -> list[str]:
    """`benchbase run` as each worker runs it: the same choices, the prepared store (--out and --seed per run)."""
    arguments = ["run", "--workload", request.workload, "--backend", request.backend, "--hw", request.hardware,
                 "--data", str(store), "--device", request.device]
    for option, value in (("--max-minutes", request.max_minutes), ("--max-epochs", request.max_epochs),
                          ("--precision", request.precision), ("--cache", options["cache"]),
                          ("--devices", request.devices), ("--profile-steps", request.profile_steps or None),
                          ("--checkpoint-every", options["checkpoint_every"]), ("--org", options["org"]),
                          ("--strategy", request.strategy)):
        if value is not None:
            arguments += [option, str(value)]
    for target in request.targets:
        arguments += ["--target", target]
    for setting in request.settings:
        arguments += ["--set", setting]
    if options["no_final_eval"]:
        arguments.append("--no-final-eval")
    return arguments


def _refuse_other_options(context: click.Context) -> None:
    given = [parameter.opts[0] for parameter in context.command.params
             if parameter.name not in (None, "resume")
             and context.get_parameter_source(parameter.name) == click.core.ParameterSource.COMMANDLINE]
    if given:
        raise InputError(f"--resume takes every setting from the run's config.json; drop {', '.join(given)}")


def _prepare_data(console: Console, workload: WorkloadSpec, data: Path | None, cache: Path) -> Path:
    # Off a terminal, a transient progress view would leave a blank line behind (before an error, too).
    with Progress(console=console, transient=True, disable=not console.is_terminal) as progress:
        tasks: dict[str, int] = {}

        def report(label: str, done: int, total: int) -> None:
            if label not in tasks:
                tasks[label] = progress.add_task(label, total=total)
            progress.update(tasks[label], completed=done, total=total)

        def building(build: StoreBuild) -> None:  # one line, unwrapped, in a log file too
            console.print(store_build_line(build), markup=False, highlight=False, soft_wrap=True)

        return ensure_workload_data(workload, data, cache, report, building)


def store_build_line(build: StoreBuild) -> str:
    """The one line a run prints before it builds a store, on a terminal or not (the progress bars
    are a terminal's alone): a first run of a workload spends minutes here."""
    corpus = f"; first synthesizing the speech corpus in {build.corpus}" if build.corpus is not None else ""
    megabytes = build.estimated_bytes / 1e6
    size = f"{megabytes:.0f}" if megabytes >= 10 else f"{megabytes:.1f}"
    return (f"building the feature store for {build.workload} in {build.store} (about {size} MB, "
            f"{build.utterances} utterances{corpus}); later runs reuse it")
