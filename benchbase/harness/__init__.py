"""The harness: owns the clock, the data order, decoding, metrics, TTA and the logs."""

from __future__ import annotations

from benchbase.harness.events import BatchProgress, Evaluation, RunResult
from benchbase.harness.runner import Harness, run_benchmark

__all__ = ["BatchProgress", "Evaluation", "Harness", "RunResult", "run_benchmark"]
