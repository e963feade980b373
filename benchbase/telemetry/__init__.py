"""Background utilization sampling (psutil; NVML where a GPU is present)."""

from __future__ import annotations

from benchbase.telemetry.sampler import TelemetrySampler

__all__ = ["TelemetrySampler"]
