"""Evaluating a model on named subsets: the backend predicts, the harness does the rest.

Each subset is decoded and scored on its own, never pooled: the paper's dev-clean and
dev-other differ by a factor of two in WER, so a pooled rate would describe neither. Beside
the error rates, the harness computes the validation loss itself from what the backend returned, with the
model family's evaluation head (``benchbase.families.parts``: for ds2, one NumPy CTC for
every backend and the workload's decoder); a backend never reports a metric.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from benchbase.backend import Batch, Inputs
from benchbase.data.pipeline import BatchPipeline
from benchbase.decode import BackgroundDecoding
from benchbase.errors import BenchbaseError, NonFiniteError
from benchbase.families.parts import EvaluationHead
from benchbase.harness.hook_payloads import SubsetScore
from benchbase.metrics import error_rates

__all__ = ["BatchObserver", "Predictor", "SubsetEvaluation", "evaluate_subsets", "predicted_log_probs",
           "subset_records"]


class Predictor(Protocol):
    """What evaluation needs of a model: a backend, or benchbase's reference model on exported weights."""

    def predict(self, inputs: Inputs) -> np.ndarray: ...


BatchObserver = Callable[[str, Batch, np.ndarray], None]
"""Called with (subset, batch, predicted log-probabilities) for every batch evaluated, in order:
how independent scoring keeps its sample of what predict() returned."""


@dataclass(frozen=True)
class SubsetEvaluation(SubsetScore):
    """A subset's score with the evidence behind it: each utterance's reference and hypothesis, in order."""

    references: list[str] = field(repr=False)
    hypotheses: list[str] = field(repr=False)


def evaluate_subsets(backend: Predictor, pipelines: dict[str, BatchPipeline], head: EvaluationHead,
                     observe: BatchObserver | None = None) -> dict[str, SubsetEvaluation]:
    """Every subset in ``pipelines`` order, each predicted, decoded and scored on its own."""
    return {subset: _evaluate(subset, backend, pipeline, head, observe) for subset, pipeline in pipelines.items()}


def subset_records(results: dict[str, SubsetEvaluation]) -> dict[str, dict]:
    """Each subset's rates and utterance count, as metrics.jsonl and result.json record them."""
    return {subset: {**result.rates(), "utterances": result.utterances} for subset, result in results.items()}


def _evaluate(subset: str, backend: Predictor, pipeline: BatchPipeline, head: EvaluationHead,
              observe: BatchObserver | None) -> SubsetEvaluation:
    references: list[str] = []
    losses: list[np.ndarray] = []
    decoding = BackgroundDecoding(head)  # decodes batch n while the backend predicts n + 1
    for batch in pipeline.epoch(0):
        # The backend sees features and lengths only: the labels stay here.
        log_probs = predicted_log_probs(backend, batch.inputs())
        _check_finite(subset, log_probs, batch.output_lengths, batch.utterance_ids)
        if observe is not None:
            observe(subset, batch, log_probs)
        decoding.submit(log_probs, batch.output_lengths)
        losses.append(head.losses(log_probs, batch))
        references += batch.transcripts
    hypotheses = decoding.results()
    rates = error_rates(references, hypotheses)
    return SubsetEvaluation(subset, rates.wer, rates.cer, rates.paper_cer, _mean_loss(np.concatenate(losses)),
                            rates.utterances, references, hypotheses)


def predicted_log_probs(backend: Predictor, inputs: Inputs) -> np.ndarray:
    """``backend.predict(inputs)``'s outputs; the output lengths are the harness's own."""
    result = backend.predict(inputs)
    if isinstance(result, tuple):  # contract 2's (log_probs, output_lengths): said plainly, not an IndexError later
        raise BenchbaseError(f"{type(backend).__name__}.predict() returned a tuple, as backend contract 2 did; "
                             "contract 3 returns the outputs only (the output lengths are the harness's)")
    return result


def _check_finite(subset: str, log_probs: np.ndarray, lengths: np.ndarray, utterance_ids: list[str]) -> None:
    """NaN or infinite log-probabilities within the valid frames stop the run: no decoder can score them."""
    frames = np.arange(log_probs.shape[1])[None, :] < lengths[:, None]
    bad = ~np.isfinite(log_probs).all(axis=2) & frames
    if bad.any():
        rows = np.flatnonzero(bad.any(axis=1))
        raise NonFiniteError(f"{subset}: predict returned non-finite log-probabilities for "
                             f"{len(rows)} utterance(s): {', '.join(utterance_ids[row] for row in rows[:8])}")


def _mean_loss(losses: np.ndarray) -> float:
    return float(losses.mean()) if losses.size else 0.0
