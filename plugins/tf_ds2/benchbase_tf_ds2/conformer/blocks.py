"""The Conformer block and its three kinds of module, with the masks of the NumPy reference
(``benchbase.families.conformer.reference``).

Each module reads the float32 residual stream and returns its branch in float32. Its dense
layers and its convolution run in the precision's compute type (Keras's mixed policy: the Dense
layers cast their inputs themselves, the rest casts by hand to ``compute``), its norms in
float32 (``normalization``), and the attention's softmax in float32: the residual stream, the
norms and the softmax stay float32 under bf16 and fp16, as under torch.autocast.
"""

from __future__ import annotations

import math

import keras
import tensorflow as tf

from benchbase.families.conformer.spec import ConformerModelSpec
from benchbase_tf_ds2.conformer.normalization import LayerNorm, MaskedBatchNorm
from benchbase_tf_ds2.cross_replica import ReplicaDropout

__all__ = ["QUERY_SCALE", "ConformerBlock", "dense"]

QUERY_SCALE = 1.442695041
"""1 / softplus(0): a query scale of 0 multiplies the queries by 1 (AlgoPerf's ``r_softplus_0``)."""


def dense(units: int, inputs: int, policy: str, name: str) -> keras.layers.Dense:
    """``x @ kernel + bias`` with the kernel (inputs, outputs) as the layout has it: Xavier-uniform
    with fans (inputs, units), the bias zero; built now, so that every variable exists after the
    model's construction, in a fixed order (the seeded initializers draw in that order)."""
    layer = keras.layers.Dense(units, kernel_initializer="glorot_uniform", bias_initializer="zeros",
                               name=name, dtype=policy)
    layer.build((None, inputs))
    return layer


class ConformerBlock(keras.layers.Layer):
    """x += FFN/2, x += MHSA, x += Conv, x += FFN/2, then LayerNorm (AlgoPerf's post-LN block)."""

    def __init__(self, spec: ConformerModelSpec, policy: str, name: str) -> None:
        super().__init__(name=name, dtype="float32")
        self.ff1 = FeedForward(spec, policy, "ff1")
        self.attention = SelfAttention(spec, policy, "attention")
        self.conv = ConvolutionModule(spec, policy, "conv")
        self.ff2 = FeedForward(spec, policy, "ff2")
        self.norm = LayerNorm(spec.encoder_dim, spec.layernorm_epsilon, "norm")
        self.built = True

    def call(self, x: tf.Tensor, valid: tf.Tensor, training: bool = False) -> tf.Tensor:
        x = x + 0.5 * self.ff1(x, valid, training=training)
        x = x + self.attention(x, valid, training=training)
        x = x + self.conv(x, valid, training=training)
        x = x + 0.5 * self.ff2(x, valid, training=training)
        return self.norm(x)


class FeedForward(keras.layers.Layer):
    """LayerNorm -> Dense(d, h) -> swish -> mask -> Dense(h, d) -> mask -> dropout."""

    def __init__(self, spec: ConformerModelSpec, policy: str, name: str) -> None:
        super().__init__(name=name, dtype="float32")
        d, hidden = spec.encoder_dim, spec.encoder_dim * spec.feed_forward_expansion
        self.norm = LayerNorm(d, spec.layernorm_epsilon, "norm")
        self.inner = dense(hidden, d, policy, "inner")
        self.outer = dense(d, hidden, policy, "outer")
        self.dropout = ReplicaDropout(spec.dropout, name="dropout")
        self.built = True

    def call(self, x: tf.Tensor, valid: tf.Tensor, training: bool = False) -> tf.Tensor:
        hidden = tf.nn.silu(self.inner(self.norm(x)))
        hidden = hidden * tf.cast(valid, hidden.dtype)
        out = self.outer(hidden)
        return self.dropout(tf.cast(out * tf.cast(valid, out.dtype), tf.float32), training=training)


