"""The Conformer's two normalizations, as ``benchbase.families.conformer.spec`` pins them.

Both scale by ``1 + scale`` (the scale initialised to 0, AlgoPerf's convention), so neither is
Keras's layer with its gamma of ones. Both compute in float32 in every precision (their layers'
dtype policy is float32, so Keras casts a half-precision input up): the statistics of a frame,
or of a few thousand frames, lose too much in bfloat16, as torch.autocast keeps its norms float32.

The BatchNorm averages over the utterances' own frames only. Keras's (and DS2's) averages over
every frame of the padded batch, which would make an utterance's output depend on how much
padding the batch it trains in carries. Over several tf.distribute replicas its statistics are
the global batch's valid frames, as DS2's ``CrossReplicaBatchNormalization`` makes its own.
"""

from __future__ import annotations

import keras
import tensorflow as tf

from benchbase_tf_ds2.cross_replica import replica_context

__all__ = ["LayerNorm", "MaskedBatchNorm", "masked_moments"]


class LayerNorm(keras.layers.Layer):
    """``(x - mean) / sqrt(var + eps) * (1 + scale) + bias`` over the last dimension, in float32."""

    def __init__(self, width: int, epsilon: float, name: str) -> None:
        super().__init__(name=name, dtype="float32")
        self.epsilon = epsilon
        self.scale = self.add_weight(shape=(width,), initializer="zeros", name="scale")
        self.bias = self.add_weight(shape=(width,), initializer="zeros", name="bias")
        self.built = True

    def call(self, x: tf.Tensor) -> tf.Tensor:
        mean = tf.reduce_mean(x, axis=-1, keepdims=True)
        centered = x - mean
        variance = tf.reduce_mean(tf.square(centered), axis=-1, keepdims=True)
        return centered * tf.math.rsqrt(variance + self.epsilon) * (1.0 + self.scale) + self.bias


class MaskedBatchNorm(keras.layers.Layer):
    """BatchNorm of (batch, frames, channels) over the valid frames of every row, in float32.

    Training normalizes with the mean and biased variance of every valid frame and folds them into
    the running statistics, ``running = keep * running + (1 - keep) * batch`` (``batchnorm_momentum``
    is the share kept: Keras's convention); inference normalizes with the running statistics.
    Padded frames of the output are zero.
    """

    def __init__(self, width: int, momentum: float, epsilon: float, name: str) -> None:
        super().__init__(name=name, dtype="float32")
        self.momentum, self.epsilon = momentum, epsilon
        self.scale = self.add_weight(shape=(width,), initializer="zeros", name="scale")
        self.offset = self.add_weight(shape=(width,), initializer="zeros", name="offset")
        # Created as Keras's BatchNormalization creates its moving statistics (state, not
        # parameters; updated by each replica on its own copy, which the global statistics keep equal).
        self.mean = self.add_weight(shape=(width,), initializer="zeros", name="mean", trainable=False,
                                    autocast=False)
        self.variance = self.add_weight(shape=(width,), initializer="ones", name="variance", trainable=False,
                                        autocast=False)
        self.built = True

    def call(self, x: tf.Tensor, valid: tf.Tensor, training: bool = False) -> tf.Tensor:
        """``valid``: (batch, frames, 1), 1 at each row's own frames and 0 past its length."""
        valid = tf.cast(valid, x.dtype)
        if training:
            mean, variance = masked_moments(x, valid)
            keep = self.momentum
            self.mean.assign(self.mean * keep + tf.stop_gradient(mean) * (1.0 - keep))
            self.variance.assign(self.variance * keep + tf.stop_gradient(variance) * (1.0 - keep))
        else:
            mean, variance = tf.convert_to_tensor(self.mean), tf.convert_to_tensor(self.variance)
        normalized = (x - mean) * tf.math.rsqrt(variance + self.epsilon)
        return (normalized * (1.0 + self.scale) + self.offset) * valid


def masked_moments(x: tf.Tensor, valid: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """Per channel, the mean and biased variance of the valid frames: this replica's, or, under
    tf.distribute with several replicas, those of every replica's valid frames.

    Two passes, as DS2's cross-replica BatchNorm (``benchbase_tf_ds2.cross_replica``): the sums and
    the count all-reduced together (the replicas' slices hold different numbers of valid frames),
    then the squared deviations around the global mean, with no E[x^2] - E[x]^2 cancellation. The
    all-reduce's gradient is itself an all-reduce, so each replica's gradient accounts for the
    other replicas' losses through the shared statistics.
    """
    context = replica_context()
    axes = [0, 1]
    sums = tf.concat([tf.reduce_sum(x * valid, axis=axes), tf.reshape(tf.reduce_sum(valid), [1])], axis=0)
    if context is not None:
        sums = context.all_reduce(tf.distribute.ReduceOp.SUM, sums)
    count = sums[-1]
    mean = sums[:-1] / count
    # As tf.nn.moments: the mean is a constant in the variance's gradient, whose term through the
    # mean is zero anyway (the valid deviations from the mean sum to zero).
    squared = tf.reduce_sum(tf.square((x - tf.stop_gradient(mean)) * valid), axis=axes)
    if context is not None:
        squared = context.all_reduce(tf.distribute.ReduceOp.SUM, squared)
    return mean, squared / count
