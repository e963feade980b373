"""The Conformer of ``benchbase.families.conformer.spec`` in Keras 3 on TensorFlow (AlgoPerf's
LibriSpeech model), computing what the NumPy reference (``benchbase.families.conformer.reference``)
computes, mask for mask.

    features, lengths -> [3x3 conv, stride 2, ReLU, padded frames zeroed] x subsampling_layers
      -> flatten (frequency, channel) -> Dense -> + sinusoids -> dropout
      -> [x + FFN/2, x + MHSA, x + Conv, x + FFN/2, LayerNorm] x encoder_layers
      -> LayerNorm -> Dense -> log-softmax

Every layer that mixes frames sees the padded frames as zeros (the convolutions) or not at all
(the attention's keys, the BatchNorm's statistics), so an utterance's outputs at its valid frames
do not depend on the batch it is padded in: unlike DS2's, this model needs each row's length.
bf16 and fp16 are Keras's mixed precision, as DS2's (``benchbase_tf_ds2.family.keras_policy``;
``blocks`` says which parts stay float32).
"""

from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf

from benchbase.families.conformer.spec import ConformerModelSpec
from benchbase_tf_ds2.conformer.blocks import ConformerBlock, dense
from benchbase_tf_ds2.conformer.normalization import LayerNorm
from benchbase_tf_ds2.cross_replica import ReplicaDropout
from benchbase_tf_ds2.family import keras_policy

__all__ = ["Conformer", "Subsampling", "positions", "valid_frames"]


class Conformer(keras.Model):
    def __init__(self, spec: ConformerModelSpec, feature_dimension: int) -> None:
        """Every variable is created here, in the layout's order (the seeded initializers draw in it)."""
        super().__init__(name="conformer")
        self.spec, self.feature_dimension = spec, feature_dimension
        policy = keras_policy(spec)
        self.subsampling = Subsampling(spec, feature_dimension, policy)
        self.blocks = [ConformerBlock(spec, policy, f"block_{index}") for index in range(spec.encoder_layers)]
        self.final_norm = LayerNorm(spec.encoder_dim, spec.layernorm_epsilon, "final_norm")
        self.output_layer = dense(spec.symbols, spec.encoder_dim, policy, "output")
        self.built = True

    def call(self, features: tf.Tensor, feature_lengths: tf.Tensor | None = None, training: bool = False) -> tf.Tensor:
        """(batch, frames, features), lengths (batch,) -> log-probs (batch, output frames, symbols),
        float32 in every precision. Without lengths every frame is valid."""
        if feature_lengths is None:
            feature_lengths = tf.fill(tf.shape(features)[:1], tf.shape(features)[1])
        x, lengths = self.subsampling(features, feature_lengths, training=training)
        valid = valid_frames(lengths, tf.shape(x)[1])[:, :, None]  # (batch, frames, 1)
        for block in self.blocks:
            x = block(x, valid, training=training)
        logits = self.output_layer(self.final_norm(x))
        return tf.nn.log_softmax(tf.cast(logits, tf.float32), axis=-1)


class Subsampling(keras.layers.Layer):
    """The strided convolutions, the projection to encoder_dim, the positions and the dropout."""

    def __init__(self, spec: ConformerModelSpec, feature_dimension: int, policy: str) -> None:
        super().__init__(name="subsampling", dtype="float32")
        d = spec.encoder_dim
        self.compute = keras.DTypePolicy(policy).compute_dtype
        self.max_timescale = spec.max_timescale
        # (time, frequency, in, out), the layout's: Keras's glorot_uniform of a 4-D shape takes
        # the spec's fans, the receptive field (9) times the input and the output channels.
        self.kernels, self.biases = [], []
        for layer in range(spec.subsampling_layers):
            self.kernels.append(self.add_weight(shape=(3, 3, 1 if layer == 0 else d, d), name=f"conv_{layer}_kernel",
                                                initializer="glorot_uniform"))
            self.biases.append(self.add_weight(shape=(d,), name=f"conv_{layer}_bias", initializer="zeros"))
        self.flattened = spec.subsampled_bins(feature_dimension) * d
        self.projection = dense(d, self.flattened, policy, "projection")
        self.dropout = ReplicaDropout(spec.dropout, name="dropout")
        self.built = True

    def call(self, features: tf.Tensor, lengths: tf.Tensor, training: bool = False) -> tuple[tf.Tensor, tf.Tensor]:
        """(batch, frames, F), lengths -> (batch, T', d) float32 and each row's T'."""
        # The harness pads with zeros already; zeroing here makes the valid outputs independent of
        # whatever a caller pads with, as the torch family's.
        frames = tf.shape(features)[1]
        x = features * tf.cast(valid_frames(lengths, frames), features.dtype)[:, :, None]
        x = tf.cast(x, self.compute)[..., None]  # (batch, time, frequency, 1): NHWC
        for kernel, bias in zip(self.kernels, self.biases):
            # Two zero rows after the last of time and frequency, then a VALID stride-2 convolution:
            # output row i reads rows 2i .. 2i+2 and there are ceil(n / 2) of them whatever the
            # batch's padded length (TensorFlow's SAME of an odd length would start at row 2i - 1).
            x = tf.pad(x, [[0, 0], [0, 2], [0, 2], [0, 0]])
            x = tf.nn.conv2d(x, tf.cast(kernel, self.compute), strides=2, padding="VALID")
            x = tf.nn.relu(x + tf.cast(bias, self.compute))
            lengths = (lengths + 1) // 2
            x = x * tf.cast(valid_frames(lengths, tf.shape(x)[1]), x.dtype)[:, :, None, None]
        batch, time = tf.shape(x)[0], tf.shape(x)[1]
        x = tf.reshape(x, [batch, time, self.flattened])  # row f * C + c (channels last), as the layout has it
        x = tf.cast(self.projection(x), tf.float32) + positions(time, self.projection.units, self.max_timescale)
        return self.dropout(x, training=training), lengths


def positions(frames: tf.Tensor, dimension: int, max_timescale: float) -> tf.Tensor:
    """(frames, dimension) float32: sin(p w_k) in the first half, cos(p w_k) in the second,
    w_k = max_timescale ** (-k / (d/2 - 1)), computed in float64 and rounded once to float32, as
    the spec pins (float32 angles drift by a few roundings at thousands of frames)."""
    half = dimension // 2
    timescales = np.exp(np.arange(half) * -(np.log(max_timescale) / max(half - 1, 1)))  # the reference's, float64
    angles = tf.cast(tf.range(frames), tf.float64)[:, None] * tf.constant(timescales, tf.float64)[None, :]
    return tf.cast(tf.concat([tf.sin(angles), tf.cos(angles)], axis=1), tf.float32)


def valid_frames(lengths: tf.Tensor, frames: tf.Tensor) -> tf.Tensor:
    """(batch, frames) float32: 1 at each row's first ``lengths`` frames, 0 past them."""
    return tf.sequence_mask(lengths, frames, dtype=tf.float32)
