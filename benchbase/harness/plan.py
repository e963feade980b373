"""Before the clock starts: the device plan, the backend's capabilities, and what build() gets."""

from __future__ import annotations

import dataclasses

from benchbase.backend import Backend, BuildContext, DevicePlan
from benchbase.data.store import FeatureStore
from benchbase.errors import InputError
from benchbase.specs import HardwareProfile, RunConfig, WorkloadSpec
from benchbase.specs.workload import GPU_ONLY_PRECISIONS

__all__ = ["build_context", "check_capabilities", "device_plan", "fp32_context"]


def device_plan(hardware: HardwareProfile, device: str = "auto") -> DevicePlan:
    """The plan for ``--device`` (auto: the profile's device kind) on the profile's devices."""
    kind = "cuda" if device == "cuda" or (device == "auto" and hardware.devices.kind == "gpu") else "cpu"
    count = hardware.devices.count if kind == "cuda" else 1
    batch_per_device = hardware.pipeline.global_batch // count
    return DevicePlan(kind=kind, count=count, batch_per_device=batch_per_device, threads=hardware.pipeline.threads)


def check_capabilities(backend: type[Backend], name: str, workload: WorkloadSpec, hardware: HardwareProfile,
                       plan: DevicePlan) -> None:
    """A one-line error, before the clock starts, for a run the backend says it cannot do."""
    capabilities = backend.capabilities
    if plan.kind not in capabilities.devices:
        raise InputError(f"backend {name!r} does not train on {plan.kind} devices "
                         f"(it declares {', '.join(sorted(capabilities.devices))})")
    if plan.count > capabilities.max_devices:
        raise InputError(f"hardware profile {hardware.name!r} plans {plan.count} {plan.kind} devices, but "
                         f"backend {name!r} trains on at most {capabilities.max_devices}; choose a profile with "
                         f"{capabilities.max_devices} or pass --device cpu")
    if capabilities.process_model == "process_per_device" and plan.count > 1:
        raise InputError(f"backend {name!r} trains one process per device, and benchbase runs one process; "
                         f"choose a profile with one device or pass --device cpu")
    precision = workload.model.precision
    if precision not in capabilities.precisions:
        raise InputError(f"backend {name!r} does not implement precision {precision!r} "
                         f"(it declares {', '.join(sorted(capabilities.precisions))})")
    if precision in GPU_ONLY_PRECISIONS and plan.kind != "cuda":
        raise InputError(f"precision {precision!r} needs a GPU's tensor cores, and this run trains on "
                         f"{plan.kind}; choose fp32, bf16 or int8-emulated, or a GPU profile")


def build_context(config: RunConfig, store: FeatureStore, plan: DevicePlan) -> BuildContext:
    workload = config.workload
    # Every subset the run will feed the backend, the final evaluation's test subsets included.
    # (A missing train or dev subset is an error there; a missing test subset is left out.)
    fed = workload.data.train + workload.data.dev + tuple(subset for subset in workload.data.test
                                                          if store.has(subset))
    longest_frames, longest_labels = store.longest(fed)
    return BuildContext(
        model=workload.model, optimizer=workload.optimizer, feature_dimension=store.feature_dimension, plan=plan,
        seed=config.seed, max_frames=workload.data.pad_to_frames or longest_frames, max_label_length=longest_labels,
    )


def fp32_context(context: BuildContext) -> BuildContext:
    """The same build at fp32: what the final evaluation's FP32 twin of a lower-precision run gets."""
    return dataclasses.replace(context, model=context.model.model_copy(update={"precision": "fp32"}))
