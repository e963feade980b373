"""The one training throughput the report states, for its table and its figures alike.

Each run's number is the median of its per-batch throughputs (metrics.jsonl) after the first
WARMUP_BATCHES batches, which carry compilation and cache warm-up; a run stored without its
batch records (a results database whose source folder is gone) gives result.json's median
instead. A group's number is the median of its runs' numbers, shown at THROUGHPUT_DIGITS
decimals by the table and by the figure's bar labels.
"""

from __future__ import annotations

import math
import statistics

from benchbase.report.report_table import format_cell
from benchbase.report.runs import Run, RunGroup

__all__ = ["THROUGHPUT_DIGITS", "WARMUP_BATCHES", "group_throughput", "run_throughput", "throughput_text"]

WARMUP_BATCHES = 5  # the first batches carry compilation and cache warm-up, not steady-state speed
THROUGHPUT_DIGITS = 2


def run_throughput(run: Run) -> float | None:
    """The run's median per-batch throughput after warm-up (utterances per second)."""
    batches = run.batches
    steady = batches[WARMUP_BATCHES:] or batches  # a run shorter than warm-up still has a number to show
    values = [value for batch in steady if _rate(value := batch.get("throughput"))]
    if values:
        return statistics.median(values)
    recorded = run.result.throughput.get("median")
    return float(recorded) if _rate(recorded) else None


def group_throughput(group: RunGroup) -> float | None:
    """The median over the group's runs of each run's throughput (run_throughput)."""
    medians = [median for run in group.runs if (median := run_throughput(run)) is not None]
    return statistics.median(medians) if medians else None


def throughput_text(value: float | None) -> str:
    """A throughput as the table prints it (NA where there is none)."""
    return format_cell(value, THROUGHPUT_DIGITS)


def _rate(value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) and value > 0
