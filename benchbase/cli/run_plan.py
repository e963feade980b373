"""What `benchbase run` settles before any work: the specs with their overrides, the backend,
the device plan, and every refusal that comes before the clock.

`run`, `run --dry-run` and `sweep --dry-run` all go through ``resolve_run``, so a dry run
refuses exactly what a run would, in the same words. The checks that need no framework come
first: a run refused for its profile, precision or overrides never waits for TensorFlow to load.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from benchbase.backend import Backend, DevicePlan
from benchbase.cli.framework_logs import load_backend
from benchbase.data.workload_data import default_cache, ensure_workload_data
from benchbase.errors import InputError, describe_validation_error
from benchbase.harness.devices import check_precision_on_device, check_strategy, checked_plan, device_plan
from benchbase.harness.world import World
from benchbase.plugin_host.registry import Registry
from benchbase.run_folder import RunFolder
from benchbase.specs import HardwareProfile, WorkloadSpec
from benchbase.specs.overrides import apply_overrides, division_of, open_changes, parse_override
from benchbase.specs.strategy import DEFAULT_STRATEGY, StrategyDefinition, StrategySpec, check_strategy_fields
from benchbase.specs.tta import parse_target

__all__ = ["ResolvedRun", "RunRequest", "check_out_folder", "request_workload", "resolve_run", "with_overrides"]


@dataclass(frozen=True)
class RunRequest:
    """`benchbase run`'s choices that decide what is trained, and on what (not where it is written)."""

    workload: str
    backend: str
    hardware: str
    max_minutes: float | None = None
    max_epochs: int | None = None
    targets: tuple[str, ...] = ()
    precision: str | None = None
    device: str = "auto"
    devices: int | None = None
    profile_steps: int = 0
    settings: tuple[str, ...] = ()
    data: Path | None = None
    strategy: str = DEFAULT_STRATEGY


@dataclass(frozen=True)
class ResolvedRun:
    """A run that passed every check before the clock: what it will train, on what, in which division."""

    request: RunRequest
    backend_class: type[Backend]
    workload: WorkloadSpec
    profile: HardwareProfile
    plan: DevicePlan
    division: dict[str, Any]
    """RunConfig's overrides, division and open_changes."""
    named_precision: str
    """The precision of the workload as named (before --precision and --set)."""
    strategy: StrategySpec
    """The training strategy with its --set strategy.* overrides."""

    @property
    def precision_chosen(self) -> bool:
        """Whether --precision departs from the named workload's (a different run, named as such)."""
        return self.request.precision is not None and self.request.precision != self.named_precision


def resolve_run(request: RunRequest, registry: Registry, world: World | None = None) -> ResolvedRun:
    """The run ``request`` describes, or the one-line InputError `benchbase run` would stop with."""
    world = world or World()
    registry.backend_entry(request.backend)  # an unknown name first, before any spec is read
    named = registry.workload(request.workload)
    parsed = [parse_override(text) for text in request.settings]
    workload = request_workload(request, registry)
    profile = apply_overrides(registry.profile(request.hardware),
                              [(path, value) for root, path, value in parsed if root == "hardware"], "hardware")
    preliminary = device_plan(profile, request.device, devices=request.devices)
    check_precision_on_device(workload.model.precision, preliminary.kind, workload.model.family, request.backend)
    backend_class = load_backend(registry, request.backend)
    _check_device_flag(backend_class, request, profile, preliminary, world)
    plan = checked_plan(backend_class, request.backend, workload, profile, device=request.device,
                        devices=request.devices, profile_steps=request.profile_steps, world=world)
    definition = registry.strategy(request.strategy)
    strategy_settings = [(path, value) for root, path, value in parsed if root == "strategy"]
    check_strategy_fields(registry.strategies, definition, strategy_settings)
    strategy = apply_overrides(definition.spec(), strategy_settings, "strategy")
    check_strategy(backend_class, request.backend, definition, plan)
    _check_data(workload, request.data)
    return ResolvedRun(request, backend_class, workload, profile, plan,
                       _division(registry, workload, request.settings, definition), named.model.precision, strategy)


def request_workload(request: RunRequest, registry: Registry) -> WorkloadSpec:
    """The workload ``request`` trains, with its overrides: what a run writes depends on it alone
    (disk_space), so `sweep` asks this of each run without loading a framework."""
    parsed = [parse_override(text) for text in request.settings]
    return apply_overrides(
        with_overrides(registry.workload(request.workload), request.max_minutes, request.max_epochs,
                       request.targets, request.precision),
        [(path, value) for root, path, value in parsed if root == "workload"], "workload")


def _check_device_flag(backend_class: type[Backend], request: RunRequest, profile: HardwareProfile,
                       preliminary: DevicePlan, world: World) -> None:
    """``--device`` asking for another kind than the profile's: the flag, not the profile, wants
    devices this machine may lack, so the refusal names the flag."""
    profile_kind = "cuda" if profile.devices.kind == "gpu" else "cpu"
    if request.device in ("auto", profile_kind) or world.distributed:
        return
    visible = backend_class.visible_devices(preliminary.kind)
    if visible is not None and visible < preliminary.count:
        raise InputError(f"--device {request.device}: backend {request.backend!r} sees {visible} {request.device} "
                         f"device(s) on this machine, and the run needs {preliminary.count}; leave --device out "
                         f"to train on the {profile_kind} of hardware profile {profile.name!r}")


def _check_data(workload: WorkloadSpec, data: Path | None) -> None:
    """A given store must be prepared, and LibriSpeech needs one; the synthetic corpus is built later."""
    if data is not None or workload.data.dataset != "synthetic":
        ensure_workload_data(workload, data, default_cache())  # checks only: it builds nothing in these cases


def _division(registry: Registry, workload: WorkloadSpec, settings: tuple[str, ...],
              strategy: StrategyDefinition) -> dict[str, Any]:
    registered = registry.workloads.get(workload.name)
    changes = open_changes(None if registered is None else registered.model_dump(mode="json"),
                           workload.model_dump(mode="json"))
    if not strategy.closed:  # the closed division trains the paper's way
        changes.append(f"strategy: {DEFAULT_STRATEGY!r} -> {strategy.name!r}")
    return {"overrides": tuple(settings), "division": division_of(changes), "open_changes": tuple(changes)}


def check_out_folder(folder: Path) -> None:
    """``--out`` can become a run folder: free, and creatable (a read-only mount, a file where a folder
    should be or /proc are refused here, in one line, before any data is prepared)."""
    existing = _nearest_existing(folder)
    if not existing.is_dir():
        raise InputError(f"--out {folder}: {existing} is a file, not a folder")
    RunFolder.check_available(folder)
    try:  # the one reliable test of "can a folder be made here": make one, and remove it
        Path(tempfile.mkdtemp(prefix=".benchbase-probe-", dir=existing)).rmdir()
    except OSError as error:
        raise InputError(f"--out {folder}: cannot create a folder in {existing}: "
                         f"{error.strerror or type(error).__name__}") from None


def _nearest_existing(folder: Path) -> Path:
    path = folder.absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


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
        data["tta"]["targets"] = [parse_target(text, "--target") for text in targets]
    try:
        return WorkloadSpec.model_validate(data)
    except ValidationError as error:
        raise InputError(describe_validation_error(f"workload {workload.name!r} with overrides", error)) from None
