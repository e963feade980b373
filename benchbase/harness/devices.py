"""Before the clock starts: the device plan, and every check that can refuse it (the backend's
capabilities, the processes torchrun started, the devices this machine has); after build(), the
devices the backend took; and the plan as the log records it."""

from __future__ import annotations

import dataclasses
import os

from benchbase.backend import Backend, Batch, DevicePlan, ProcessModel
from benchbase.errors import BenchbaseError, InputError
from benchbase.harness.world import World
from benchbase.specs import HardwareProfile, RunConfig, WorkloadSpec
from benchbase.specs.model import GPU_ONLY_PRECISIONS
from benchbase.specs.strategy import StrategyDefinition

__all__ = ["check_capabilities", "check_devices_in_use", "check_precision_on_device", "check_visible_devices",
           "check_world", "checked_plan", "config_plan", "device_plan", "gpus_in_use", "own_slice", "plan_record",
           "thread_budget"]


def device_plan(hardware: HardwareProfile, device: str = "auto", *, devices: int | None = None,
                process_model: ProcessModel = "single_process", world: World | None = None) -> DevicePlan:
    """The plan for ``--device`` (auto: the profile's device kind) and ``--devices`` (None: the profile's count).

    Training on another kind or number of devices than the profile names is an override the
    plan records (``overridden``) and the log states. ``pipeline.threads`` is per device: a
    process driving several devices gets that many times the budget.
    """
    world = world or World()
    profile_kind = "cuda" if hardware.devices.kind == "gpu" else "cpu"
    kind = profile_kind if device == "auto" else device
    if devices is not None:
        count = devices
    elif kind == profile_kind:
        count = hardware.devices.count
    else:
        count = 1  # --device cpu on a GPU profile: one CPU device
    global_batch = hardware.pipeline.global_batch
    if global_batch % count:
        raise InputError(f"hardware profile {hardware.name!r}: its global batch of {global_batch} does not split "
                         f"evenly over {count} devices")
    per_process = 1 if process_model == "process_per_device" else max(1, count // world.size)
    # The profile's threads are a CPU device's compute budget: a GPU run's host threads launch
    # kernels (XLA's GPU client keeps several busy), so a CUDA plan has none.
    threads = hardware.pipeline.threads * per_process if hardware.pipeline.threads and kind == "cpu" else None
    return DevicePlan(kind=kind, count=count, batch_per_device=global_batch // count, threads=threads,
                      world_size=world.size, rank=world.rank, local_rank=world.local_rank,
                      overridden=kind != profile_kind or count != hardware.devices.count,
                      devices_per_process=per_process if world.distributed else None,
                      cuda_graphs=hardware.devices.cuda_graphs)


def check_capabilities(backend: type[Backend], name: str, workload: WorkloadSpec, hardware: HardwareProfile,
                       plan: DevicePlan) -> None:
    """A one-line error, before the clock starts, for a run the backend says it cannot do."""
    capabilities = backend.capabilities
    family, optimizer = workload.model.family, workload.optimizer.name
    if family not in capabilities.families:
        raise InputError(f"backend {name!r} does not implement the {family} model family of workload "
                         f"{workload.name!r} (it declares {', '.join(sorted(capabilities.families))})")
    if optimizer not in capabilities.optimizers:
        raise InputError(f"backend {name!r} does not implement optimizer {optimizer!r} of workload "
                         f"{workload.name!r} (it declares {', '.join(sorted(capabilities.optimizers))})")
    if plan.kind not in capabilities.devices:
        raise InputError(f"backend {name!r} does not train on {plan.kind} devices "
                         f"(it declares {', '.join(sorted(capabilities.devices))})")
    if plan.count > capabilities.max_devices:
        raise InputError(f"hardware profile {hardware.name!r} plans {plan.count} {plan.kind} devices, but "
                         f"backend {name!r} trains on at most {capabilities.max_devices}; choose a profile with "
                         f"{capabilities.max_devices} or pass --devices {capabilities.max_devices}")
    precision = workload.model.precision
    precisions = capabilities.precisions_of(family)
    if precision not in precisions:
        raise InputError(f"backend {name!r} does not implement precision {precision!r} "
                         f"{'' if precisions == capabilities.precisions else f'for the {family} family '}"
                         f"(it declares {', '.join(sorted(precisions))})")
    check_precision_on_device(precision, plan.kind, family, name)


def check_strategy(backend: type[Backend], name: str, definition: StrategyDefinition, plan: DevicePlan) -> None:
    """A training strategy the backend does not carry out, or cannot on this plan: one line, before the clock."""
    capabilities = backend.capabilities
    if definition.name not in capabilities.strategies:
        raise InputError(f"backend {name!r} does not implement training strategy {definition.name!r} "
                         f"(it declares {', '.join(sorted(capabilities.strategies))})")
    if capabilities.process_model not in definition.process_models:
        raise InputError(f"training strategy {definition.name!r} runs under "
                         f"{' or '.join(sorted(definition.process_models))}, and backend {name!r} is "
                         f"{capabilities.process_model}")
    if plan.count < definition.min_learners:  # a learner per device
        raise InputError(f"training strategy {definition.name!r} needs at least {definition.min_learners} learners, "
                         f"and this run has {plan.count}; pass --devices {definition.min_learners} or more")


def check_precision_on_device(precision: str, kind: str, family: str, backend: str) -> None:
    """A precision only a GPU computes, on another device: refused before any backend is imported.
    Only the backend declares what else its family trains in (int8-emulated is not every
    family's), and loading it would load its framework for a refusal, so the advice names fp32,
    which every backend trains every family in, and where the others are listed."""
    if precision in GPU_ONLY_PRECISIONS and kind != "cuda":
        raise InputError(f"precision {precision!r} needs a GPU's tensor cores, and this run trains on {kind}; "
                         f"choose fp32 (every backend trains {family} in it), another precision that backend "
                         f"{backend!r} declares for {family} (README, 'Workloads and hardware profiles'), "
                         "or a GPU profile")


def check_world(backend: type[Backend], name: str, hardware: HardwareProfile, plan: DevicePlan,
                world: World) -> None:
    """The processes torchrun started fit the plan: one per device for a process-per-device backend."""
    process_model = backend.capabilities.process_model
    if process_model == "single_process":
        if world.distributed:
            raise InputError(f"backend {name!r} drives all its devices from one process; run it without torchrun "
                             f"(this is rank {world.rank} of {world.size})")
        return
    if process_model == "process_per_machine":
        if world.local_size > 1:
            raise InputError(f"backend {name!r} drives all of a machine's devices from one process; run torchrun "
                             f"with --nproc-per-node 1 (it started {world.local_size} here)")
        if world.distributed and plan.count % world.size:
            raise InputError(f"hardware profile {hardware.name!r} plans {plan.count} {plan.kind} devices, which do "
                             f"not split evenly over torchrun's {world.size} machines; pass --devices N")
        return
    if world.distributed and world.size != plan.count:
        raise InputError(f"torchrun started {world.size} processes, but hardware profile {hardware.name!r} plans "
                         f"{plan.count} {plan.kind} devices, one process each; pass --devices {world.size} to "
                         f"train on {world.size} (the log records the override)")


def check_visible_devices(backend: type[Backend], name: str, hardware: HardwareProfile, plan: DevicePlan,
                          world: World) -> None:
    """This machine has the devices the plan puts on it: ``--hw sys1`` without 4 GPUs stops here."""
    visible = backend.visible_devices(plan.kind)
    if visible is None:
        return
    if backend.capabilities.process_model == "process_per_device":
        on_this_machine = world.local_size if world.distributed else plan.count
    else:
        on_this_machine = plan.process_devices
    if visible < on_this_machine:
        share = f" ({on_this_machine} on this machine)" if world.distributed else ""
        raise InputError(f"hardware profile {hardware.name!r} plans {plan.count} {plan.kind} device(s){share}, but "
                         f"backend {name!r} sees {visible} here; pass --devices N to train on fewer (the log records "
                         "the override), or --device cpu")


def checked_plan(backend: type[Backend], name: str, workload: WorkloadSpec, hardware: HardwareProfile, *,
                 device: str = "auto", devices: int | None = None, profile_steps: int = 0,
                 world: World | None = None) -> DevicePlan:
    """The run's device plan, after every check that can refuse it before the clock starts."""
    world = world or World()
    process_model = backend.capabilities.process_model
    plan = device_plan(hardware, device, devices=devices, process_model=process_model,
                       world=world if process_model != "single_process" else None)
    check_capabilities(backend, name, workload, hardware, plan)
    check_world(backend, name, hardware, plan, world)
    check_visible_devices(backend, name, hardware, plan, world)
    if profile_steps and not overrides_profiler(backend):
        raise InputError(f"backend {name!r} has no profiler hooks (start_profiler, stop_profiler); "
                         "run without --profile-steps")
    return plan


def config_plan(config: RunConfig, backend: type[Backend], world: World,
                peer_addresses: tuple[str, ...] = ()) -> DevicePlan:
    """``checked_plan`` for a run's config; a process-per-machine world gets its peers' addresses."""
    plan = checked_plan(backend, config.backend, config.workload, config.hardware, device=config.device,
                        devices=config.devices, profile_steps=config.profile_steps, world=world)
    if backend.capabilities.process_model == "process_per_machine" and plan.distributed:
        plan = dataclasses.replace(plan, peer_addresses=peer_addresses)
    return plan


def overrides_profiler(backend: type[Backend]) -> bool:
    return backend.start_profiler is not Backend.start_profiler and backend.stop_profiler is not Backend.stop_profiler


def check_devices_in_use(per_rank: list[list[str]], plan: DevicePlan, name: str) -> None:
    """After build(): the backend trains on the devices the plan gives each process, no fewer, no more."""
    expected = plan.process_devices
    for rank, devices in enumerate(per_rank):
        if devices and len(devices) != expected:
            where = f"rank {rank} of backend {name!r}" if plan.distributed else f"backend {name!r}"
            raise BenchbaseError(f"{where} trains on {len(devices)} device(s) ({', '.join(devices)}), but the plan "
                                 f"gives it {expected} {plan.kind} device(s)")


def plan_record(plan: DevicePlan, hardware: HardwareProfile) -> dict:
    """The plan as the log records it, beside the profile's own devices."""
    return {"kind": plan.kind, "count": plan.count, "batch_per_device": plan.batch_per_device,
            "world_size": plan.world_size, "profile_kind": "cuda" if hardware.devices.kind == "gpu" else "cpu",
            "profile_count": hardware.devices.count, "overridden": plan.overridden}


def own_slice(batch: Batch, plan: DevicePlan) -> Batch:
    """This process's rows of the global batch: all of them, or slice ``rank`` of a process-per-device world."""
    if not plan.distributed:
        return batch
    rows = plan.batch_per_device * plan.process_devices
    start, stop = plan.rank * rows, (plan.rank + 1) * rows
    return dataclasses.replace(
        batch, features=batch.features[start:stop], feature_lengths=batch.feature_lengths[start:stop],
        output_lengths=batch.output_lengths[start:stop], labels=batch.labels[start:stop],
        label_lengths=batch.label_lengths[start:stop], utterance_ids=batch.utterance_ids[start:stop],
        transcripts=batch.transcripts[start:stop])


def gpus_in_use(plan: DevicePlan, process_model: ProcessModel, world: World) -> list[str] | None:
    """The GPUs this machine's processes train on, as CUDA_VISIBLE_DEVICES entries (None: a CPU run)."""
    if plan.kind != "cuda":
        return None
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    entries = [entry.strip() for entry in visible.split(",")] if visible is not None else [
        str(index) for index in range(plan.count)]
    here = world.local_size if process_model == "process_per_device" and plan.distributed else plan.process_devices
    return entries[:here]  # rank r of this machine trains on the r-th visible GPU


def thread_budget(plan: DevicePlan) -> int:
    """The CPU cores the plan gives training: its threads, else the machine's."""
    return plan.threads or os.cpu_count() or 1
