"""Error rates and the time-to-accuracy rule."""

from __future__ import annotations

from benchbase.metrics.error_rates import ErrorRates, error_rates
from benchbase.metrics.tta import TargetTracker

__all__ = ["ErrorRates", "TargetTracker", "error_rates"]
