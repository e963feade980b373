"""Running totals over the samples, and the summary that result.json carries under "telemetry"."""

from __future__ import annotations

from dataclasses import dataclass

from benchbase.telemetry.nvml import Gpu

__all__ = ["Series", "Totals"]

# The per-GPU sample fields that the summary averages or peaks.
GPU_FIELDS = ("util", "mem_used_mb", "power_w", "pcie_tx_mb_s", "pcie_rx_mb_s")


@dataclass
class Series:
    """Mean and peak of one sampled quantity; a missing reading (None) is left out of both."""

    total: float = 0.0
    count: int = 0
    peak: float | None = None

    def add(self, value) -> None:
        if not isinstance(value, int | float) or isinstance(value, bool):
            return
        self.total += value
        self.count += 1
        self.peak = value if self.peak is None else max(self.peak, value)

    def mean(self) -> float | None:
        return round(self.total / self.count, 2) if self.count else None

    def highest(self) -> float | None:
        return None if self.peak is None else round(self.peak, 1)


class Totals:
    def __init__(self, gpu_count: int) -> None:
        self.samples = 0
        self.cpu, self.proc_cpu, self.rss_mb, self.gpu = Series(), Series(), Series(), Series()
        self.per_gpu = [{name: Series() for name in GPU_FIELDS} for _ in range(gpu_count)]

    def add(self, record: dict) -> None:
        """Count one sample as the sampler writes it."""
        self.samples += 1
        self.cpu.add(record.get("cpu"))
        self.proc_cpu.add(record.get("proc_cpu"))
        self.rss_mb.add(record.get("rss_mb"))
        readings = record.get("gpus") or []
        for series, reading in zip(self.per_gpu, readings, strict=False):
            for name in GPU_FIELDS:
                series[name].add(reading.get(name))
        utils = [reading["util"] for reading in readings if isinstance(reading.get("util"), int | float)]
        if utils:  # the mean over the run's GPUs, one value per sample
            self.gpu.add(sum(utils) / len(utils))

    def summary(self, *, interval: float, gpus: list[Gpu], gpu_status: str, sampler_cpu_seconds: float,
                sampler_wall_seconds: float, processes_followed: int) -> dict:
        peaks = [series["mem_used_mb"].highest() for series in self.per_gpu]
        summary = {
            "samples": self.samples,
            "interval_ms": interval * 1000,
            "cpu_percent_mean": self.cpu.mean(),
            "proc_cpu_percent_mean": self.proc_cpu.mean(),
            "peak_rss_mb": self.rss_mb.highest(),
            "processes_followed_max": processes_followed,
            "gpu_percent_mean": self.gpu.mean(),
            "peak_gpu_mem_mb": max((peak for peak in peaks if peak is not None), default=None),
            "gpu_status": gpu_status,
            "sampler_cpu_seconds": round(sampler_cpu_seconds, 4),
            "sampler_wall_seconds": round(sampler_wall_seconds, 3),
        }
        if gpus:
            summary["gpus"] = [_gpu_summary(gpu, series) for gpu, series in zip(gpus, self.per_gpu, strict=True)]
        return summary


def _gpu_summary(gpu: Gpu, series: dict[str, Series]) -> dict:
    return {"index": gpu.index, "uuid": gpu.uuid, "name": gpu.name, "util_mean": series["util"].mean(),
            "peak_mem_used_mb": series["mem_used_mb"].highest(), "power_w_mean": series["power_w"].mean(),
            "pcie_tx_mb_s_mean": series["pcie_tx_mb_s"].mean(), "pcie_rx_mb_s_mean": series["pcie_rx_mb_s"].mean()}
