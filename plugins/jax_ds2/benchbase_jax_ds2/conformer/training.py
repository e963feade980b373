"""The Conformer's padded batch, batch loss and jitted predict, in parallel with DS2's
(``benchbase_jax_ds2.ds2.training``): the same CTC loss (``benchbase_jax_ds2.ctc``), the same
step around it (``benchbase_jax_ds2.training``; the BatchNorms' running statistics in the
state's ``statistics``), one program per padded shape.

Unlike DS2's, the network needs each utterance's length, in training and in predict(): its
attention must not read the padded frames, nor its BatchNorm average over them. Rows the backend
pads on have length 0 (every frame padded, so no statistic sees them) and count zero in the loss.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import numpy as np

from benchbase.backend import Batch, Inputs
from benchbase.families.conformer.spec import ConformerModelSpec
from benchbase_jax_ds2.arithmetic import arithmetic, in_precision
from benchbase_jax_ds2.conformer.model import forward
from benchbase_jax_ds2.ctc import mean_over_rows
from benchbase_jax_ds2.family import BatchLoss
from benchbase_jax_ds2.shapes import Buckets, pad_rows, padded_labels

__all__ = ["CONFORMER_PRECISIONS", "ConformerBatch", "make_batch_loss", "make_predict", "padded_batch",
           "padded_lengths"]

CONFORMER_PRECISIONS = frozenset({"fp32", "tf32", "bf16", "fp16"})
"""IEEE float32; TF32 matmuls on GPUs; bf16 and fp16 operands with float32 accumulation and float32
elementwise work, as DS2's (fp16 with its dynamic loss scale, ``loss_scaling``). No int8-emulated
(the spec has no quantizable tensors)."""


class ConformerBatch(NamedTuple):
    """A batch padded to a compiled shape; ``rows`` is the harness's batch size, the other rows
    are padding of length 0, one output frame and no label."""

    features: jax.Array
    feature_lengths: jax.Array
    output_lengths: jax.Array
    labels: jax.Array
    label_lengths: jax.Array
    rows: jax.Array


def padded_lengths(buckets: Buckets, inputs: Inputs) -> np.ndarray:
    """The feature lengths continued with 0 to the bucket's rows (``buckets.features(inputs)``'s)."""
    return pad_rows(inputs.feature_lengths, buckets.row_count(inputs.size), 0)


def padded_batch(buckets: Buckets, batch: Batch, spec: ConformerModelSpec) -> ConformerBatch:
    """Every array of a ``ConformerBatch``, on the host; padded label positions hold the blank."""
    rows = batch.size
    padded_rows = buckets.row_count(rows)
    return ConformerBatch(
        features=buckets.features(batch),
        feature_lengths=padded_lengths(buckets, batch),
        # One output frame and no label: optax's CTC of a padded row is finite (and masked out).
        output_lengths=pad_rows(batch.output_lengths, padded_rows, 1),
        labels=padded_labels(buckets, batch, spec.ctc_blank_index),
        label_lengths=pad_rows(batch.label_lengths, padded_rows, 0),
        rows=np.int32(rows),
    )


def make_batch_loss(spec: ConformerModelSpec, platform: str = "cpu") -> BatchLoss:
    """The mean CTC loss over the harness's rows, an impossible alignment zero, and the running
    statistics this training pass leaves (``family.BatchLoss``), for a device of ``platform``."""
    math = arithmetic(spec, platform)  # outside the trace: it may probe the CPU's bf16 dots

    def batch_loss(parameters: dict, statistics: dict, batch: ConformerBatch,
                   dropout_key: jax.Array) -> tuple[jax.Array, dict]:
        log_probs, updated = forward(spec, parameters, statistics, batch.features, batch.feature_lengths,
                                     math, training=True, dropout_key=dropout_key)
        return mean_over_rows(spec, log_probs, batch), updated

    return batch_loss


def make_predict(spec: ConformerModelSpec, platform: str = "cpu"):
    """A jitted (parameters, statistics, features, rows, feature lengths) -> log-probs in inference
    mode. The lengths (one per padded row, 0 past the caller's rows: ``padded_lengths``) are all
    the masks need; ``rows`` is the protocol's and changes nothing here."""
    math = arithmetic(spec, platform)

    def predict(parameters: dict, statistics: dict, features: jax.Array, rows: jax.Array,
                lengths: jax.Array) -> jax.Array:
        del rows
        return forward(spec, parameters, statistics, features, lengths, math)[0]

    return jax.jit(in_precision(spec, predict))
