"""Does predict() agree with the weights a backend exports? The reference scores the same weights.

A backend is arbitrary code in the process: its ``predict()`` could return anything, for
example log-probabilities it made up from transcripts it found on disk. The weights it
exports (``Backend.export_weights``) are a claim that can be checked without trusting it:
benchbase's NumPy reference computes what those weights predict, and a ``predict()`` that
gives anything else is caught. The harness asks this of every evaluation (independent
scoring) and the conformance kit of a trained backend (rule prediction_matches_weights).

The tolerance is the error model's (``benchbase.numerics.tolerances``): per utterance, the
largest difference over its valid frames and symbols may be twice (``BOTH_SIDES``) the
largest rounding bound of the reference's outputs there, computed by the reference in the
run's precision (bfloat16, float16 and TF32 operands round at ``OPERAND_ROUNDOFF``'s unit
roundoff; an int8-emulated model's reference fake-quantizes as the backend does, and the
bound covers a grid step that flips). One utterance's largest bound, not each element's own:
an honest backend on another CPU or GPU moves every output by roundoffs of the same layer
magnitudes, while a lie moves a log-probability by whole units (a made-up transcript, a
boosted symbol), far above any rounding bound.

An utterance's outputs do not depend on the batch it is predicted in (BatchNorm normalizes
with its running statistics in inference, the LSTMs are unidirectional from a zero state and
the convolution is valid), so the reference may batch the utterances its own way.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from benchbase.backend import Inputs
from benchbase.errors import BenchbaseError
from benchbase.families.parts import family_parts
from benchbase.numerics.tolerances import BFLOAT16_UNIT_ROUNDOFF, BOTH_SIDES, INJECTION_DRAWS
from benchbase.specs import ModelSpec

__all__ = ["OPERAND_ROUNDOFF", "Agreement", "ReferencePredictor", "UtteranceOutputs", "compare_with_reference",
           "reference_log_probs"]

OPERAND_ROUNDOFF = {
    "fp32": 0.0,
    "int8-emulated": 0.0,  # float32 arithmetic on fake-quantized values, which the reference reproduces
    "bf16": BFLOAT16_UNIT_ROUNDOFF,
    "fp16": 2.0**-11,  # 11 significant bits
    "tf32": 2.0**-11,  # TF32 keeps float16's 10 explicit mantissa bits
}
"""Unit roundoff of the operands each precision multiplies with (0: float32 throughout)."""

REFERENCE_BATCH = 16
"""Utterances per reference forward pass: the recurrence runs one NumPy call per frame, so a
batch amortizes Python's overhead, and sorting by length keeps the padding small."""


@dataclass(frozen=True)
class UtteranceOutputs:
    """One utterance as the backend predicted it: its features and the log-probabilities of its valid frames."""

    utterance_id: str
    features: np.ndarray
    """(frames, feature_dimension), without padding."""
    log_probs: np.ndarray
    """(output frames, symbols): predict()'s rows for the utterance's valid output frames."""

    @classmethod
    def of_row(cls, utterance_id: str, inputs: Inputs, log_probs: np.ndarray, row: int) -> UtteranceOutputs:
        """Row ``row`` of a predicted batch without its padding (copies: the batch may be reused)."""
        return cls(utterance_id, inputs.features[row, : inputs.feature_lengths[row]].copy(),
                   log_probs[row, : inputs.output_lengths[row]].copy())


@dataclass(frozen=True)
class Agreement:
    """predict() beside the reference on the same weights, utterance by utterance."""

    utterance_ids: tuple[str, ...]
    differences: np.ndarray
    """Per utterance, the largest |predict - reference| over its valid frames and symbols."""
    tolerances: np.ndarray
    """Per utterance, the largest difference the error model allows there."""
    reference: tuple[np.ndarray, ...]
    """Per utterance, the reference's log-probabilities of its valid frames (float64)."""

    @property
    def disagreeing(self) -> list[str]:
        """The utterances whose outputs differ from the reference's by more than the tolerance."""
        return [utterance for utterance, over in zip(self.utterance_ids, self.differences > self.tolerances) if over]

    @property
    def worst_ratio(self) -> float:
        """The largest difference as a multiple of its tolerance (below 1: every utterance agrees)."""
        if not self.utterance_ids:
            return 0.0
        return float(np.max(self.differences / np.maximum(self.tolerances, np.finfo(np.float64).tiny)))


