"""A device's dense peak FLOP rate per precision: what MFU divides by.

Three sources, in this order: the hardware profile's own ``devices.dense_peak_tflops``; a table
of known GPUs' published dense (not 2:4-sparse) peaks, matched on the device's model name (a
profile's, or NVML's under ``--hw auto``); for a CPU, an estimate from its cores, clock and vector
width (cores x GHz x ``FMA_UNITS`` x lanes x 2, where a fused multiply-add is 2 FLOPs). Anything
else is "not known": a run's MFU is then not known either, never a guess.

A precision computes where the GPU does it: fp32 on the CUDA cores (no TF32), tf32, bf16 and
fp16 on the tensor cores with float32 accumulation, int8-emulated in float32 (fake-quantized
values, float32 arithmetic).
"""

from __future__ import annotations

from dataclasses import dataclass

from benchbase.specs import HardwareProfile

__all__ = ["FMA_UNITS", "KNOWN_GPUS", "NOT_KNOWN", "DevicePeak", "KnownGpu", "cpu_estimate", "device_peak",
           "known_gpu"]

TERA = 1e12
FMA_UNITS = 2
"""Vector FMA units per core: two on every Intel core since Haswell and AMD's since Zen 2 (one on
some AVX-512 parts, which the estimate then overstates by half)."""
NOT_KNOWN = "not known"
COMPUTES_AS = {"int8-emulated": "fp32"}
"""A precision whose arithmetic is another's."""


@dataclass(frozen=True)
class KnownGpu:
    """A GPU's published dense peaks in TFLOPS per precision (a precision it lacks is absent)."""

    name: str
    matches: tuple[str, ...]
    """Lower-case fragments that must all be in the model name."""
    tflops: dict[str, float]
    excluding: tuple[str, ...] = ()
    """Fragments of a variant with other peaks (a "Super", an "NVL")."""


KNOWN_GPUS: tuple[KnownGpu, ...] = (
    KnownGpu("NVIDIA H200 SXM", ("h200",), {"fp32": 67.0, "tf32": 494.7, "bf16": 989.4, "fp16": 989.4}, ("nvl",)),
    KnownGpu("NVIDIA H100 PCIe", ("h100", "pcie"), {"fp32": 51.2, "tf32": 378.0, "bf16": 756.0, "fp16": 756.0}),
    KnownGpu("NVIDIA H100 SXM", ("h100",), {"fp32": 67.0, "tf32": 494.7, "bf16": 989.4, "fp16": 989.4}, ("nvl",)),
    # The A100's PCIe and SXM boards have the same peaks.
    KnownGpu("NVIDIA A100", ("a100",), {"fp32": 19.5, "tf32": 156.0, "bf16": 312.0, "fp16": 312.0}),
    KnownGpu("NVIDIA Tesla V100 SXM2", ("v100", "sxm"), {"fp32": 15.7, "fp16": 125.0}),
    # A V100 whose name does not say SXM2 is taken for the PCIe board, the lower peaks (sys10's attaches through PCIe).
    KnownGpu("NVIDIA Tesla V100 PCIe", ("v100",), {"fp32": 14.0, "fp16": 112.0}),
    # GeForce Turing runs fp16 tensor cores with float32 accumulation (training's) at half their fp16-accumulate rate.
    KnownGpu("NVIDIA GeForce RTX 2070", ("rtx 2070",), {"fp32": 7.5, "fp16": 29.9}, ("super",)),
    # Pascal's GP102 runs fp16 at 1/64 of its fp32 rate.
    KnownGpu("NVIDIA GeForce GTX 1080 Ti", ("1080 ti",), {"fp32": 11.3, "fp16": 0.177}),
)


@dataclass(frozen=True)
class DevicePeak:
    """The whole run's dense peak: every device's peak times the device count."""

    flops_per_second: float | None
    """None: not known."""
    source: str
    """Where the number comes from, or why it is not known, in one line."""


def device_peak(profile: HardwareProfile, precision: str) -> DevicePeak:
    """The dense peak of ``profile``'s devices in ``precision`` (see the module text for the sources)."""
    computes = COMPUTES_AS.get(precision, precision)
    devices = profile.devices
    declared = devices.dense_peak_tflops.get(computes)
    if declared is not None:
        return _all_devices(declared * TERA, devices.count, f"the profile's dense_peak_tflops.{computes}")
    if devices.kind == "cpu":
        return cpu_estimate(profile, computes)
    known = known_gpu(devices.model)
    if known is None:
        return DevicePeak(None, f"{NOT_KNOWN}: no published peak for {devices.model!r} (declare "
                                "devices.dense_peak_tflops in the profile)")
    if computes not in known.tflops:
        return DevicePeak(None, f"{NOT_KNOWN}: the {known.name} has no {computes} peak")
    return _all_devices(known.tflops[computes] * TERA, devices.count, f"published dense {computes} peak of the "
                        f"{known.name}")


def known_gpu(model: str) -> KnownGpu | None:
    """The first table entry whose fragments are all in ``model`` and none of its exclusions."""
    name = model.lower()
    for gpu in KNOWN_GPUS:
        if all(part in name for part in gpu.matches) and not any(part in name for part in gpu.excluding):
            return gpu
    return None


def cpu_estimate(profile: HardwareProfile, precision: str) -> DevicePeak:
    """Cores x GHz x ``FMA_UNITS`` x lanes x 2 over the cores a run may use (the profile's thread
    budget where it sets one), lanes from the widest vector extension; bf16 counts twice fp32's
    lanes with AVX-512 BF16 and is not estimated with AMX (its tiles are not vector lanes)."""
    cpu, extensions = profile.cpu, set(profile.cpu.vector_extensions)
    if cpu.ghz is None or not extensions:
        return DevicePeak(None, f"{NOT_KNOWN}: the profile's CPU states no clock (cpu.ghz) or vector extensions "
                                "to estimate it from")
    if precision == "bf16" and "AMX" in extensions:
        return DevicePeak(None, f"{NOT_KNOWN}: bf16 on AMX is not estimated from vector lanes")
    lanes = 16 if "AVX-512" in extensions else 8 if "AVX2" in extensions else 4
    if precision == "bf16" and "AVX-512 BF16" in extensions:
        lanes *= 2
    cores = min(cpu.cores, profile.pipeline.threads or cpu.cores)
    flops = cores * cpu.ghz * 1e9 * FMA_UNITS * lanes * 2
    return DevicePeak(flops, f"estimate: {cores} cores x {cpu.ghz:g} GHz x {FMA_UNITS} FMA units x {lanes} "
                             f"{precision} lanes x 2")


def _all_devices(per_device: float, count: int, source: str) -> DevicePeak:
    return DevicePeak(per_device * count, source if count == 1 else f"{count} x {source}")
