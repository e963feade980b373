"""What makes a step on several replicas one step on the global batch: statistics shared across replicas.

Under ``tf.distribute.MirroredStrategy`` each replica runs the model on its own slice of the
global batch, and every variable has one copy per replica. Gradients are all-reduced by the
optimizer; the state a forward pass updates (BatchNorm's running statistics, int8-emulated's
activation ranges, dropout's seed) is updated by each replica on its own copy. Here BatchNorm's
statistics and the ranges become the global batch's, so every replica computes the same update
and its copies stay identical and equal (rounding aside) to what one device training on the
whole batch would hold; dropout draws a different mask on each replica from the shared seed.
On a single replica, or outside ``strategy.run``, each of them is the plain Keras or TensorFlow
computation.

Under MultiWorkerMirroredStrategy (one process per machine) the same holds across processes: a
replica context's all-reduce, ``num_replicas_in_sync`` and ``replica_id_in_sync_group`` span
every replica of every worker, so the statistics and ranges are the global batch's there too,
and each replica draws the mask that the replica of the same number in one process would.
"""

from __future__ import annotations

import keras
import tensorflow as tf

__all__ = ["CrossReplicaBatchNormalization", "ReplicaDropout", "cross_replica_max", "replica_context"]


def replica_context() -> tf.distribute.ReplicaContext | None:
    """The context of the replica being traced when there are several, else None."""
    context = tf.distribute.get_replica_context()
    if context is None or context.num_replicas_in_sync == 1:
        return None
    return context


def cross_replica_max(value: tf.Tensor) -> tf.Tensor:
    """The largest of the replicas' scalar ``value``s, on every replica (``value`` itself on one replica).

    tf.distribute's all-reduce has no MAX (``ReduceOp`` is SUM or MEAN). Each replica writes its
    value into its own slot of a zero vector instead; the SUM of those vectors holds every
    replica's value exactly (x + 0 == x), so their maximum is exact too.
    """
    context = replica_context()
    if context is None:
        return value
    slots = tf.one_hot(context.replica_id_in_sync_group, context.num_replicas_in_sync, on_value=value,
                       off_value=tf.zeros_like(value), dtype=value.dtype)
    return tf.reduce_max(context.all_reduce(tf.distribute.ReduceOp.SUM, slots))


class CrossReplicaBatchNormalization(keras.layers.BatchNormalization):
    """Keras's BatchNormalization whose training statistics are the global batch's on several replicas.

    Keras's own ``synchronized=True`` computes the variance as E[x²] - E[x]², which loses float32
    digits to cancellation when the mean is large against the spread. This is the two passes of
    ``tf.nn.moments`` (what one replica computes) with each sum all-reduced: the global mean,
    then the biased variance around it, over every frame of every replica's padded slice. The
    all-reduce's gradient is itself an all-reduce, so each replica's gradient accounts for the
    other replicas' losses through the shared statistics.

    ``_moments`` is Keras's own hook for the training statistics (a private one: the
    one-versus-two-replica tests in plugins/tf_ds2/tests/test_tf_distributed.py fail if Keras stops calling it).
    """

    def _moments(self, inputs, mask):
        context = replica_context()
        if context is None or mask is not None:
            return super()._moments(inputs, mask)
        return _global_moments(inputs, self._reduction_axes, context)


def _global_moments(x: tf.Tensor, axes: list[int], context: tf.distribute.ReplicaContext):
    # The count travels with the sums (one all-reduce), so no replica assumes the others' shapes.
    count = tf.cast(tf.reduce_prod(tf.gather(tf.shape(x), axes)), x.dtype)
    sums = context.all_reduce(tf.distribute.ReduceOp.SUM, tf.concat([tf.reduce_sum(x, axis=axes), [count]], 0))
    total = sums[-1]
    mean = sums[:-1] / total
    # As tf.nn.moments: the mean is a constant in the variance's gradient, whose term through the
    # mean is zero anyway (the deviations from the global mean sum to zero over the global batch).
    squared_deviations = tf.reduce_sum(tf.math.squared_difference(x, tf.stop_gradient(mean)), axis=axes)
    variance = context.all_reduce(tf.distribute.ReduceOp.SUM, squared_deviations) / total
    return mean, variance


class ReplicaDropout(keras.layers.Dropout):
    """Keras's Dropout, drawing an independent mask on each replica.

    Every replica advances its own copy of the layer's seed state in step with the others, so
    Keras's Dropout would draw the same mask on every replica: row i of each slice would share
    its mask with row i of every other slice, which one device's mask over the whole batch never
    does. Each replica past the first offsets the seed by its replica id; replica 0 (and a single
    replica) keeps Keras's own seed and masks.
    """

    def call(self, inputs, training=False):
        context = replica_context()
        if not (training and self.rate > 0) or context is None:
            return super().call(inputs, training=training)
        seed = self.seed_generator.next()
        offset = tf.cast(tf.stack([context.replica_id_in_sync_group, 0]), seed.dtype)
        # Keras's own reduction of its int64 seed state to the int32 seed the stateless ops take.
        seed = tf.cast(tf.math.floormod(seed + offset, tf.int32.max - 1), tf.int32)
        return tf.nn.experimental.stateless_dropout(inputs, rate=self.rate, seed=seed)
