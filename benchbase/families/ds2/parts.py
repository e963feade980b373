"""The DS2 family's parts: CTC log-probabilities out of predict(), the workload's CTC decoder on them."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from benchbase.backend import Batch
from benchbase.decode.factory import Decoder
from benchbase.decode.greedy import greedy_decode
from benchbase.families.ds2.reference import bounded_reference, reference_forward
from benchbase.families.ds2.spec import DS2ModelSpec
from benchbase.families.ds2.weight_layout import validate_weights, weight_layout
from benchbase.families.parts import Weights
from benchbase.metrics.ctc import ctc_loss

__all__ = ["PARTS", "CTCHead", "DS2Parts"]


class CTCHead:
    """predict()'s log-probabilities decoded by the workload's decoder; the CTC loss of each utterance."""

    def __init__(self, decoder: Decoder, model: DS2ModelSpec) -> None:
        self.decoder = decoder
        self.model = model

    def decode(self, outputs: np.ndarray, lengths: np.ndarray) -> list[str]:
        return self.decoder.decode(outputs, lengths)

    def greedy(self, outputs: np.ndarray, lengths: np.ndarray) -> list[str]:
        return greedy_decode(outputs, lengths, self.model.blank_index)

    def losses(self, outputs: np.ndarray, batch: Batch) -> np.ndarray:
        losses = ctc_loss(outputs, batch.output_lengths, batch.labels, batch.label_lengths, self.model.blank_index)
        if self.model.ctc_impossible_alignments == "zero":
            losses = np.where(np.isinf(losses), 0.0, losses)
        return losses


class DS2Parts:
    def evaluation_head(self, model, decoder: Decoder, weights: Callable[[], Weights]) -> CTCHead:
        return CTCHead(decoder, model)  # CTC decoding needs the log-probabilities only, never the weights

    def output_width(self, model) -> int:
        return int(model.symbols)

    def weight_layout(self, model, feature_dimension: int) -> dict[str, tuple[int, ...]]:
        return weight_layout(model, feature_dimension)

    def validate_weights(self, weights: Weights, model, feature_dimension: int) -> None:
        validate_weights(weights, model, feature_dimension)

    def reference_outputs(self, weights: Weights, model, features: np.ndarray,
                          feature_lengths: np.ndarray) -> np.ndarray:
        log_probs, _ = reference_forward(weights, model, features, feature_lengths, training=False)
        return log_probs

    def bounded_outputs(self, weights: Weights, model, features: np.ndarray, feature_lengths: np.ndarray,
                        operand_roundoff: float, draws: int) -> tuple[np.ndarray, np.ndarray]:
        bounded = bounded_reference(weights, model, features, feature_lengths, training=False,
                                    operand_roundoff=operand_roundoff, draws=draws)
        return bounded.log_probs, bounded.log_probs_bound


PARTS = DS2Parts()
