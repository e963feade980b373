"""Background utilization sampling (psutil; NVML where a GPU is present)."""

from __future__ import annotations

from benchbase.telemetry.gpu_selection import select_gpus
from benchbase.telemetry.sampler import TelemetrySampler

__all__ = ["TelemetrySampler", "select_gpus"]
