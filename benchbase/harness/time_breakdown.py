"""Where a run's wall time went: the harness's own intervals and the backend's step phases, as
seconds and as fractions of the run clock that add up to one (what none of them covers is "other")."""

from __future__ import annotations

from benchbase.harness.statistics import TrainingStatistics
from benchbase.specs.result import STAGES_NOT_REPORTED, STEP_STAGES

__all__ = ["time_breakdown"]


def time_breakdown(statistics: TrainingStatistics, wall_seconds: float) -> dict:
    """``wall_s``, ``seconds`` and ``fractions`` per part (``TIME_PARTS``), and ``stages``: "reported",
    "reported on N of M steps" or ``STAGES_NOT_REPORTED``. Empty before any step was timed."""
    if not statistics.step_seconds or wall_seconds <= 0:
        return {}
    stepping = sum(statistics.step_seconds)
    stages = {stage: statistics.stage_seconds.get(stage, 0.0) for stage in STEP_STAGES}
    # Timers of the phases of one step never add to more than it; rounding could, by microseconds.
    split = min(sum(stages.values()), stepping)
    seconds = {"data_wait": sum(statistics.data_waits), **stages, "step": stepping - split,
               "evaluation": statistics.evaluation_seconds, "checkpoint": statistics.checkpoint_seconds}
    seconds["other"] = max(wall_seconds - sum(seconds.values()), 0.0)
    total = max(wall_seconds, sum(seconds.values()))  # parts over the wall by a timer's error: still one
    return {"wall_s": round(wall_seconds, 3), "stages": _stages_reported(statistics),
            "seconds": {part: round(value, 4) for part, value in seconds.items()},
            "fractions": {part: round(value / total, 5) for part, value in seconds.items()}}


def _stages_reported(statistics: TrainingStatistics) -> str:
    steps = len(statistics.step_seconds)
    if statistics.staged_steps == 0:
        return STAGES_NOT_REPORTED
    if statistics.staged_steps >= steps:
        return "reported"
    return f"reported on {statistics.staged_steps} of {steps} steps"
