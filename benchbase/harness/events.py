"""What the harness hands to lifecycle hooks while it runs (the result it ends with is
benchbase.specs.RunResult)."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["BatchProgress", "Evaluation"]


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

