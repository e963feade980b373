"""The TensorFlow backend's DS2 family: the Deep Speech 2-like model, trained on CTC.

``predict()`` returns its per-frame log-probabilities (batch, output frames, symbols), float32 in
every precision; the harness decodes them.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from benchbase.backend import BuildContext, Inputs
from benchbase.families.ds2 import weight_layout
from benchbase.specs import ModelSpec
from benchbase_tf_ds2 import ctc
from benchbase_tf_ds2.ds2 import weights
from benchbase_tf_ds2.ds2.model import DeepSpeech2
from benchbase_tf_ds2.family import Infer

__all__ = ["DS2Family"]


class DS2Family:
    name = "ds2"
    summary = "DS2 (CTC)"
    # bf16 and fp16 are Keras's mixed precision (family.keras_policy; fp16's loss scaling is the
    # backend's), int8-emulated the model's fake quantization.
    precisions = frozenset({"fp32", "tf32", "bf16", "fp16", "int8-emulated"})
    layout = weight_layout

    def build_model(self, context: BuildContext, fused_lstm: bool | None) -> DeepSpeech2:
        # By default the fused BlockLSTMV2 kernel on a CPU and Keras's cuDNN path on GPUs: at DS2's
        # widths the fused kernel is the faster on a CPU (docs/BENCHMARKS.md).
        fused = context.plan.kind == "cpu" if fused_lstm is None else fused_lstm
        model = DeepSpeech2(context.model, context.feature_dimension, fused_lstm=fused)
        model.build_weights()
        return model

    def utterance_losses(self, model: DeepSpeech2, features: tf.Tensor, feature_lengths: tf.Tensor,
                         output_lengths: tf.Tensor, labels: tf.Tensor, label_lengths: tf.Tensor) -> tf.Tensor:
        # No lengths: right-padded inputs and unidirectional LSTMs, the valid outputs never see the padding.
        return ctc.utterance_losses(model, model.spec, features, output_lengths, labels, label_lengths)

    def forward(self, model: DeepSpeech2, features: tf.Tensor, feature_lengths: tf.Tensor) -> tf.Tensor:
        return model(features, training=False)

    def predict(self, infer: Infer, spec: ModelSpec, inputs: Inputs) -> np.ndarray:
        return infer(inputs.features, inputs.feature_lengths).numpy()

    def neutral_variables(self, model: DeepSpeech2) -> dict[str, tf.Variable]:
        return weights.neutral_variables(model)
