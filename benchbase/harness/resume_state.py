"""The harness's state in a checkpoint's sidecar: enough, beside the backend's own file, to go on exactly.

The sidecar's JSON is a format: runs written by earlier versions resume, so ``to_dict`` writes
the keys in the order they have always had, and ``from_dict`` reads a sidecar written before
resumes were counted.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

from benchbase.harness.hook_payloads import Evaluation
from benchbase.metrics import TargetTracker
from benchbase.specs import TTARule

__all__ = ["ResumeState", "TrackerState"]

# The hook payload's fields in their order before its rates moved into SubsetScore; sidecars keep it.
_EVALUATION_ORDER = ("epoch", "seconds", "subset", "wer", "cer", "paper_cer", "loss", "utterances", "eval_seconds",
                     "reached", "targets", "subsets")


@dataclass(frozen=True)
class TrackerState:
    """A TargetTracker's memory: every evaluation's rates and when each target was reached."""

    history: dict[str, list[float]]
    reached: dict[str, float]
    reached_epoch: dict[str, int]

    @classmethod
    def of(cls, tracker: TargetTracker) -> TrackerState:
        return cls({metric: list(values) for metric, values in tracker.history.items()}, dict(tracker.reached),
                   dict(tracker.reached_epoch))

    def tracker(self, rule: TTARule) -> TargetTracker:
        """A tracker of ``rule`` that goes on from this state."""
        return TargetTracker(rule, self.history, self.reached, self.reached_epoch)


@dataclass(frozen=True)
class ResumeState:
    """Where the run stood after a batch: the fields are the sidecar's keys, in their order."""

    batch_index: int
    epoch: int
    batches_done_in_epoch: int
    """(epoch, batches_done_in_epoch): where training goes on."""
    train_samples: int
    clock_s: float
    """Run-clock seconds at the checkpoint, rounded to 0.1 ms."""
    step_cpu_seconds: float
    tracker: TrackerState
    last_evaluation: Evaluation | None
    resumes: list[dict]
    """Every resume of the run so far, as result.json lists them."""

    def to_dict(self) -> dict[str, Any]:
        record = {field.name: getattr(self, field.name) for field in fields(self)}
        record["tracker"] = asdict(self.tracker)
        record["last_evaluation"] = None if self.last_evaluation is None else _evaluation_record(self.last_evaluation)
        return record

    @classmethod
    def from_dict(cls, record: dict[str, Any]) -> ResumeState:
        evaluation = record["last_evaluation"]
        return cls(batch_index=int(record["batch_index"]), epoch=int(record["epoch"]),
                   batches_done_in_epoch=int(record["batches_done_in_epoch"]),
                   train_samples=int(record["train_samples"]), clock_s=record["clock_s"],
                   step_cpu_seconds=record["step_cpu_seconds"], tracker=TrackerState(**record["tracker"]),
                   last_evaluation=None if evaluation is None else Evaluation(
                       **{**evaluation, "targets": tuple(evaluation["targets"])}),
                   resumes=list(record.get("resumes", [])))


def _evaluation_record(evaluation: Evaluation) -> dict[str, Any]:
    record = asdict(evaluation)
    return {name: record[name] for name in _EVALUATION_ORDER}
