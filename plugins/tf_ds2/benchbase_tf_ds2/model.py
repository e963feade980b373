"""The Deep Speech 2-like model of the workload spec, in Keras 3 on TensorFlow.

conv (width 11, stride 2, valid) -> BatchNorm -> clipped ReLU -> dropout
  -> [LSTM -> BatchNorm -> dropout] x layers -> dense -> log-softmax

It mirrors benchbase_torch_ds2.model layer for layer. Inputs are right-padded and the LSTMs
are unidirectional, so the outputs at valid frames never see padding: like the PyTorch model
it passes no mask, and BatchNorm normalizes over the same (padded) frames in both frameworks.

On a GPU the LSTMs take Keras's cuDNN path (tanh/sigmoid, no recurrent dropout, no unroll,
bias on: every condition of ``keras.backend.cudnn_ok`` holds). On a CPU Keras would fall back
to a ``tf.while_loop`` of small per-step ops; ``SequenceLSTM`` runs TensorFlow's fused
BlockLSTMV2 kernel instead, on the very same weights, which is what brings the TF step time
near PyTorch's oneDNN LSTM (docs/BENCHMARKS.md).
"""

from __future__ import annotations

import keras
import tensorflow as tf
from tensorflow.python.ops import gen_rnn_ops

from benchbase.specs import ModelSpec

__all__ = ["DeepSpeech2", "ForgetGateBias", "SequenceLSTM"]

CLIPPED_RELU_CEILING = 20.0


class ForgetGateBias(keras.initializers.Initializer):
    """Zero bias except the forget gate (Keras gate order i, f, c, o), set to the spec's value.

    Keras's unit_forget_bias would hard-code 1.0; the spec owns the number.
    """

    def __init__(self, value: float) -> None:
        self.value = value

    def __call__(self, shape, dtype=None):
        units = shape[0] // 4
        gates = [tf.zeros([units]), tf.fill([units], float(self.value)), tf.zeros([2 * units])]
        return tf.cast(tf.concat(gates, axis=0), dtype or "float32")

    def get_config(self) -> dict:
        return {"value": self.value}


class SequenceLSTM(keras.layers.LSTM):
    """A Keras LSTM that runs as one fused kernel over the whole sequence on a CPU.

    The weights are the layer's own (kernel, recurrent_kernel, bias), so checkpoints,
    parameter counts and the GPU's cuDNN path are exactly those of ``keras.layers.LSTM``.
    """

    def __init__(self, units: int, fused: bool, **kwargs) -> None:
        super().__init__(units, return_sequences=True, use_cudnn="auto", **kwargs)
        self.fused = fused

    def call(self, sequences, initial_state=None, mask=None, training=False):
        if not self.fused or initial_state is not None or mask is not None:
            return super().call(sequences, initial_state=initial_state, mask=mask, training=training)
        cell = self.cell
        weights = tf.concat([tf.convert_to_tensor(cell.kernel), tf.convert_to_tensor(cell.recurrent_kernel)], axis=0)
        time_major = tf.transpose(sequences, [1, 0, 2])
        return tf.transpose(_block_lstm(time_major, weights, tf.convert_to_tensor(cell.bias)), [1, 0, 2])


@tf.custom_gradient
def _block_lstm(inputs: tf.Tensor, weights: tf.Tensor, bias: tf.Tensor):
    """BlockLSTMV2 (gate order i, f, c, o, as Keras) over time-major inputs, zero initial state.

    TensorFlow registers BlockLSTMV2's gradient with the V1 (i, c, f, o) gradient kernel, which
    scrambles the gate gradients; the matching BlockLSTMGradV2 is wired here by hand.
    """
    units = tf.shape(bias)[0] // 4
    steps = tf.cast(tf.shape(inputs)[0], tf.int64)
    state = tf.zeros(tf.stack([tf.shape(inputs)[1], units]), inputs.dtype)
    no_peephole = tf.zeros(tf.reshape(units, [1]), inputs.dtype)
    gates = gen_rnn_ops.block_lstmv2(steps, inputs, state, state, weights, no_peephole, no_peephole, no_peephole,
                                     bias, cell_clip=0.0, use_peephole=False)
    input_gate, cell, forget_gate, output_gate, cell_input, cell_output, hidden = gates

    def gradient(hidden_gradient):
        grads = gen_rnn_ops.block_lstm_grad_v2(
            seq_len_max=steps, x=inputs, cs_prev=state, h_prev=state, w=weights, wci=no_peephole,
            wcf=no_peephole, wco=no_peephole, b=bias, i=input_gate, cs=cell, f=forget_gate, o=output_gate,
            ci=cell_input, co=cell_output, h=hidden, cs_grad=tf.zeros_like(cell), h_grad=hidden_gradient,
            use_peephole=False,
        )
        return grads[0], grads[3], grads[7]

    return hidden, gradient


class DeepSpeech2(keras.Model):
    def __init__(self, spec: ModelSpec, feature_dimension: int, fused_lstm: bool) -> None:
        super().__init__(name="deep_speech_2")
        self.spec = spec
        self.feature_dimension = feature_dimension
        self.conv = keras.layers.Conv1D(spec.conv_channels, spec.conv_width, strides=spec.conv_stride,
                                        padding="valid", use_bias=False, kernel_initializer="glorot_uniform",
                                        name="conv")
        self.conv_norm = _batch_norm(spec, "conv_norm")
        self.lstms = [
            SequenceLSTM(spec.lstm_units, fused_lstm, kernel_initializer="glorot_uniform",
                         recurrent_initializer="glorot_uniform", bias_initializer=ForgetGateBias(spec.lstm_forget_bias),
                         unit_forget_bias=False, name=f"lstm_{index}")
            for index in range(spec.lstm_layers)
        ]
        self.lstm_norms = [_batch_norm(spec, f"lstm_norm_{index}") for index in range(spec.lstm_layers)]
        self.dropout = keras.layers.Dropout(spec.dropout, name="dropout")
        self.output_layer = keras.layers.Dense(spec.symbols, kernel_initializer="glorot_uniform",
                                               bias_initializer="zeros", name="output")

    def call(self, features, training=False):
        """(batch, frames, features) -> log-probs (batch, frames', symbols)."""
        x = self.conv_norm(self.conv(features), training=training)
        x = self.dropout(self._activation(x), training=training)
        for lstm, norm in zip(self.lstms, self.lstm_norms):
            x = self.dropout(norm(lstm(x, training=training), training=training), training=training)
        return tf.nn.log_softmax(self.output_layer(x), axis=-1)

    def build_weights(self) -> None:
        """Create every variable now (Keras creates them lazily on the first call)."""
        self(tf.zeros([1, self.spec.conv_width, self.feature_dimension]), training=False)

    def _activation(self, x):
        if self.spec.conv_activation == "clipped_relu":
            return tf.clip_by_value(x, 0.0, CLIPPED_RELU_CEILING)
        return tf.nn.relu(x)


def _batch_norm(spec: ModelSpec, name: str) -> keras.layers.BatchNormalization:
    # Keras's momentum is the share of the running statistics kept: the spec's own convention.
    return keras.layers.BatchNormalization(momentum=spec.batchnorm_momentum, epsilon=spec.batchnorm_epsilon,
                                           name=name)
