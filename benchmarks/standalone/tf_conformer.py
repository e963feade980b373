"""conformer-mini in plain TensorFlow with Keras layers: Dense, LayerNormalization, Conv2D,
DepthwiseConv1D and BatchNormalization, the attention as einsum and softmax, tf.nn.ctc_loss on
sparse labels (TensorFlow's CTC kernel), tf.clip_by_global_norm and keras.optimizers.AdamW,
the whole step one tf.function."""

from __future__ import annotations

import math
from collections.abc import Callable

import keras
import numpy as np
import tensorflow as tf

from standalone.conformer_mini import (
    ATTENTION_HEADS,
    BATCH,
    BATCHNORM_EPSILON,
    BATCHNORM_MOMENTUM,
    BETA1,
    BETA2,
    BLANK,
    CLIP_NORM,
    CONV_KERNEL_SIZE,
    DROPOUT,
    ENCODER_DIM,
    ENCODER_LAYERS,
    EPSILON,
    HEAD_DIM,
    HIDDEN,
    LAYERNORM_EPSILON,
    LEARNING_RATE,
    OP_ATTENTION,
    OP_DEPTHWISE,
    OP_FEED_FORWARD,
    OP_OUTPUT,
    OP_PROJECTION,
    OP_QKV,
    OP_SUBSAMPLING,
    PROJECTED,
    SUBSAMPLING_LAYERS,
    SYMBOLS,
    WEIGHT_DECAY,
    Batch,
    key_valid,
    sinusoids,
)

__all__ = ["operations", "training_step"]

layers = keras.layers


def _dropout(x: tf.Tensor, training: bool) -> tf.Tensor:
    return tf.nn.dropout(x, DROPOUT) if training else x


def attention(q: tf.Tensor, k: tf.Tensor, v: tf.Tensor, keys: tf.Tensor) -> tf.Tensor:
    """(batch, frames, heads, head_dim) each -> the same, a softmax over the valid keys."""
    scores = tf.einsum("bqhc,bkhc->bhqk", q, k) / math.sqrt(HEAD_DIM)
    weights = tf.nn.softmax(tf.where(keys, scores, -1e9), axis=-1)
    return tf.einsum("bhqk,bkhc->bqhc", weights, v)


class FeedForward(layers.Layer):
    def __init__(self) -> None:
        super().__init__()
        self.norm = layers.LayerNormalization(epsilon=LAYERNORM_EPSILON)
        self.inner, self.outer = layers.Dense(HIDDEN), layers.Dense(ENCODER_DIM)

    def call(self, x: tf.Tensor) -> tf.Tensor:
        return self.outer(tf.nn.silu(self.inner(self.norm(x))))


class SelfAttention(layers.Layer):
    def __init__(self) -> None:
        super().__init__()
        self.norm = layers.LayerNormalization(epsilon=LAYERNORM_EPSILON)
        self.qkv, self.output_dense = layers.Dense(3 * ENCODER_DIM), layers.Dense(ENCODER_DIM)

    def call(self, x: tf.Tensor, keys: tf.Tensor) -> tf.Tensor:
        batch, frames = tf.shape(x)[0], tf.shape(x)[1]
        qkv = tf.reshape(self.qkv(self.norm(x)), [batch, frames, 3, ATTENTION_HEADS, HEAD_DIM])
        q, k, v = tf.unstack(qkv, axis=2)
        return self.output_dense(tf.reshape(attention(q, k, v, keys), [batch, frames, ENCODER_DIM]))


class ConvolutionModule(layers.Layer):
    """LayerNorm -> GLU -> depthwise conv -> BatchNorm -> swish -> Dense."""

    def __init__(self) -> None:
        super().__init__()
        self.norm = layers.LayerNormalization(epsilon=LAYERNORM_EPSILON)
        self.glu = layers.Dense(2 * ENCODER_DIM)
        self.depthwise = layers.DepthwiseConv1D(CONV_KERNEL_SIZE, padding="same", use_bias=False)
        self.batchnorm = layers.BatchNormalization(momentum=BATCHNORM_MOMENTUM, epsilon=BATCHNORM_EPSILON)
        self.output_dense = layers.Dense(ENCODER_DIM)

    def call(self, x: tf.Tensor, training: bool = False) -> tf.Tensor:
        values, gates = tf.split(self.glu(self.norm(x)), 2, axis=-1)
        normalized = self.batchnorm(self.depthwise(values * tf.sigmoid(gates)), training=training)
        return self.output_dense(tf.nn.silu(normalized))


class ConformerBlock(layers.Layer):
    def __init__(self) -> None:
        super().__init__()
        self.ff1, self.attention, self.conv = FeedForward(), SelfAttention(), ConvolutionModule()
        self.ff2 = FeedForward()
        self.norm = layers.LayerNormalization(epsilon=LAYERNORM_EPSILON)

    def call(self, x: tf.Tensor, keys: tf.Tensor, training: bool = False) -> tf.Tensor:
        x = x + 0.5 * _dropout(self.ff1(x), training)
        x = x + _dropout(self.attention(x, keys), training)
        x = x + _dropout(self.conv(x, training=training), training)
        x = x + 0.5 * _dropout(self.ff2(x), training)
        return self.norm(x)


