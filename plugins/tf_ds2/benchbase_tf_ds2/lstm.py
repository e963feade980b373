"""The LSTM layer both families' Keras models use: Keras's own, fused into one kernel on a CPU.

On a GPU ``SequenceLSTM`` is ``keras.layers.LSTM`` and takes Keras's cuDNN path (tanh/sigmoid,
no recurrent dropout, no unroll, bias on: every condition of ``keras.backend.cudnn_ok`` holds).
On a CPU Keras would fall back to a ``tf.while_loop`` of small per-step ops; with ``fused`` the
layer runs TensorFlow's fused BlockLSTMV2 kernel instead, on the very same weights. In bf16 too:
that kernel has no bfloat16 version, so it runs in float32 on the layer's bfloat16 operands
(``SequenceLSTM.call``). Each family's ``build_model`` decides whether its model fuses.
"""

from __future__ import annotations

import keras
import tensorflow as tf
from tensorflow.python.ops import gen_rnn_ops

__all__ = ["ForgetGateBias", "SequenceLSTM"]


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
        # Under a mixed policy the layer's autocast hands over the weights in the compute type.
        weights = tf.concat([tf.convert_to_tensor(cell.kernel), tf.convert_to_tensor(cell.recurrent_kernel)], axis=0)
        operands = [tf.transpose(sequences, [1, 0, 2]), weights, tf.convert_to_tensor(cell.bias)]
        if sequences.dtype == tf.bfloat16:
            # BlockLSTMV2 has half and float kernels, no bfloat16 one: bf16 runs the float32 kernel on
            # the bfloat16 inputs, weights and bias (widened exactly). The input projection's products
            # are then bf16 x bf16, exact in float32 and summed in float32, as a bf16 matmul with
            # float32 accumulation computes them; the recurrent state h(t-1), the cell state and the
            # gates stay float32 inside the kernel (as in cuDNN's half-precision RNNs), and the output
            # is rounded to bfloat16 like every other layer's. Keras's own LSTM, a tf.while_loop of
            # per-frame bf16 ops that casts the weights again in every frame, took 1.4x the fused
            # fp32 layer's time, forward and backward (ds2-mini, one AVX-512 BF16 core).
            operands = [tf.cast(operand, tf.float32) for operand in operands]
        hidden = _block_lstm(*operands)
        return tf.transpose(tf.cast(hidden, sequences.dtype), [1, 0, 2])


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
