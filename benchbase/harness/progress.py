"""Where training stands: the counters the loop advances, and their state in a checkpoint's sidecar."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from benchbase.harness.hook_payloads import Evaluation
from benchbase.harness.resume_state import ResumeState, TrackerState
from benchbase.harness.statistics import TrainingStatistics
from benchbase.metrics import TargetTracker
from benchbase.specs import TTARule

__all__ = ["TrainingProgress"]


@dataclass
class TrainingProgress:
    """The counters the loop advances after each batch and evaluation; a fresh run starts from
    ``TrainingProgress(TargetTracker(rule))``."""

    tracker: TargetTracker
    statistics: TrainingStatistics = field(default_factory=TrainingStatistics)
    batch_index: int = 0
    """Batches trained in the whole run."""
    train_samples: int = 0
    position: tuple[int, int] = (1, 0)
    """(epoch, batches done in it) after the last batch: where a checkpoint resumes."""
    last_evaluation: Evaluation | None = None
    resumes: list[dict] = field(default_factory=list)
    """Every resume of the run so far, as result.json lists them."""

    @classmethod
    def resumed(cls, state: ResumeState, rule: TTARule, metrics: Path, resumes: list[dict]) -> TrainingProgress:
        """Going on from a checkpoint's state; the per-batch statistics come back from metrics.jsonl."""
        return cls(tracker=state.tracker.tracker(rule),
                   statistics=TrainingStatistics.from_metrics(metrics, state.step_cpu_seconds),
                   batch_index=state.batch_index, train_samples=state.train_samples,
                   position=(state.epoch, state.batches_done_in_epoch), last_evaluation=state.last_evaluation,
                   resumes=resumes)

    def batch_trained(self, epoch: int, batch_in_epoch: int, utterances: int) -> None:
        self.batch_index += 1
        self.train_samples += utterances
        self.position = (epoch, batch_in_epoch)

    def resume_state(self, clock_seconds: float) -> ResumeState:
        """What a checkpoint taken now records beside the backend's file."""
        epoch, done = self.position
        return ResumeState(batch_index=self.batch_index, epoch=epoch, batches_done_in_epoch=done,
                           train_samples=self.train_samples, clock_s=round(clock_seconds, 4),
                           step_cpu_seconds=self.statistics.step_cpu_seconds, tracker=TrackerState.of(self.tracker),
                           last_evaluation=self.last_evaluation, resumes=list(self.resumes))