class Conformer(keras.Model):
    def __init__(self) -> None:
        super().__init__()
        self.convs = [layers.Conv2D(ENCODER_DIM, 3, strides=2, padding="same", activation="relu")
                      for _ in range(SUBSAMPLING_LAYERS)]
        self.projection = layers.Dense(ENCODER_DIM)
        self.blocks = [ConformerBlock() for _ in range(ENCODER_LAYERS)]
        self.final_norm = layers.LayerNormalization(epsilon=LAYERNORM_EPSILON)
        self.output_layer = layers.Dense(SYMBOLS)

    def call(self, features: tf.Tensor, keys: tf.Tensor, positions: tf.Tensor, training: bool = False) -> tf.Tensor:
        """(batch, frames, features) -> logits (batch, output frames, symbols)."""
        x = features[..., None]  # (batch, time, frequency, 1)
        for conv in self.convs:
            x = conv(x)
        x = tf.reshape(x, [tf.shape(x)[0], tf.shape(x)[1], PROJECTED])  # row f * C + c
        x = _dropout(self.projection(x) + positions, training)
        for block in self.blocks:
            x = block(x, keys, training=training)
        return self.output_layer(self.final_norm(x))


def training_step(batch: Batch, seed: int) -> Callable[[], float]:
    """One training step on ``batch`` per call (one tf.function); returns the loss."""
    keras.utils.set_random_seed(seed)
    model = Conformer()
    features = tf.constant(batch.features)
    keys = tf.constant(key_valid(batch.output_lengths))
    positions = tf.constant(sinusoids(keys.shape[-1]))
    model(features[:1], keys[:1], positions)  # builds every layer, eagerly
    optimizer = keras.optimizers.AdamW(learning_rate=LEARNING_RATE, weight_decay=WEIGHT_DECAY, beta_1=BETA1,
                                       beta_2=BETA2, epsilon=EPSILON)
    optimizer.build(model.trainable_variables)
    labels = tf.sparse.from_dense(tf.constant(batch.labels))  # the BLANK (0) past each length left out
    output_lengths = tf.constant(batch.output_lengths)

    @tf.function
    def train() -> tf.Tensor:
        with tf.GradientTape() as tape:
            logits = model(features, keys, positions, training=True)
            losses = tf.nn.ctc_loss(labels=labels, logits=logits, label_length=None, logit_length=output_lengths,
                                    logits_time_major=False, blank_index=BLANK)
            loss = tf.reduce_sum(losses) / BATCH
        gradients, _ = tf.clip_by_global_norm(tape.gradient(loss, model.trainable_variables), CLIP_NORM)
        optimizer.apply(gradients, model.trainable_variables)
        return loss

    return lambda: float(train())


def operations(batch: Batch, seed: int) -> dict[str, Callable[[], object]]:
    """Operation name (``conformer_mini.OPERATIONS``) -> a call of its forward and backward."""
    keras.utils.set_random_seed(seed)
    rng = np.random.default_rng(seed)
    frames = int(batch.output_lengths.max())

    def normal(*shape: int) -> tf.Tensor:
        return tf.constant(rng.standard_normal(shape, dtype=np.float32))

    keys = tf.constant(key_valid(batch.output_lengths))
    feed_forward, self_attention, convolution = FeedForward(), SelfAttention(), ConvolutionModule()
    projection = layers.Dense(ENCODER_DIM)
    conv = layers.Conv2D(ENCODER_DIM, 3, strides=2, padding="same", activation="relu")
    features, encoded = tf.constant(batch.features[..., None]), normal(BATCH, frames, ENCODER_DIM)
    heads = [normal(BATCH, frames, ATTENTION_HEADS, HEAD_DIM) for _ in range(3)]
    inner, outer = feed_forward.inner, feed_forward.outer
    depthwise, batchnorm = convolution.depthwise, convolution.batchnorm
    return {
        OP_PROJECTION: _gradients(projection, [normal(BATCH, frames, PROJECTED)], [projection]),
        OP_FEED_FORWARD: _gradients(lambda x: outer(tf.nn.silu(inner(x))), [encoded], [inner, outer]),
        OP_QKV: _gradients(self_attention.qkv, [encoded], [self_attention.qkv]),
        OP_OUTPUT: _gradients(self_attention.output_dense, [encoded], [self_attention.output_dense]),
        OP_ATTENTION: _gradients(lambda q, k, v: attention(q, k, v, keys), heads),
        OP_DEPTHWISE: _gradients(lambda x: batchnorm(depthwise(x), training=True), [encoded], [depthwise, batchnorm]),
        # The features are data: no gradient of the convolution's input.
        OP_SUBSAMPLING: _gradients(lambda: conv(features), [], [conv]),
    }


def _gradients(function: Callable, inputs: list, parts: list = ()) -> Callable[[], object]:
    """A call (one tf.function) computes ``function(*inputs)`` and the gradients of its inputs and
    of the layers' weights for a fixed random cotangent. The output is returned too: a graph
    would otherwise prune a forward pass that no gradient needs (a linear layer's), which eager
    PyTorch cannot."""
    output = function(*inputs)  # eagerly, once: builds the layers
    variables = [variable for layer in parts for variable in layer.trainable_variables]
    cotangent = tf.constant(np.random.default_rng(0).standard_normal(output.shape, dtype=np.float32))

    @tf.function
    def gradients(*arguments: tf.Tensor) -> tuple[tf.Tensor, list[tf.Tensor]]:
        # The function's own arguments: a tape watching the eager tensors it captured would find
        # the graph never read them, and leave their gradients out.
        with tf.GradientTape() as tape:
            tape.watch(arguments)
            result = function(*arguments)
        return result, tape.gradient(result, [*arguments, *variables], output_gradients=cotangent)

    return lambda: gradients(*inputs)
