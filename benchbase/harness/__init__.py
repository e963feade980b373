"""The harness: owns the clock, the data order, decoding, metrics, TTA and the logs."""

from __future__ import annotations

from benchbase.harness.hook_payloads import BatchProgress, Evaluation
from benchbase.harness.runner import Harness, run_benchmark
from benchbase.specs import RunResult

__all__ = ["BatchProgress", "Evaluation", "Harness", "RunResult", "run_benchmark"]
