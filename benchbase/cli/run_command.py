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
from benchbase.errors import InputError, describe_validation_error
from benchbase.harness import run_benchmark
from benchbase.harness.plan import check_capabilities, device_plan
from benchbase.plugins import get_plugin_manager
from benchbase.registry import collect_registry
from benchbase.specs import RunConfig, WorkloadSpec
from benchbase.specs.workload import PRECISIONS

__all__ = ["run", "with_overrides"]


@cli.command()
@click.option("--workload", "workload_name", required=True, help="Workload name (see `benchbase workloads`).")
@click.option("--backend", "backend_name", required=True, help="Backend name (see `benchbase plugins`).")
@click.option("--hw", "hardware", required=True, help="Hardware profile name or a YAML file.")
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
def run(workload_name, backend_name, hardware, out, seed, max_minutes, max_epochs, targets, data, device, precision,
        cache, no_final_eval, runs):
    """Train WORKLOAD with BACKEND on HW until every target is reached (or the limits).

    Exit status: 0 when every run reached every target, 3 when a run stopped at a limit
    first (status aborted), 2 for bad input.
    """
    manager = get_plugin_manager()
    registry = collect_registry(manager)
    for failure in manager.failures:
        click.echo(f"benchbase: warning: {failure.describe()}", err=True)
    backend_class = registry.backend(backend_name)
    workload = with_overrides(registry.workload(workload_name), max_minutes, max_epochs, targets, precision)
    profile = registry.profile(hardware)
    # Before any data is synthesized or prepared: a run the backend cannot do fails in a second.
    check_capabilities(backend_class, backend_name, workload, profile, device_plan(profile, device))
    console = Console(stderr=False)
    store = _prepare_data(console, workload, data, cache or default_cache())
    # A precision other than the workload's own is in the default folder's name: it is a different run.
    chosen = f"-{precision}" if precision and precision != registry.workload(workload_name).model.precision else ""
    out = out or Path("runs") / (f"{workload.name}-{backend_name}-{profile.name}{chosen}-"
                                 f"{time.strftime('%Y%m%d-%H%M%S')}")
    reporter = RunReporter(console)
    manager.register(reporter, name="benchbase-reporter")
    statuses = []
    for index in range(runs):
        folder = out if runs == 1 else out / f"run-{index}"
        config = RunConfig(workload=workload, backend=backend_name, hardware=profile, seed=seed + index, out=folder,
                           data=store, device=device, final_evaluation=not no_final_eval)
        try:
            statuses.append(run_benchmark(config, manager, backend_class).status)
        finally:
            reporter.close()
        console.print(f"run folder: {folder}")
    if any(status != "success" for status in statuses):
        raise click.exceptions.Exit(3)


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
