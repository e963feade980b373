"""A background thread sampling CPU utilization every 30 ms (psutil) and, where NVML is
present, each GPU's utilization, memory and power (pynvml). Without a GPU or the NVIDIA
driver, the GPU part is skipped and says why.

The sampler measures its own cost (thread CPU time) so that a report can state what the
measurement took from the run.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import IO

import psutil

__all__ = ["TelemetrySampler", "open_nvml"]


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
    """Writes one JSON line per sample to ``path``: t (run-clock s), cpu (%), per-core, gpus."""

    def __init__(self, path: Path, clock, interval: float = 0.030, per_core: bool = True) -> None:
        self.path = path
        self.clock = clock
        self.interval = interval
        self.per_core = per_core
        self.samples = 0
        self.thread_cpu_seconds = 0.0
        self.gpu_status = "not started"
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._cpu_total = 0.0
        self._gpu_util_total = 0.0
        self._gpu_samples = 0

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="benchbase-telemetry", daemon=True)
        self._thread.start()

    def stop(self) -> dict:
        """Stop sampling and return a summary (means, sample count, the sampler's own cost)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        return self.summary()

    def summary(self) -> dict:
        return {
            "samples": self.samples,
            "interval_ms": self.interval * 1000,
            "cpu_percent_mean": round(self._cpu_total / self.samples, 2) if self.samples else None,
            "gpu_percent_mean": round(self._gpu_util_total / self._gpu_samples, 2) if self._gpu_samples else None,
            "gpu_status": self.gpu_status,
            "sampler_cpu_seconds": round(self.thread_cpu_seconds, 4),
        }

    def _run(self) -> None:
        started = time.thread_time()
        nvml, handles = open_nvml()
        self.gpu_status = f"{len(handles)} GPU(s) via NVML" if nvml else handles
        psutil.cpu_percent(percpu=True)  # the first call only sets the baseline
        with open(self.path, "a", encoding="utf-8") as sink:
            while not self._stop.wait(self.interval):
                self._sample(sink, nvml, handles if nvml else [])
        self.thread_cpu_seconds = time.thread_time() - started

    def _sample(self, sink: IO[str], nvml, handles) -> None:
        cores = psutil.cpu_percent(percpu=True)
        cpu = sum(cores) / len(cores)
        record = {"t": round(self.clock.seconds(), 4), "cpu": round(cpu, 1)}
        if self.per_core:
            record["cores"] = cores
        if handles:
            record["gpus"] = [_read_gpu(nvml, handle) for handle in handles]
            self._gpu_util_total += sum(gpu["util"] for gpu in record["gpus"]) / len(handles)
            self._gpu_samples += 1
        sink.write(json.dumps(record) + "\n")
        self._cpu_total += cpu
        self.samples += 1


def _read_gpu(nvml, handle) -> dict:
    utilization = nvml.nvmlDeviceGetUtilizationRates(handle)
    memory = nvml.nvmlDeviceGetMemoryInfo(handle)
    try:
        power_watts = nvml.nvmlDeviceGetPowerUsage(handle) / 1000.0
    except Exception:  # some boards do not report power
        power_watts = None
    return {"util": utilization.gpu, "mem_util": utilization.memory, "mem_used_mb": memory.used / 2**20,
            "power_w": power_watts}
