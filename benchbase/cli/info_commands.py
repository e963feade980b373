"""`benchbase plugins`, `benchbase workloads`, `benchbase profiles`: what is available."""

from __future__ import annotations

from pathlib import Path

import click
import yaml
from rich.console import Console
from rich.table import Table

from benchbase.atomic import atomic_write_text
from benchbase.backend import BackendReference
from benchbase.cli.app import cli
from benchbase.cli.spec_view import spec_rows
from benchbase.errors import BenchbaseError
from benchbase.plugin_host import get_plugin_manager
from benchbase.plugin_host.registry import collect_registry
from benchbase.specs import WorkloadSpec
from benchbase.telemetry.environment import entry_point_distributions


@cli.command()
def plugins() -> None:
    """List loaded plugins, their hooks, and the backends they register."""
    manager = get_plugin_manager()
    registry = collect_registry(manager)
    distributions = entry_point_distributions()
    table = Table(title="plugins")
    for column in ("name", "distribution", "hooks", "backends"):
        table.add_column(column)
    for name, plugin in sorted(manager.list_name_plugin()):
        hooks = sorted(caller.name for caller in manager.get_hookcallers(plugin) or [])
        backends = [name for name, backend in registry.backends.items()
                    if _backend_module(backend).split(".")[0] == _module_root(plugin)]
        table.add_row(name, distributions.get(name, "built-in"), ", ".join(hooks), ", ".join(backends))
    for failure in manager.failures:
        table.add_row(failure.plugin, failure.distribution, f"[red]skipped: {failure.error}[/]", "")
    Console().print(table)
    if manager.failures:  # the list is for reading; the exit code is for scripts and CI
        raise BenchbaseError("; ".join(failure.describe() for failure in manager.failures))


def _backend_module(backend) -> str:
    """Where a backend lives, without importing it when it was registered by reference."""
    return backend.target.partition(":")[0] if isinstance(backend, BackendReference) else backend.__module__


def _module_root(plugin) -> str:
    return getattr(plugin, "__name__", type(plugin).__module__).split(".")[0]


@cli.command()
@click.option("--show", "show", metavar="NAME", help="Print everything workload NAME pins, field by field.")
def workloads(show: str | None) -> None:
    """List registered workloads, or show one in full."""
    registry = collect_registry(get_plugin_manager())
    if show is not None:
        spec = registry.workload(show)
        console = Console()
        console.print(_workload_table(spec))
        console.print(_deviations_table(spec))
        return
    table = Table(title="workloads")
    for column in ("name", "parameters", "dataset", "targets", "description"):
        table.add_column(column)
    for name, spec in sorted(registry.workloads.items()):
        table.add_row(name, f"{spec.model.parameter_count(spec.features.dimension):,}", spec.data.dataset,
                      ", ".join(target.label for target in spec.tta.targets), spec.description)
    Console().print(table)


def _workload_table(spec: WorkloadSpec) -> Table:
    dimension = spec.features.dimension
    table = Table(title=f"workload {spec.name}: {spec.model.parameter_count(dimension):,} parameters, "
                        f"{dimension} features per frame")
    for column in ("field", "value", "meaning"):
        table.add_column(column, overflow="fold")
    for path, value, meaning in spec_rows(spec):
        if not path.startswith("deviations."):  # shown in their own table below
            table.add_row(path, value, meaning)
    return table


def _deviations_table(spec: WorkloadSpec) -> Table:
    table = Table(title=f"deviations of {spec.name} from {spec.reference or 'its reference'}: "
                        f"{len(spec.deviations) or 'none declared'}")
    for column in ("field", "reference", "benchbase", "why"):
        table.add_column(column, overflow="fold")
    for deviation in spec.deviations:
        table.add_row(deviation.field, deviation.reference, deviation.benchbase, deviation.why)
    return table


@cli.command()
@click.option("--detect", is_flag=True, help="Describe this machine as a profile (what `--hw auto` uses).")
@click.option("--write", "write_to", type=click.Path(path_type=Path),
              help="With --detect: write the profile as YAML to this file (edit it, then pass it to --hw).")
def profiles(detect: bool, write_to: Path | None) -> None:
    """List registered hardware profiles; --detect describes this machine."""
    if write_to is not None and not detect:
        raise click.UsageError("--write needs --detect")
    if detect:
        _detect(write_to)
        return
    registry = collect_registry(get_plugin_manager())
    table = Table(title="hardware profiles")
    for column in ("name", "devices", "CPU", "batch (per device)", "readers", "buffer", "price $"):
        table.add_column(column)
    for name, profile in sorted(registry.profiles.items()):
        pipeline = profile.pipeline
        price = profile.price.total_usd
        table.add_row(name, f"{profile.devices.count}x {profile.devices.model}", profile.cpu.model,
                      f"{pipeline.global_batch} ({pipeline.batch_per_device})", str(pipeline.readers),
                      str(pipeline.buffer), "-" if price is None else f"{price:,.2f}")
    Console().print(table)


def _detect(write_to: Path | None) -> None:
    from benchbase.telemetry.hardware_detect import detect_profile

    profile = detect_profile()
    text = yaml.safe_dump(profile.model_dump(mode="json", exclude_none=True), sort_keys=False, width=100)
    if write_to is None:
        click.echo(text, nl=False)
        return
    atomic_write_text(write_to, text)
    click.echo(f"wrote {write_to}: {profile.devices.count}x {profile.devices.model}; use it with --hw {write_to}")
