"""The RNN-T family's parts: predict() returns the joint's encoder projection, the harness searches.

A transducer's decoding needs the prediction network and the joint, so the harness runs them
itself, on the weights the backend exports, with ``benchbase.families.rnnt.greedy``; the
validation loss is the reference's transducer loss on the same weights. What the backend
computes (the encoder) is checked against the reference's encoder by independent scoring, and
what it does not compute (the search) is benchbase's: a backend decides no part of its score.

The error model's bound of the encoder projection (``bounded_outputs``) is DS2's: the same
LSTM with every accumulation and vector function moved by its float32 rounding bound
(``benchbase.numerics.rounded.lstm_layer``, ``benchbase.numerics.tolerances``).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import numpy as np

from benchbase.backend import Batch
from benchbase.data.vocabulary import CharacterVocabulary, Vocabulary
from benchbase.decode.factory import Decoder
from benchbase.families.batch_cost import batch_training_flops
from benchbase.families.parts import KitModel, ReferenceStep, Weights
from benchbase.families.rnnt import quantization
from benchbase.families.rnnt.bounds import bounded_transducer_loss, rounded_encoder
from benchbase.families.rnnt.cost import training_flops
from benchbase.families.rnnt.greedy import greedy_decode
from benchbase.families.rnnt.loss import transducer_loss
from benchbase.families.rnnt.reference import encoder_forward, joint, prediction_forward, random_weights
from benchbase.families.rnnt.spec import RNNTModelSpec
from benchbase.families.rnnt.weight_layout import validate_weights, weight_layout
from benchbase.numerics.rounded import RoundedArithmetic
from benchbase.numerics.tolerances import RoundingModel, rounding_bound
from benchbase.specs.optimizer import AdamWSpec

__all__ = ["KIT_MODEL", "PARTS", "RNNTParts", "TransducerHead"]

KIT_MODEL = KitModel(
    RNNTModelSpec(input_stack=3, input_subsample=3, encoder_pre_layers=1, stack_time_factor=2, encoder_post_layers=2,
                  encoder_units=24, prediction_embedding=16, prediction_layers=2, prediction_units=20,
                  joint_units=28, dropout=0.05),
    AdamWSpec(learning_rate=3e-3, warmup_steps=2, hold_steps=1, decay_every_steps=1, decay_factor=0.5,
              weight_decay=1e-3, gradient_clip_norm=1.0))
"""rnnt-mini's shape (input stacking, time stacking, the relu joint) with two post-stacking encoder
layers and two prediction layers, so that what passes between layers is checked too, at widths
that all differ (a transposed matrix cannot fit) and small enough for the float64 reference; and
rnnt-mini's AdamW with its schedule compressed into the kit's few steps (the steps the checkpoint
rule takes after restoring follow the warm-up, so a schedule that restarts shows)."""


class TransducerHead:
    """The greedy transducer search and the transducer loss on one set of exported weights."""

    def __init__(self, model: RNNTModelSpec, weights: Weights, vocabulary: Vocabulary) -> None:
        self.model = model
        self.vocabulary = vocabulary
        self.weights = {name: np.asarray(value, dtype=np.float32) for name, value in weights.items()}

    def decode(self, outputs: np.ndarray, lengths: np.ndarray) -> list[str]:
        found = greedy_decode(self.weights, self.model, outputs, lengths, self.model.max_symbols_per_frame)
        return [self.vocabulary.decode(labels) for labels in found]

    def greedy(self, outputs: np.ndarray, lengths: np.ndarray) -> list[str]:
        return self.decode(outputs, lengths)

    def losses(self, outputs: np.ndarray, batch: Batch) -> np.ndarray:
        predicted = prediction_forward(self.weights, self.model, batch.labels, batch.label_lengths)
        frames = int(batch.output_lengths.max(initial=0))
        log_probs = joint(self.weights, self.model, outputs[:, :frames], predicted)
        losses = transducer_loss(log_probs, batch.labels, batch.output_lengths, batch.label_lengths,
                                 self.model.blank_index)
        return np.where(np.isinf(losses), 0.0, losses)  # transducer_impossible_alignments: zero


class RNNTParts:
    loss_name = "transducer loss"
    outputs_name = "encoder projection"
    log_probability_outputs = False  # the joint's encoder projection; the harness runs the joint
    quantized_reference = quantization

    def evaluation_head(self, model, decoder: Decoder, weights: Callable[[], Weights]) -> TransducerHead:
        # The search needs the prediction network and joint; the decoder's vocabulary spells its labels.
        vocabulary = CharacterVocabulary() if decoder is None else decoder.vocabulary
        return TransducerHead(model, weights(), vocabulary)

    def output_width(self, model) -> int:
        return int(model.joint_units)

    def weight_layout(self, model, feature_dimension: int) -> dict[str, tuple[int, ...]]:
        return weight_layout(model, feature_dimension)

    def validate_weights(self, weights: Weights, model, feature_dimension: int) -> None:
        validate_weights(weights, model, feature_dimension)

    def reference_outputs(self, weights: Weights, model, features: np.ndarray,
                          feature_lengths: np.ndarray) -> np.ndarray:
        encoded, _ = encoder_forward(weights, model, features, feature_lengths)
        return encoded

    def bounded_outputs(self, weights: Weights, model, features: np.ndarray, feature_lengths: np.ndarray,
                        operand_roundoff: float, draws: int) -> tuple[np.ndarray, np.ndarray]:
        def compute(rounding: RoundingModel | None) -> dict[str, np.ndarray]:
            return {"encoded": rounded_encoder(weights, model, features, RoundedArithmetic(rounding))}

        exact, bound = rounding_bound(compute, draws=draws, operand_roundoff=operand_roundoff)
        return exact["encoded"], bound["encoded"]


    def random_weights(self, model, feature_dimension: int, seed: int) -> dict[str, np.ndarray]:
        return random_weights(model, feature_dimension, np.random.default_rng(seed))

    def reference_step(self, weights: Weights, model, batch: Batch) -> ReferenceStep:
        bounded = bounded_transducer_loss(weights, model, batch)  # no BatchNorm: int8-emulated's ranges only
        return ReferenceStep(bounded.loss, bounded.losses, bounded.bound, bounded.ranges, bounded.range_bounds)

    def reference_loss(self, weights: Weights, model, batch: Batch) -> float:
        encoded, _ = encoder_forward(weights, model, batch.features, batch.feature_lengths)
        predicted = prediction_forward(weights, model, batch.labels, batch.label_lengths)
        frames = int(batch.output_lengths.max(initial=0))
        losses = transducer_loss(joint(weights, model, encoded[:, :frames], predicted), batch.labels,
                                 batch.output_lengths, batch.label_lengths, model.blank_index)
        return float(np.where(np.isinf(losses), 0.0, losses).mean())

    def normalization_layers(self, model) -> list[str]:
        return []

    def without_dropout(self, model: RNNTModelSpec) -> RNNTModelSpec:
        return model.model_copy(update={"dropout": 0.0})

    def impossible_frames(self, model, labels: int) -> int:
        """A transducer aligns any labels to one encoder frame: the most frames that give none."""
        frames = model.input_frames_for(1) - 1
        assert model.output_frames(frames) == 0
        return frames

    def kit_model(self) -> KitModel:
        return KIT_MODEL

    def batch_flops(self, model, feature_dimension: int, padded_frames: int, feature_lengths, label_lengths
                    ) -> tuple[int, int]:
        return batch_training_flops(partial(training_flops, model, feature_dimension), padded_frames, feature_lengths,
                                    label_lengths)


PARTS = RNNTParts()
