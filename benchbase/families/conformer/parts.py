"""The Conformer family's parts: CTC log-probabilities out of predict(), the workload's CTC decoder on them."""

from __future__ import annotations

from functools import partial

import numpy as np

from benchbase.backend import Batch
from benchbase.families.batch_cost import batch_training_flops
from benchbase.families.conformer.cost import training_flops
from benchbase.families.conformer.reference import random_weights, reference_forward
from benchbase.families.conformer.spec import ConformerModelSpec
from benchbase.families.conformer.weight_layout import batchnorm_names, validate_weights, weight_layout
from benchbase.families.ctc import CTCParts, bounded_ctc_step, ctc_step_loss
from benchbase.families.parts import KitModel, ReferenceStep, Weights
from benchbase.numerics.tolerances import RoundingModel, rounding_bound
from benchbase.specs.optimizer import AdamWSpec

__all__ = ["KIT_MODEL", "PARTS", "ConformerParts"]

KIT_MODEL = KitModel(
    ConformerModelSpec(encoder_dim=16, attention_heads=2, encoder_layers=2, feed_forward_expansion=2,
                       conv_kernel_size=5, subsampling_layers=1, dropout=0.05),
    AdamWSpec(learning_rate=3e-3, warmup_steps=2, hold_steps=1, decay_every_steps=1, decay_factor=0.5,
              weight_decay=1e-3, gradient_clip_norm=1.0))
"""Two blocks (so that what passes between blocks is checked too), two heads, every width
different where it can be, one subsampling layer (CTC keeps every kit utterance feasible at
half the frame rate), small enough for the float64 reference to take about a second."""


class ConformerParts(CTCParts):
    quantized_reference = None  # no int8-emulated (quantizable_tensors is empty)

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
        def compute(rounding: RoundingModel | None) -> dict[str, np.ndarray]:
            log_probs, _ = reference_forward(weights, model, features, feature_lengths, False, rounding)
            return {"log_probs": log_probs}

        exact, bound = rounding_bound(compute, draws=draws, operand_roundoff=operand_roundoff)
        return exact["log_probs"], bound["log_probs"]

    def random_weights(self, model, feature_dimension: int, seed: int) -> dict[str, np.ndarray]:
        return random_weights(model, feature_dimension, seed)

    def reference_step(self, weights: Weights, model, batch: Batch) -> ReferenceStep:
        def forward(rounding: RoundingModel | None) -> tuple[np.ndarray, dict[str, np.ndarray]]:
            return reference_forward(weights, model, batch.features, batch.feature_lengths, True, rounding)

        return bounded_ctc_step(forward, batch, model.blank_index, model.batchnorm_momentum)

    def reference_loss(self, weights: Weights, model, batch: Batch) -> float:
        log_probs, _ = reference_forward(weights, model, batch.features, batch.feature_lengths, True)
        return ctc_step_loss(log_probs, batch, model.blank_index)

    def normalization_layers(self, model) -> list[str]:
        return batchnorm_names(model)

    def kit_model(self) -> KitModel:
        return KIT_MODEL

    def batch_flops(self, model, feature_dimension: int, padded_frames: int, feature_lengths, label_lengths
                    ) -> tuple[int, int]:
        return batch_training_flops(partial(training_flops, model, feature_dimension), padded_frames, feature_lengths,
                                    label_lengths)


PARTS = ConformerParts()
