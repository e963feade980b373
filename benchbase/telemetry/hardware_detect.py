"""The machine benchbase runs on, as a hardware profile: `--hw auto` and `benchbase profiles --detect`.

What is measured: the GPUs the run would use (NVML: count, model, memory, the PCIe link's
generation and width, active NVLink links; CUDA_VISIBLE_DEVICES respected), the CPU (model,
sockets, physical cores, hardware threads, top clock) and the host memory (psutil). What is
derived, and stated in the profile's description so nobody mistakes it for a tuned setting:

- GPUs: one device per visible GPU; ``batch_per_device`` = 3 utterances per GB of GPU memory,
  down to a multiple of 8 (the paper's platforms run 24 on 8 GB and 150 on 32 GB: 3 to 4.7 per
  GB for the full DS2 with 1670-frame padding); readers = one per two hardware threads (at most
  16, as the paper's largest platform), buffer = 4 batches per device.
- No GPU: one CPU device of every physical core, batch 32 (ds2-mini's CPU batch), 2 readers,
  a buffer of 4 and a shuffle buffer of 1024 (the ``cpu`` profile's, measured for ds2-mini on
  two cores).

No price is known for a machine found this way; give one (``price.total_usd`` or, for a cloud
machine, ``price.hourly_usd``) in the written YAML to get cost-to-accuracy.
"""

from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

from benchbase.specs import HardwareProfile
from benchbase.telemetry.cpu_features import cpu_model, vector_extensions
from benchbase.telemetry.nvml import open_nvml

__all__ = ["AUTO_PROFILE", "DetectedGpu", "detect_profile", "detected_gpus"]

AUTO_PROFILE = "auto"
UTTERANCES_PER_GB = 3
CPU_GLOBAL_BATCH = 32
MAX_READERS = 16
BYTES_PER_GB = 1e9


@dataclass(frozen=True)
class DetectedGpu:
    name: str
    memory_gb: float
    pcie: str
    """e.g. "PCIe5 x16" (the link's maximum), or "" where NVML does not say."""
    nvlinks: int


def detect_profile(name: str = AUTO_PROFILE) -> HardwareProfile:
    """This machine as a validated hardware profile (see the module text for what is derived)."""
    gpus, gpu_note = detected_gpus()
    cpu = _cpu()
    threads = cpu["threads"]
    if gpus:
        count = len(gpus)
        smallest = min(gpu.memory_gb for gpu in gpus)
        per_device = max(8, int(smallest * UTTERANCES_PER_GB) // 8 * 8)
        devices = {"kind": "gpu", "count": count, "model": gpus[0].name, "memory_gb": round(smallest, 1),
                   "interconnect": _interconnect(gpus)}
        pipeline = {"global_batch": per_device * count, "batch_per_device": per_device,
                    "readers": max(1, min(MAX_READERS, threads // 2)), "buffer": 4 * count}
        derived = (f"batch {per_device} per GPU = {UTTERANCES_PER_GB} utterances per GB of its "
                   f"{smallest:.0f} GB, {pipeline['readers']} readers = threads / 2")
    else:
        devices = {"kind": "cpu", "count": 1, "model": cpu["model"]}
        pipeline = {"global_batch": CPU_GLOBAL_BATCH, "batch_per_device": CPU_GLOBAL_BATCH, "readers": 2,
                    "buffer": 4, "shuffle_buffer": 1024, "threads": cpu["cores"]}
        derived = f"batch {CPU_GLOBAL_BATCH} and {cpu['cores']} compute threads (every physical core) on the CPU"
    when = time.strftime("%Y-%m-%d")
    description = (f"Detected on {socket.gethostname()} on {when}: {_summary(devices, cpu)}. Derived, not tuned: "
                   f"{derived}. {gpu_note}")
    return HardwareProfile.model_validate({
        "name": name, "description": description[:500], "devices": devices,
        "cpu": {key: cpu[key] for key in ("model", "sockets", "cores", "threads", "ghz", "ram_gb",
                                          "vector_extensions")},
        "pipeline": pipeline,
    })


def detected_gpus() -> tuple[list[DetectedGpu], str]:
    """The GPUs a run here would use, and a note on how they were found (or why none were)."""
    nvml, gpus, status = open_nvml(os.environ.get("CUDA_VISIBLE_DEVICES"), os.environ.get("CUDA_DEVICE_ORDER"))
    if nvml is None or not gpus:
        return [], f"No GPU: {status}."
    return [_describe(nvml, gpu.handle, gpu.name) for gpu in gpus], f"GPUs via NVML ({status})."


def _describe(nvml, handle, name: str) -> DetectedGpu:
    memory_gb = nvml.nvmlDeviceGetMemoryInfo(handle).total / BYTES_PER_GB
    try:
        pcie = f"PCIe{nvml.nvmlDeviceGetMaxPcieLinkGeneration(handle)} x{nvml.nvmlDeviceGetMaxPcieLinkWidth(handle)}"
    except Exception:  # noqa: BLE001  (NVML's NotSupported on some boards)
        pcie = ""
    return DetectedGpu(name=name, memory_gb=memory_gb, pcie=pcie, nvlinks=_active_nvlinks(nvml, handle))


def _active_nvlinks(nvml, handle) -> int:
    active = 0
    for link in range(getattr(nvml, "NVML_NVLINK_MAX_LINKS", 18)):
        try:
            active += int(nvml.nvmlDeviceGetNvLinkState(handle, link) == 1)
        except Exception:  # noqa: BLE001  (no such link, or no NVLink at all)
            break
    return active


def _interconnect(gpus: list[DetectedGpu]) -> str:
    links = {gpu.pcie for gpu in gpus if gpu.pcie}
    text = ", ".join(sorted(links)) if links else "PCIe (link not reported)"
    nvlinks = min(gpu.nvlinks for gpu in gpus)
    return f"{text}; NVLink: {nvlinks} active link(s) per GPU" if nvlinks else f"{text}; no NVLink"


def _cpu() -> dict:
    threads = psutil.cpu_count(logical=True) or 1
    cores = psutil.cpu_count(logical=False) or threads
    frequency = psutil.cpu_freq()
    # The highest clock the OS reports; a VM without cpufreq reports only the nominal one
    # (/proc/cpuinfo's "cpu MHz"), which is what its peak FLOP estimate can go on.
    megahertz = frequency and (frequency.max or frequency.current)
    ghz = round(megahertz / 1000, 2) if megahertz else None
    return {"model": cpu_model(), "sockets": _sockets(), "cores": cores, "threads": threads, "ghz": ghz,
            "ram_gb": round(psutil.virtual_memory().total / BYTES_PER_GB, 1), "vector_extensions": vector_extensions()}


def _sockets() -> int:
    info = Path("/proc/cpuinfo")
    if not info.is_file():
        return 1
    ids = {line.partition(":")[2].strip() for line in info.read_text(errors="replace").splitlines()
           if line.startswith("physical id")}
    return max(1, min(16, len(ids)))


def _summary(devices: dict, cpu: dict) -> str:
    gpu = f"{devices['count']}x {devices['model']}, " if devices["kind"] == "gpu" else ""
    extensions = ", ".join(cpu["vector_extensions"]) or "vector extensions unknown"
    return (f"{gpu}{cpu['model']} ({cpu['sockets']} socket(s), {cpu['cores']} cores, {cpu['threads']} threads; "
            f"{extensions}), {cpu['ram_gb']:g} GB RAM")
