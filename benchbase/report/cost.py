"""Beyond the paper: what reaching a target costs, in dollars and in energy.

Cost-to-accuracy = an hourly price x TTA. The hourly price is stated on the command line, or
the hardware profile's rental price per hour (a cloud machine, as DAWNBench reports cost), or
its purchase price amortized over a stated lifetime of round-the-clock use. Energy-to-accuracy
integrates the GPUs' power draw that NVML reported (telemetry.jsonl) from the start of the run
clock to TTA; it covers the GPUs only, and is absent where NVML gave no power (no GPU, or a
board that does not report it).
"""

from __future__ import annotations

from dataclasses import dataclass

from benchbase.specs.numbers import is_number

__all__ = ["CostModel", "energy_kwh", "gpu_power_watts"]

HOURS_PER_YEAR = 365 * 24
JOULES_PER_KWH = 3.6e6


@dataclass(frozen=True)
class CostModel:
    lifetime_years: float = 3.0
    price_per_hour: float | None = None
    """When given, used for every run instead of the amortized hardware price."""

    def hourly(self, hardware: dict) -> float | None:
        """The stated price per hour, else the profile's rental price, else its purchase price amortized."""
        if self.price_per_hour is not None:
            return self.price_per_hour
        price = hardware.get("price") or {}
        if is_number(price.get("hourly_usd")):
            return price["hourly_usd"]
        total = price.get("total_usd")
        return total / (self.lifetime_years * HOURS_PER_YEAR) if is_number(total) else None

    def cost(self, hardware: dict, seconds: float | None) -> float | None:
        hourly = self.hourly(hardware)
        return None if hourly is None or seconds is None else hourly * seconds / 3600

    def describe(self) -> str:
        if self.price_per_hour is not None:
            return f"${self.price_per_hour:g} per hour"
        return (f"the profile's rental price per hour where it states one (DAWNBench's measure), else its purchase "
                f"price amortized over {self.lifetime_years:g} years of continuous use")


def gpu_power_watts(sample: dict) -> float | None:
    """Total power of every GPU in one telemetry sample, or None without a reading."""
    readings = [gpu.get("power_w") for gpu in sample.get("gpus") or [] if isinstance(gpu, dict)]
    readings = [watts for watts in readings if is_number(watts)]
    return sum(readings) if readings else None


def energy_kwh(telemetry: list[dict], until_seconds: float | None) -> float | None:
    """GPU energy from the start of the run clock to until_seconds (trapezoids), in kWh."""
    if until_seconds is None:
        return None
    points = [(sample["t"], watts) for sample in telemetry
              if is_number(sample.get("t")) and (watts := gpu_power_watts(sample)) is not None]
    points = [(t, watts) for t, watts in points if t <= until_seconds]
    if len(points) < 2:
        return None
    joules = sum((t1 - t0) * (w0 + w1) / 2 for (t0, w0), (t1, w1) in zip(points, points[1:]))
    return joules / JOULES_PER_KWH
