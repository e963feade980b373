"""The CTC families' loss in TensorFlow (ds2, the Conformer): each utterance's CTC loss, as the spec pins it.

The counterpart of benchbase_tf_ds2.rnnt.loss's transducer loss: ``TensorFlowBackend``'s replica
step asks the family (``ds2/family.py``, ``conformer/family.py``) for the utterances' losses and
sums them itself.
"""

from __future__ import annotations

import keras
import tensorflow as tf

from benchbase.specs import ModelSpec

__all__ = ["utterance_losses"]


def utterance_losses(model: keras.Model, spec: ModelSpec, features: tf.Tensor, output_lengths: tf.Tensor,
                     labels: tf.Tensor, label_lengths: tf.Tensor) -> tf.Tensor:
    """Each utterance's CTC negative log-likelihood (batch,), float32, 0 where no alignment exists."""
    log_probs = tf.cast(model(features, training=True), tf.float32)
    # TensorFlow's CTC kernel raises on an utterance whose labels cannot fit its frames
    # (the spec's ctc_impossible_alignments: zero). Such a row gets a one-label stand-in
    # that always fits, and its loss is replaced by zero below, so it adds no gradient.
    feasible = _alignable(output_lengths, labels, label_lengths)
    fitting_lengths = tf.where(feasible, label_lengths, tf.ones_like(label_lengths))
    # Sparse labels: TensorFlow then swaps in cuDNN's CTC kernel on a GPU.
    losses = tf.nn.ctc_loss(labels=_sparse_labels(labels, fitting_lengths), logits=log_probs, label_length=None,
                            logit_length=output_lengths, logits_time_major=False,
                            blank_index=spec.blank_index)
    return tf.where(feasible & tf.math.is_finite(losses), losses, tf.zeros_like(losses))


def _alignable(output_lengths: tf.Tensor, labels: tf.Tensor, label_lengths: tf.Tensor) -> tf.Tensor:
    """Rows with a CTC alignment: a frame per label, plus a blank between each repeated pair."""
    inside = tf.sequence_mask(label_lengths - 1, tf.shape(labels)[1] - 1)
    repeats = tf.reduce_sum(tf.cast((labels[:, 1:] == labels[:, :-1]) & inside, tf.int32), axis=1)
    return output_lengths >= label_lengths + repeats


def _sparse_labels(labels: tf.Tensor, label_lengths: tf.Tensor) -> tf.SparseTensor:
    valid = tf.sequence_mask(label_lengths, tf.shape(labels)[1])
    indices = tf.where(valid)
    return tf.SparseTensor(indices, tf.gather_nd(labels, indices), tf.shape(labels, out_type=tf.int64))
