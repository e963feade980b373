"""Per-batch timing statistics of a run: throughput, data wait and the CPU cores training used."""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from benchbase.run_folder import read_json_lines

__all__ = ["THREAD_BUDGET_ALLOWANCE", "TrainingStatistics"]

THREAD_BUDGET_ALLOWANCE = 0.25
"""Cores allowed above a backend's thread budget: the harness's own reader threads keep
filling the prefetch buffer during a step (ds2-mini's readers use a few percent of a core)."""


@dataclass
class TrainingStatistics:
    throughputs: list[float] = field(default_factory=list)
    data_waits: list[float] = field(default_factory=list)
    step_seconds: list[float] = field(default_factory=list)
    step_cpu_seconds: float = 0.0
    communication_seconds: list[float] = field(default_factory=list)
    """Per batch, the backend's measured gradient all-reduce time (step_timings), where it measures one."""
    stage_seconds: dict[str, float] = field(default_factory=dict)
    """The backend's step phases (``STEP_STAGES``), summed over the batches that reported them."""
    staged_steps: int = 0
    """Batches whose backend reported at least one phase."""
    evaluation_seconds: float = 0.0
    checkpoint_seconds: float = 0.0
    flops_padded: int = 0
    """Training FLOPs of the padded batches, by the family's cost model (0: it has none)."""
    flops_valid: int = 0
    """Training FLOPs of the same batches' valid frames and labels alone."""

    @classmethod
    def from_metrics(cls, metrics: Path, step_cpu_seconds: float) -> TrainingStatistics:
        """The statistics of the batches metrics.jsonl records (a resumed run's first segment)."""
        statistics = cls(step_cpu_seconds=step_cpu_seconds)
        for record in read_json_lines(metrics):
            if record.get("kind") == "eval":
                statistics.evaluation_seconds += record.get("eval_s", 0.0)
            if record.get("kind") == "checkpoint":
                statistics.checkpoint_seconds += record.get("checkpoint_s", 0.0)
            if record.get("kind") != "batch":
                continue
            statistics.record_stages(record.get("stages") or {})
            statistics.throughputs.append(record["throughput"])
            statistics.data_waits.append(record["wait_s"])
            statistics.step_seconds.append(record["step_s"])
            statistics.record_communication(record.get("comm_s"))
            statistics.record_flops(record.get("flops_padded", 0), record.get("flops_valid", 0))
        return statistics

    def record(self, utterances: int, wait: float, step: float, cpu: float) -> float:
        """One batch: wait and step in wall seconds, cpu in process CPU seconds; returns its throughput."""
        throughput = utterances / (wait + step)
        self.throughputs.append(throughput)
        self.data_waits.append(wait)
        self.step_seconds.append(step)
        self.step_cpu_seconds += cpu
        return throughput

    def record_communication(self, seconds: float | None) -> None:
        if seconds is not None:
            self.communication_seconds.append(float(seconds))

    def record_flops(self, padded: int, valid: int) -> None:
        self.flops_padded += int(padded)
        self.flops_valid += int(valid)

    def record_stages(self, stages: Mapping[str, float]) -> None:
        """One batch's step phases, as the backend timed them (none: it reports no split)."""
        if not stages:
            return
        self.staged_steps += 1
        for stage, seconds in stages.items():
            self.stage_seconds[stage] = self.stage_seconds.get(stage, 0.0) + float(seconds)

    def step_breakdown(self) -> dict[str, float]:
        """Where the steps' time went: data wait and step time (the harness's clock), and of the step
        time, the gradient communication the backend measured (it may overlap the backward pass)."""
        if not self.step_seconds:
            return {}
        waiting, stepping = sum(self.data_waits), sum(self.step_seconds)
        breakdown = {"data_wait_s": round(waiting, 3), "step_s": round(stepping, 3)}
        if self.communication_seconds:
            communicating = sum(self.communication_seconds)
            breakdown |= {"communication_s": round(communicating, 3),
                          "communication_share_of_step": round(communicating / stepping, 4),
                          "communication_median_s": round(statistics.median(self.communication_seconds), 5)}
        return breakdown

    def throughput(self) -> dict[str, float]:
        if not self.throughputs:
            return {}
        return {"median": round(statistics.median(self.throughputs), 3),
                "mean": round(statistics.fmean(self.throughputs), 3)}

    def data_wait(self) -> dict[str, float]:
        if not self.data_waits:
            return {}
        waiting = sum(self.data_waits)
        return {"median_s": round(statistics.median(self.data_waits), 5), "total_s": round(waiting, 3),
                "share_of_step_time": round(waiting / (waiting + sum(self.step_seconds)), 5)}

    def cpu_cores_in_steps(self) -> float:
        """Process CPU time over wall time, summed over every train_step: the cores training kept busy."""
        wall = sum(self.step_seconds)
        return round(self.step_cpu_seconds / wall, 3) if wall else 0.0
