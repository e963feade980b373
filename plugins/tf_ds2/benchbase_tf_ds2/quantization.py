"""int8-emulated in TensorFlow: fake quantization exactly as ``ModelSpec.quantization`` pins it.

These are the primitives both families' models build their int8-emulated passes from (the DS2
model's ``_quantized_call``, the transducer's ``rnnt.quantization.TransducerQuantizer``).

``benchbase.numerics.quantization`` is the NumPy reference these functions are tested against
(tests/test_precision.py): the same float32 operations in the same order (tf.round rounds
half to even, as NumPy does). The straight-through gradient is ``x + stop_gradient(q(x) - x)``:
the forward value is exactly q(x), the backward pass sees the identity, of the clip to the
range for activations (zero where one saturated); no gradient reaches a scale or a range.

TensorFlow's own ``fake_quant_with_min_max_vars`` is not used: it nudges the range so that
zero lands on the grid of an asymmetric 0..255 code, which is another scheme than the spec's.
"""

from __future__ import annotations

import tensorflow as tf

from benchbase.specs.workload import QuantizationSpec

__all__ = ["fake_quantize", "quantize_activation", "quantize_state", "quantize_weight", "quantized_lstm",
           "updated_range"]


def fake_quantize(x: tf.Tensor, scale: tf.Tensor, qmax: int) -> tf.Tensor:
    """clip(round_half_even(x / scale), -qmax, qmax) * scale."""
    return tf.clip_by_value(tf.round(x / scale), -float(qmax), float(qmax)) * scale


def quantize_weight(spec: QuantizationSpec, weight) -> tf.Tensor:
    weight = tf.convert_to_tensor(weight)
    largest = tf.stop_gradient(tf.reduce_max(tf.abs(weight)))
    scale = tf.where(largest > 0, largest / spec.qmax, tf.ones_like(largest))
    return weight + tf.stop_gradient(fake_quantize(weight, scale, spec.qmax) - weight)


def quantize_activation(spec: QuantizationSpec, x: tf.Tensor, value_range: tf.Tensor) -> tf.Tensor:
    """``x`` fake-quantized with ``value_range``, saturating beyond it."""
    value_range = tf.stop_gradient(value_range)
    scale = tf.where(value_range > 0, value_range / spec.qmax, tf.ones_like(value_range))
    clipped = tf.clip_by_value(x, -value_range, value_range)
    return clipped + tf.stop_gradient(fake_quantize(clipped, scale, spec.qmax) - clipped)


def quantize_state(spec: QuantizationSpec, h: tf.Tensor) -> tf.Tensor:
    """h(t-1) before the recurrent matmul, at the fixed range (|h| < 1: nothing saturates)."""
    scale = tf.constant(spec.recurrent_state_range, tf.float32) / spec.qmax
    return h + tf.stop_gradient(fake_quantize(h, scale, spec.qmax) - h)


def updated_range(spec: QuantizationSpec, stored: tf.Tensor, batch_max: tf.Tensor) -> tf.Tensor:
    """The range after a training step: the batch's max|x| at the first step (range 0), else the moving average."""
    momentum = spec.range_momentum
    return tf.where(stored == 0, batch_max, stored * momentum + batch_max * (1.0 - momentum))


def quantized_lstm(x: tf.Tensor, kernel: tf.Tensor, recurrent_kernel: tf.Tensor, bias: tf.Tensor,
                   spec: QuantizationSpec | None) -> tf.Tensor:
    """An LSTM (gates i, f, c, o as Keras; zero initial state) over (batch, frames, inputs), frame by frame.

    Neither BlockLSTM nor cuDNN can quantize h(t-1) inside their loop, so the emulation is a
    ``tf.scan`` with autodiff through it; ``spec`` None leaves h(t-1) unquantized.
    """
    projected = tf.einsum("bti,ig->tbg", x, kernel) + bias  # every frame's input part at once
    zeros = tf.zeros(tf.stack([tf.shape(x)[0], tf.shape(recurrent_kernel)[0]]), x.dtype)

    def step(carry, z):
        h, c = carry
        state = h if spec is None else quantize_state(spec, h)
        i, f, g, o = tf.split(z + tf.matmul(state, recurrent_kernel), 4, axis=-1)
        c = tf.sigmoid(f) * c + tf.sigmoid(i) * tf.tanh(g)
        return tf.sigmoid(o) * tf.tanh(c), c

    hidden, _ = tf.scan(step, projected, initializer=(zeros, zeros))
    return tf.transpose(hidden, [1, 0, 2])
