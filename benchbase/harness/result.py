"""result.json assembled from what the finished run measured."""

from __future__ import annotations

from dataclasses import dataclass

from benchbase.backend import DevicePlan
from benchbase.harness.compute import compute_record
from benchbase.harness.devices import plan_record, thread_budget
from benchbase.harness.lifecycle import TimedRun
from benchbase.harness.progress import TrainingProgress
from benchbase.harness.statistics import THREAD_BUDGET_ALLOWANCE
from benchbase.harness.time_breakdown import time_breakdown
from benchbase.metrics import TargetTracker
from benchbase.specs import RunConfig, RunResult, TTARule
from benchbase.telemetry.peak_flops import device_peak

__all__ = ["Footprint", "run_result", "time_to_accuracy"]


@dataclass(frozen=True)
class Footprint:
    """What the backend reported about itself: the devices every rank took after build(), and
    after training, before it closes, its own description and size."""

    devices: list[str]
    device_description: str
    parameter_count: int


def run_result(config: RunConfig, environment: dict, plan: DevicePlan, timed: TimedRun, progress: TrainingProgress,
               footprint: Footprint, *, epochs: int, init_seconds: float, run_seconds: float,
               final_evaluation: dict | None) -> RunResult:
    statistics, last = progress.statistics, progress.last_evaluation
    cores, budget = statistics.cpu_cores_in_steps(), thread_budget(plan)
    return RunResult(
        status=timed.status, stop_reason=str(timed.reason), workload=config.workload.name,
        backend=config.backend, hardware=config.hardware.name, seed=config.seed,
        tta=time_to_accuracy(progress.tracker, config.workload.tta),
        epochs=epochs, batches=progress.batch_index, train_samples=progress.train_samples,
        run_seconds=round(run_seconds, 3), init_seconds=round(init_seconds, 3),
        parameter_count=footprint.parameter_count,
        throughput=statistics.throughput(), data_wait=statistics.data_wait(),
        last_evaluation=None if last is None else {"epoch": last.epoch, "subset": last.subset,
                                                   **last.subsets[last.subset], "subsets": last.subsets},
        final_evaluation=final_evaluation,
        telemetry=timed.telemetry, device=footprint.device_description,
        devices=footprint.devices, world_size=plan.world_size, resumes=progress.resumes, division=config.division,
        device_plan=plan_record(plan, config.hardware), step_breakdown=statistics.step_breakdown(),
        time_breakdown=time_breakdown(statistics, run_seconds),
        # The run time result.json states, so that its MFU is re-derivable from the file alone.
        compute=compute_record(statistics.flops_padded, statistics.flops_valid, round(run_seconds, 3),
                               device_peak(config.hardware, config.workload.model.precision)),
        environment=environment,
        cpu={"cores_in_steps": cores, "thread_budget": budget,
             "within_budget": cores <= budget + THREAD_BUDGET_ALLOWANCE, **environment["cpu"]},
    )


def time_to_accuracy(tracker: TargetTracker, rule: TTARule) -> dict[str, dict | None]:
    """Each target's run-clock time and epoch when first reached; None for one never reached."""
    tta: dict[str, dict | None] = {}
    for target in rule.targets:
        seconds = tracker.reached.get(target.label)
        tta[target.label] = None if seconds is None else {
            "seconds": round(seconds, 3), "minutes": round(seconds / 60, 4),
            "epoch": tracker.reached_epoch[target.label],
        }
    return tta
