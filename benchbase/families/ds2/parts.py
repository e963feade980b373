"""The DS2 family's parts: CTC log-probabilities out of predict(), the workload's CTC decoder on them."""

from __future__ import annotations

from functools import partial

import numpy as np

from benchbase.backend import Batch
from benchbase.families.batch_cost import batch_training_flops
from benchbase.families.ctc import CTCParts, ctc_step_loss
from benchbase.families.ds2 import quantization
from benchbase.families.ds2.cost import training_flops
from benchbase.families.ds2.reference import (
    batchnorm_names,
    bounded_reference,
    bounded_step,
    random_weights,
    reference_forward,
)
from benchbase.families.ds2.spec import DS2ModelSpec
from benchbase.families.ds2.weight_layout import validate_weights, weight_layout
from benchbase.families.parts import KitModel, ReferenceStep, Weights
from benchbase.specs.optimizer import AdaDeltaSpec

__all__ = ["KIT_MODEL", "PARTS", "DS2Parts"]

KIT_MODEL = KitModel(
    DS2ModelSpec(conv_channels=96, conv_width=11, conv_stride=2, conv_activation="clipped_relu", lstm_layers=2,
                 lstm_units=96, dropout=0.05),
    AdaDeltaSpec(learning_rate=1.0, rho=0.95, epsilon=1e-8))
"""ds2-mini's model and optimizer (tests/test_conformance.py holds them equal): two LSTM layers, so
that what passes between layers is checked too, small enough for the float64 reference."""


class DS2Parts(CTCParts):
    quantized_reference = quantization

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

    def random_weights(self, model, feature_dimension: int, seed: int) -> dict[str, np.ndarray]:
        return random_weights(model, feature_dimension, seed)

    def reference_step(self, weights: Weights, model, batch: Batch) -> ReferenceStep:
        return bounded_step(weights, model, batch)

    def reference_loss(self, weights: Weights, model, batch: Batch) -> float:
        log_probs, _ = reference_forward(weights, model, batch.features, batch.feature_lengths, True)
        return ctc_step_loss(log_probs, batch, model.ctc_blank_index)

    def normalization_layers(self, model) -> list[str]:
        return batchnorm_names(model)

    def kit_model(self) -> KitModel:
        return KIT_MODEL

    def batch_flops(self, model, feature_dimension: int, padded_frames: int, feature_lengths, label_lengths
                    ) -> tuple[int, int]:
        return batch_training_flops(partial(training_flops, model, feature_dimension), padded_frames, feature_lengths,
                                    label_lengths)


PARTS = DS2Parts()
