"""bf16 on a CPU: the fused LSTM kernel runs in float32 on the layer's bfloat16 operands, the
finding on bf16 LSTM speed on CPUs (Keras's own per-frame bf16 loop was the slower;
``benchbase_tf_ds2.lstm``)."""

from __future__ import annotations

import numpy as np
import pytest


def test_tf_bf16_fused_lstm_is_the_float32_kernel_on_bf16_operands():
    tf = pytest.importorskip("tensorflow")
    from benchbase_tf_ds2.lstm import SequenceLSTM

    def layer(policy):
        lstm = SequenceLSTM(16, True, dtype=policy)
        lstm.build((None, None, 12))
        return lstm

    bf16, fp32 = layer("mixed_bfloat16"), layer("float32")
    rng = np.random.default_rng(0)
    for low, full in zip(bf16.weights, fp32.weights):
        value = rng.uniform(-0.5, 0.5, low.shape).astype(np.float32)
        low.assign(value)
        full.assign(tf.cast(tf.cast(value, tf.bfloat16), tf.float32))  # the bf16 operands, widened
    x = tf.constant(rng.normal(size=(3, 9, 12)).astype(np.float32))
    with tf.GradientTape() as tape:
        found = bf16(x)
        loss = tf.reduce_sum(tf.cast(found, tf.float32) ** 2)
    gradients = tape.gradient(loss, bf16.trainable_weights)
    expected = fp32(tf.cast(tf.cast(x, tf.bfloat16), tf.float32))
    assert found.dtype == tf.bfloat16
    # The same float32 kernel on the same operands, then rounded to bf16 once.
    np.testing.assert_array_equal(found.numpy(), tf.cast(expected, tf.bfloat16).numpy())
    assert all(g.dtype == tf.float32 and np.isfinite(g.numpy()).all() and np.abs(g.numpy()).sum() > 0
               for g in gradients)