class SelfAttention(keras.layers.Layer):
    """LayerNorm -> one Dense to queries, keys and values -> the learned per-dimension query scale
    -> softmax over the valid keys -> Dense -> dropout.

    A plain einsum and softmax rather than Keras's MultiHeadAttention, whose own query scaling,
    separate per-head kernels (d, heads, head_dim) and mask convention would each need undoing to
    compute the reference's. Padded keys get a weight of exactly zero: their scores are replaced by
    the float32 minimum before the softmax, whose exp underflows to 0 (a finite value, not -inf:
    a row of only padded keys, which no kit batch has, would then average rather than be NaN).
    Queries at padded frames still attend; as in AlgoPerf, their outputs are never read by a
    valid frame nor by the loss.
    """

    def __init__(self, spec: ConformerModelSpec, policy: str, name: str) -> None:
        super().__init__(name=name, dtype="float32")
        d = spec.encoder_dim
        self.heads, self.head_dim = spec.attention_heads, spec.head_dim
        self.compute = keras.DTypePolicy(policy).compute_dtype
        self.norm = LayerNorm(d, spec.layernorm_epsilon, "norm")
        self.qkv = dense(3 * d, d, policy, "qkv")
        self.query_scale = self.add_weight(shape=(spec.head_dim,), initializer="zeros", name="query_scale")
        self.output_layer = dense(d, d, policy, "output")
        self.dropout = ReplicaDropout(spec.dropout, name="dropout")
        self.built = True

    def call(self, x: tf.Tensor, valid: tf.Tensor, training: bool = False) -> tf.Tensor:
        batch, frames = tf.shape(x)[0], tf.shape(x)[1]
        qkv = self.qkv(self.norm(x))
        # Columns: queries, keys, values, each d wide, head j the j-th block of d / heads of them.
        q, k, v = tf.unstack(tf.reshape(qkv, [batch, frames, 3, self.heads, self.head_dim]), axis=2)
        # The learned scale, then the usual 1 / sqrt(head_dim), in float32, applied in the compute
        # type (torch's SDPA applies its 1 / sqrt(head_dim) there too).
        scale = QUERY_SCALE * tf.nn.softplus(self.query_scale) / math.sqrt(self.head_dim)
        q = q * tf.cast(scale, q.dtype)
        scores = tf.cast(tf.einsum("bqhc,bkhc->bhqk", q, k), tf.float32)
        keys = tf.cast(valid, tf.bool)[:, None, None, :, 0]  # (batch, 1, 1, keys)
        scores = tf.where(keys, scores, tf.float32.min)
        weights = tf.cast(tf.nn.softmax(scores, axis=-1), self.compute)
        attended = tf.reshape(tf.einsum("bhqk,bkhc->bqhc", weights, v), [batch, frames, self.heads * self.head_dim])
        return self.dropout(tf.cast(self.output_layer(attended), tf.float32), training=training)


class ConvolutionModule(keras.layers.Layer):
    """LayerNorm -> GLU -> mask -> depthwise conv -> BatchNorm over the valid frames -> swish
    -> Dense -> dropout."""

    def __init__(self, spec: ConformerModelSpec, policy: str, name: str) -> None:
        super().__init__(name=name, dtype="float32")
        d, width = spec.encoder_dim, spec.conv_kernel_size
        self.width = width
        self.compute = keras.DTypePolicy(policy).compute_dtype
        self.norm = LayerNorm(d, spec.layernorm_epsilon, "norm")
        self.glu = dense(2 * d, d, policy, "glu")
        # (width, channels), the layout's own: Xavier-uniform with the depthwise fans (one channel
        # in, one out: the width each), which Keras's glorot_uniform of any depthwise shape is not.
        limit = math.sqrt(6.0 / (2 * width))
        self.depthwise = self.add_weight(shape=(width, d), name="depthwise",
                                         initializer=keras.initializers.RandomUniform(-limit, limit))
        self.batchnorm = MaskedBatchNorm(d, spec.batchnorm_momentum, spec.batchnorm_epsilon, "batchnorm")
        self.output_layer = dense(d, d, policy, "output")
        self.dropout = ReplicaDropout(spec.dropout, name="dropout")
        self.built = True

    def call(self, x: tf.Tensor, valid: tf.Tensor, training: bool = False) -> tf.Tensor:
        values, gates = tf.split(self.glu(self.norm(x)), 2, axis=-1)
        # Zeroed before the depthwise convolution, so a valid frame near the end reads zeros past
        # it, not the padding's garbage.
        gated = values * tf.sigmoid(gates) * tf.cast(valid, values.dtype)
        half = (self.width - 1) // 2
        # tf.nn.depthwise_conv2d over (batch, 1, frames + 2 half, channels), one filter per
        # channel: y[t, c] = sum_j x[t + j - half, c] kernel[j, c], zeros past both ends.
        padded = tf.pad(gated, [[0, 0], [half, half], [0, 0]])[:, None]
        kernel = tf.cast(self.depthwise, self.compute)[None, :, :, None]  # (1, width, channels, 1)
        convolved = tf.nn.depthwise_conv2d(padded, kernel, strides=[1, 1, 1, 1], padding="VALID")[:, 0]
        normalized = self.batchnorm(convolved, valid, training=training)
        return self.dropout(tf.cast(self.output_layer(tf.nn.silu(normalized)), tf.float32), training=training)
