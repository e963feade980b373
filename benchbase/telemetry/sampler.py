"""Utilization sampling in a separate process: CPU every 30 ms (psutil) and, where NVML is
present, each GPU's utilization, memory and power (pynvml). Without a GPU or the NVIDIA
driver, the GPU part is skipped and says why.

A process, not a thread: a thread that wakes every 30 ms must take the GIL from the
training loop each time, and those hand-offs slowed training measurably. The sampler's own
cost (its process's CPU time) is measured and reported with its summary.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import time
from pathlib import Path
from typing import IO

import psutil

from benchbase.process_guard import end_with_parent, parent_is_gone

__all__ = ["TelemetrySampler", "open_nvml"]

SUMMARY_SUFFIX = ".summary.json"


def open_nvml():
    """(pynvml module, device handles) or (None, reason) when no GPU can be read."""
    try:
        import pynvml
    except ImportError:
        return None, "pynvml is not installed"
    try:
        pynvml.nvmlInit()
        count = pynvml.nvmlDeviceGetCount()
    except Exception as error:  # NVMLError_LibraryNotFound and friends: no driver, no GPU
        return None, f"NVML unavailable: {error}"
    if count == 0:
        return None, "NVML found no GPU"
    return pynvml, [pynvml.nvmlDeviceGetHandleByIndex(index) for index in range(count)]


class TelemetrySampler:
    """Writes one JSON line per sample to ``path``: t (run-clock s), cpu (%), cores, gpus."""

    def __init__(self, path: Path, clock_origin: float, interval: float = 0.030) -> None:
        """``clock_origin``: time.perf_counter() at run_start (CLOCK_MONOTONIC, shared by processes)."""
        self.path = path
        self.clock_origin = clock_origin
        self.interval = interval
        context = multiprocessing.get_context("spawn")
        self._stop = context.Event()
        self._process = context.Process(target=_sample_until_stopped, name="benchbase-telemetry", daemon=True,
                                        args=(path, clock_origin, interval, self._stop, os.getpid()))

    def start(self) -> None:
        self._process.start()

    def stop(self) -> dict:
        """Stop sampling and return the summary (means, sample count, the sampler's own cost)."""
        self._stop.set()
        self._process.join(timeout=30)
        if self._process.is_alive():  # never leave a sampler behind, even a stuck one
            self._process.terminate()
            self._process.join(timeout=5)
        summary_file = self.path.with_name(self.path.name + SUMMARY_SUFFIX)
        try:
            summary = json.loads(summary_file.read_text(encoding="utf-8"))
            summary_file.unlink()
        except (OSError, ValueError):
            summary = {"samples": 0, "gpu_status": f"sampler process ended with code {self._process.exitcode}"}
        return summary


def _sample_until_stopped(path: Path, clock_origin: float, interval: float, stop, parent_pid: int) -> None:
    end_with_parent(parent_pid)  # a killed run must not leave a sampler appending forever
    started = time.process_time()
    nvml, handles = open_nvml()
    totals = {"samples": 0, "cpu": 0.0, "gpu_samples": 0, "gpu": 0.0}
    psutil.cpu_percent(percpu=True)  # the first call only sets the baseline
    gpu_status = f"{len(handles)} GPU(s) via NVML" if nvml else handles
    try:
        with open(path, "a", encoding="utf-8") as sink:
            while not stop.wait(interval) and not parent_is_gone(parent_pid):
                _sample(sink, clock_origin, nvml, handles if nvml else [], totals)
    except OSError as error:
        # A full disk or a vanished folder ends sampling; the run reports the missing samples.
        gpu_status = f"{gpu_status}; sampling stopped: {error.strerror or error}"
    summary = _summary(totals, interval, gpu_status, time.process_time() - started)
    try:
        path.with_name(path.name + SUMMARY_SUFFIX).write_text(json.dumps(summary), encoding="utf-8")
    except OSError:
        pass  # the parent then reports the sampler's summary as missing


def _sample(sink: IO[str], clock_origin: float, nvml, handles, totals: dict) -> None:
    cores = psutil.cpu_percent(percpu=True)
    cpu = sum(cores) / len(cores)
    record = {"t": round(time.perf_counter() - clock_origin, 4), "cpu": round(cpu, 1), "cores": cores}
    if handles:
        record["gpus"] = [_read_gpu(nvml, handle) for handle in handles]
        totals["gpu"] += sum(gpu["util"] for gpu in record["gpus"]) / len(handles)
        totals["gpu_samples"] += 1
    sink.write(json.dumps(record) + "\n")
    totals["cpu"] += cpu
    totals["samples"] += 1


def _summary(totals: dict, interval: float, gpu_status: str, cpu_seconds: float) -> dict:
    samples, gpu_samples = totals["samples"], totals["gpu_samples"]
    return {
        "samples": samples,
        "interval_ms": interval * 1000,
        "cpu_percent_mean": round(totals["cpu"] / samples, 2) if samples else None,
        "gpu_percent_mean": round(totals["gpu"] / gpu_samples, 2) if gpu_samples else None,
        "gpu_status": gpu_status,
        "sampler_cpu_seconds": round(cpu_seconds, 4),
    }


def _read_gpu(nvml, handle) -> dict:
    utilization = nvml.nvmlDeviceGetUtilizationRates(handle)
    memory = nvml.nvmlDeviceGetMemoryInfo(handle)
    try:
        power_watts = nvml.nvmlDeviceGetPowerUsage(handle) / 1000.0
    except Exception:  # some boards do not report power
        power_watts = None
    return {"util": utilization.gpu, "mem_util": utilization.memory, "mem_used_mb": memory.used / 2**20,
            "power_w": power_watts}
