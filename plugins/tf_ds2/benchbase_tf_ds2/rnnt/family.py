"""The TensorFlow backend's RNN-T family: the transducer model, trained on the transducer loss.

``predict()`` returns the joint's encoder projection (batch, T', joint_units), float32; the
harness runs the search on the exported weights. The transducer has no BatchNorm, so a
replica's step shares nothing with the other replicas but the gradient all-reduce and,
int8-emulated, each range's batch max (a MAX all-reduce, ``benchbase_tf_ds2.rnnt.quantization``).
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from benchbase.backend import BuildContext, Inputs
from benchbase.families.rnnt import weight_layout
from benchbase.families.rnnt.spec import RNNTModelSpec
from benchbase_tf_ds2.family import Infer
from benchbase_tf_ds2.rnnt import weights
from benchbase_tf_ds2.rnnt.loss import lattice_losses
from benchbase_tf_ds2.rnnt.model import RNNTransducer

__all__ = ["TRANSDUCER_PRECISIONS", "RNNTFamily"]

TRANSDUCER_PRECISIONS = frozenset({"fp32", "tf32", "bf16", "fp16", "int8-emulated"})
"""What the TensorFlow backend implements for rnnt: IEEE float32, TF32 matmuls on GPUs (the same
code, with the flag the backend sets), bf16 and fp16 (Keras's mixed policies, ``model``; fp16's
loss scaling is the backend's, as for every family) and int8-emulated
(``benchbase_tf_ds2.rnnt.quantization``)."""


class RNNTFamily:
    name = "rnnt"
    summary = "RNN-T (transducer loss)"
    precisions = TRANSDUCER_PRECISIONS
    layout = weight_layout

    def build_model(self, context: BuildContext, fused_lstm: bool | None) -> RNNTransducer:
        # By default Keras's LSTM, on a CPU too: the faster at the family's widths (benchbase_tf_ds2.rnnt.model).
        model = RNNTransducer(context.model, context.feature_dimension, fused_lstm=bool(fused_lstm))
        model.build_weights()
        return model

    def utterance_losses(self, model: RNNTransducer, features: tf.Tensor, feature_lengths: tf.Tensor,
                         output_lengths: tf.Tensor, labels: tf.Tensor, label_lengths: tf.Tensor) -> tf.Tensor:
        # The arrays as the batch gives them: the graph pads a degenerate batch itself (``RNNTransducer.lattice_of``).
        blank, emit = model.lattice_of(features, labels, output_lengths, label_lengths, training=True)
        return lattice_losses(blank, emit, output_lengths, label_lengths)

    def forward(self, model: RNNTransducer, features: tf.Tensor, feature_lengths: tf.Tensor) -> tf.Tensor:
        return model(features, training=False)  # unidirectional LSTMs: the padding never reaches a valid frame

    def predict(self, infer: Infer, spec: RNNTModelSpec, inputs: Inputs) -> np.ndarray:
        features = inputs.features
        if spec.output_frames(features.shape[1]) == 0:
            # Too short for one encoder frame: the projection has no frame to hold, and the model
            # would have none to compute.
            return np.zeros((features.shape[0], 0, spec.joint_units), dtype=np.float32)
        return np.asarray(infer(features, inputs.feature_lengths).numpy(), dtype=np.float32)

    def neutral_variables(self, model: RNNTransducer) -> dict[str, tf.Variable]:
        return weights.neutral_variables(model)
