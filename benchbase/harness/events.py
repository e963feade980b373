"""What the harness hands to lifecycle hooks and writes into result.json."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["BatchProgress", "Evaluation", "RunResult"]


@dataclass(frozen=True)
class BatchProgress:
    epoch: int
    batch_in_epoch: int
    batches_per_epoch: int
    batch_index: int
    """Batches completed in the whole run."""
    seconds: float
    """Run clock at the end of the batch."""
    loss: float
    throughput: float
    """Utterances per second for this batch (step and data wait)."""
    data_wait: float
    """Seconds the loop waited for this batch."""


@dataclass(frozen=True)
class Evaluation:
    epoch: int
    seconds: float
    """Run clock at the end of the evaluation."""
    subset: str
    """The dev subset TTA is scored on; wer to loss are its rates."""
    wer: float
    cer: float
    paper_cer: float
    loss: float
    """Validation CTC loss (mean per utterance)."""
    utterances: int
    eval_seconds: float
    reached: dict[str, float]
    """Every target reached so far: label -> run-clock seconds."""
    targets: tuple[str, ...]
    subsets: dict[str, dict[str, float]] = field(default_factory=dict)
    """Every dev subset's rates (wer, cer, paper_cer, loss), the scored one included."""


@dataclass
class RunResult:
    status: str
    """success (every target reached) or aborted (max epochs or minutes first)."""
    stop_reason: str
    """A ``StopReason`` value."""
    workload: str
    backend: str
    hardware: str
    seed: int
    tta: dict[str, dict | None]
    """Target label -> {seconds, minutes, epoch} or None when never reached."""
    epochs: int
    batches: int
    train_samples: int
    run_seconds: float
    init_seconds: float
    parameter_count: int
    throughput: dict[str, float]
    data_wait: dict[str, float]
    last_evaluation: dict | None
    """The last evaluation during training: epoch, the scored subset and its rates, and every subset's."""
    final_evaluation: dict | None
    """After run_stop, untimed: decoder, beam_width, epoch, seconds and subsets (every dev and
    test subset's wer, cer, paper_cer, loss, utterances); None when skipped."""
    telemetry: dict = field(default_factory=dict)
    device: str = ""
    devices: list[str] = field(default_factory=list)
    """The devices the backend reported it trained on."""
    resumes: list[dict] = field(default_factory=list)
    """One per resume (benchbase run --resume): segment, checkpoint, batch, interrupted_at_s, lost_s."""
    world_size: int = 1
    """Processes that trained (one per device for a process-per-device backend)."""
    device_plan: dict = field(default_factory=dict)
    """The plan trained on and the profile's devices (the log's benchbase_device_plan)."""
    step_breakdown: dict = field(default_factory=dict)
    """data_wait_s, step_s and, where the backend measures it, communication_s and its share."""
    cpu: dict = field(default_factory=dict)
    """cores_in_steps (process CPU s / wall s during train_step), thread_budget, within_budget."""
