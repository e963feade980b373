"""What the harness hands to lifecycle hooks while it runs (the result it ends with is
benchbase.specs.RunResult)."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["BatchProgress", "Evaluation", "SubsetScore"]

DIGITS = 4
"""Decimal places of the rates the log and metrics.jsonl record."""


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
class SubsetScore:
    """One subset's error rates and validation loss, as the harness computed them."""

    subset: str
    wer: float
    cer: float
    paper_cer: float
    loss: float
    """Validation CTC loss: mean per utterance (the training loss's reduction), impossible
    alignments as the workload's spec says."""
    utterances: int

    def rates(self) -> dict[str, float]:
        """What the log and metrics.jsonl record for the subset."""
        return {"wer": round(self.wer, DIGITS), "cer": round(self.cer, DIGITS),
                "paper_cer": round(self.paper_cer, DIGITS), "loss": round(self.loss, DIGITS)}


@dataclass(frozen=True)
class Evaluation(SubsetScore):
    """One periodic evaluation: the rates are those of the dev subset TTA is scored on (``subset``)."""

    epoch: int
    seconds: float
    """Run clock at the end of the evaluation."""
    eval_seconds: float
    reached: dict[str, float]
    """Every target reached so far: label -> run-clock seconds."""
    targets: tuple[str, ...]
    subsets: dict[str, dict[str, float]] = field(default_factory=dict)
    """Every dev subset's rates (wer, cer, paper_cer, loss), the scored one included."""
