"""The Deep Speech 2-like model of the workload spec, in Keras 3 on TensorFlow.

conv (width 11, stride 2, valid) -> BatchNorm -> clipped ReLU -> dropout
  -> [LSTM -> BatchNorm -> dropout] x layers -> dense -> log-softmax

It mirrors the torch backend's DS2 model layer for layer. Inputs are right-padded and the LSTMs
are unidirectional, so the outputs at valid frames never see padding: like the PyTorch model
it passes no mask, and BatchNorm normalizes over the same (padded) frames in both frameworks.
Trained on several replicas (tf.distribute), BatchNorm's statistics and the int8-emulated
ranges are those of the global batch, and each replica draws its own dropout masks
(benchbase_tf_ds2.cross_replica).

On a GPU the LSTMs take Keras's cuDNN path; on a CPU they run TensorFlow's fused BlockLSTMV2
kernel (``benchbase_tf_ds2.lstm.SequenceLSTM``), which is what brings the TF step time near
PyTorch's oneDNN LSTM (docs/BENCHMARKS.md), in bf16 too.
"""

from __future__ import annotations

import keras
import tensorflow as tf

from benchbase.families.ds2.quantization import input_range_names
from benchbase.numerics.quantization import is_quantized
from benchbase.specs import ModelSpec
from benchbase_tf_ds2.cross_replica import CrossReplicaBatchNormalization, ReplicaDropout, cross_replica_max
from benchbase_tf_ds2.family import keras_policy
from benchbase_tf_ds2.lstm import ForgetGateBias, SequenceLSTM
from benchbase_tf_ds2.quantization import quantize_activation, quantize_weight, quantized_lstm, updated_range

__all__ = ["DeepSpeech2"]

CLIPPED_RELU_CEILING = 20.0


class DeepSpeech2(keras.Model):
    def __init__(self, spec: ModelSpec, feature_dimension: int, fused_lstm: bool) -> None:
        super().__init__(name="deep_speech_2")
        self.spec = spec
        self.feature_dimension = feature_dimension
        policy = keras_policy(spec)
        self.conv = keras.layers.Conv1D(spec.conv_channels, spec.conv_width, strides=spec.conv_stride,
                                        padding="valid", use_bias=False, kernel_initializer="glorot_uniform",
                                        name="conv", dtype=policy)
        self.conv_norm = _batch_norm(spec, "conv_norm", policy)
        self.lstms = [
            SequenceLSTM(spec.lstm_units, fused_lstm, kernel_initializer="glorot_uniform",
                         recurrent_initializer="glorot_uniform", bias_initializer=ForgetGateBias(spec.lstm_forget_bias),
                         unit_forget_bias=False, name=f"lstm_{index}", dtype=policy)
            for index in range(spec.lstm_layers)
        ]
        self.lstm_norms = [_batch_norm(spec, f"lstm_norm_{index}", policy) for index in range(spec.lstm_layers)]
        self.dropout = ReplicaDropout(spec.dropout, name="dropout", dtype=policy)
        self.output_layer = keras.layers.Dense(spec.symbols, kernel_initializer="glorot_uniform",
                                               bias_initializer="zeros", name="output", dtype=policy)
        self.quantization = spec.quantization if is_quantized(spec) else None
        # int8-emulated's moving-average input ranges: non-trainable variables like BatchNorm's
        # statistics (checkpointed with the model's variables), 0 until the first training step.
        self.input_ranges = {
            name.removesuffix(".input_range"): self.add_weight(
                shape=(), initializer="zeros", trainable=False, autocast=False,
                name=name.replace(".", "_"))
            for name in input_range_names(spec)
        }

    def call(self, features, training=False):
        """(batch, frames, features) -> log-probs (batch, frames', symbols), float32 in every precision."""
        if self.quantization is not None:
            return self._quantized_call(features, training)
        x = self.conv_norm(self.conv(features), training=training)
        x = self.dropout(self._activation(x), training=training)
        for lstm, norm in zip(self.lstms, self.lstm_norms):
            x = self.dropout(norm(lstm(x, training=training), training=training), training=training)
        return tf.nn.log_softmax(tf.cast(self.output_layer(x), tf.float32), axis=-1)

    def _quantized_call(self, features, training):
        """int8-emulated: the same layers' weights on fake-quantized inputs and weights (ModelSpec.quantization)."""
        spec = self.spec
        x = self._quantized_input("conv", features, training)
        x = tf.nn.conv1d(x, self._quantized_kernel("conv.kernel", self.conv.kernel), stride=spec.conv_stride,
                         padding="VALID")
        x = self.dropout(self._activation(self.conv_norm(x, training=training)), training=training)
        state = self.quantization if self.quantization.quantizes("lstm.recurrent_state") else None
        for index, (lstm, norm) in enumerate(zip(self.lstms, self.lstm_norms)):
            cell = lstm.cell
            x = quantized_lstm(self._quantized_input(f"lstm.{index}", x, training),
                               self._quantized_kernel("lstm.input_kernel", cell.kernel),
                               self._quantized_kernel("lstm.recurrent_kernel", cell.recurrent_kernel),
                               tf.convert_to_tensor(cell.bias), state)
            x = self.dropout(norm(x, training=training), training=training)
        x = self._quantized_input("output", x, training)
        logits = tf.einsum("btu,us->bts", x, self._quantized_kernel("output.kernel", self.output_layer.kernel))
        return tf.nn.log_softmax(logits + tf.convert_to_tensor(self.output_layer.bias), axis=-1)

    def _quantized_input(self, layer: str, x, training: bool):
        tensor = "lstm.input" if layer.startswith("lstm.") else f"{layer}.input"
        if not self.quantization.quantizes(tensor):
            return x
        variable = self.input_ranges[layer]
        batch_max = tf.reduce_max(tf.abs(tf.stop_gradient(x)))
        stored = tf.convert_to_tensor(variable)
        if training:
            # The global batch's max|x|: every replica then stores the same range, the one a
            # single device training on the whole batch would.
            used = updated_range(self.quantization, stored, cross_replica_max(batch_max))
            variable.assign(used)
        else:
            used = tf.where(stored > 0, stored, batch_max)
        return quantize_activation(self.quantization, x, used)

    def _quantized_kernel(self, tensor: str, variable):
        if not self.quantization.quantizes(tensor):
            return tf.convert_to_tensor(variable)
        return quantize_weight(self.quantization, variable)

    def build_weights(self) -> None:
        """Create every variable now (Keras creates them lazily on the first call)."""
        if self.quantization is not None:
            # The quantized forward pass reads these layers' weights without calling the layers.
            self.conv.build((None, None, self.feature_dimension))
            inputs = self.spec.conv_channels
            for lstm in self.lstms:
                lstm.build((None, None, inputs))
                inputs = self.spec.lstm_units
            self.output_layer.build((None, None, self.spec.lstm_units))
        self(tf.zeros([1, self.spec.conv_width, self.feature_dimension]), training=False)

    def _activation(self, x):
        if self.spec.conv_activation == "clipped_relu":
            return tf.clip_by_value(x, 0.0, CLIPPED_RELU_CEILING)
        return tf.nn.relu(x)


def _batch_norm(spec: ModelSpec, name: str, policy: str = "float32") -> keras.layers.BatchNormalization:
    # Keras's momentum is the share of the running statistics kept: the spec's own convention.
    # Over several replicas the statistics are the global batch's (CrossReplicaBatchNormalization).
    return CrossReplicaBatchNormalization(momentum=spec.batchnorm_momentum, epsilon=spec.batchnorm_epsilon,
                                           name=name, dtype=policy)