def compare_with_reference(weights: Mapping[str, np.ndarray], model: ModelSpec,
                           utterances: Sequence[UtteranceOutputs], draws: int = INJECTION_DRAWS) -> Agreement:
    """The reference's outputs for ``utterances`` on ``weights`` (in ``model.precision``), with
    each utterance's difference from what the backend predicted and its tolerance (from
    ``draws`` rounding injections: fewer cost less and bound a little less generously)."""
    operand_roundoff = OPERAND_ROUNDOFF[model.precision]
    count = len(utterances)
    differences, tolerances = np.zeros(count), np.zeros(count)
    reference: list[np.ndarray] = [np.empty(0)] * count
    for rows in _batches(utterances):
        features, lengths = _padded([utterances[row].features for row in rows])
        outputs, bound = family_parts(model).bounded_outputs(weights, model, features, lengths,
                                                             operand_roundoff=operand_roundoff, draws=draws)
        for position, row in enumerate(rows):
            found = utterances[row].log_probs
            frames = found.shape[0]
            expected = outputs[position, :frames]
            if expected.shape != found.shape:
                raise ValueError(f"{utterances[row].utterance_id}: predict gave {found.shape} log-probabilities for "
                                 f"{int(lengths[position])} feature frames; the reference gives {expected.shape}")
            differences[row] = float(np.max(np.abs(found.astype(np.float64) - expected), initial=0.0))
            tolerances[row] = BOTH_SIDES * float(np.max(bound[position, :frames], initial=0.0))
            reference[row] = expected
    return Agreement(tuple(utterance.utterance_id for utterance in utterances), differences, tolerances,
                     tuple(reference))


def reference_log_probs(weights: Mapping[str, np.ndarray], model: ModelSpec, features: np.ndarray,
                        feature_lengths: np.ndarray) -> np.ndarray:
    """What ``weights`` predict for a padded batch, by the reference alone (float32, as predict() returns)."""
    return family_parts(model).reference_outputs(weights, model, features, feature_lengths).astype(np.float32)


class ReferencePredictor:
    """benchbase's reference model on exported weights, with a backend's ``predict()``: what
    `benchbase verify` evaluates so that no backend code runs."""

    def __init__(self, weights: Mapping[str, np.ndarray], model: ModelSpec) -> None:
        self.weights = weights
        self.model = model

    def predict(self, inputs: Inputs) -> np.ndarray:
        return reference_log_probs(self.weights, self.model, inputs.features, inputs.feature_lengths)

    @staticmethod
    def layout_problem(weights: Mapping[str, np.ndarray], model: ModelSpec, feature_dimension: int) -> str | None:
        """Why ``weights`` cannot be the model's (a name missing or unknown, a wrong shape), or None."""
        try:
            family_parts(model).validate_weights(weights, model, feature_dimension)
        except BenchbaseError as error:
            return str(error)
        return None


def _batches(utterances: Sequence[UtteranceOutputs]) -> list[list[int]]:
    """Row indices in batches of similar length."""
    order = sorted(range(len(utterances)), key=lambda row: utterances[row].features.shape[0])
    return [order[start:start + REFERENCE_BATCH] for start in range(0, len(order), REFERENCE_BATCH)]


def _padded(features: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    lengths = np.array([len(rows) for rows in features], dtype=np.int32)
    batch = np.zeros((len(features), int(lengths.max()), features[0].shape[1]), dtype=np.float32)
    for row, rows in enumerate(features):
        batch[row, : len(rows)] = rows
    return batch, lengths
