"""The transducer's batch loss and jitted predict, in parallel with DS2's
(``benchbase_jax_ds2.ds2.training``): the same step around the loss (``benchbase_jax_ds2.training``)
over the same ``TrainState`` pytree (``benchbase_jax_ds2.state``; without running statistics but
int8-emulated's ranges), the same optimizers, the same precision and donation rules.

The batch loss is ``loss_reduction`` "mean_over_batch": each utterance's negative log-likelihood
summed, divided by the harness's batch size. Rows the backend pads on have no output frame, so
the loss counts them zero with zero gradient, as it counts an utterance too short for the encoder.

int8-emulated keeps its activation ranges where DS2 keeps its running statistics, in the state's
``statistics`` (so export, import and checkpoints carry them, and the optimizer never sees them);
a training step returns the ranges its forward pass updated (``rnnt.model.Quantizer``). The backend
trains on one device, so a batch's max|x| is the whole batch's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp

from benchbase.families.rnnt.spec import RNNTModelSpec
from benchbase_jax_ds2.arithmetic import arithmetic, in_precision
from benchbase_jax_ds2.family import BatchLoss
from benchbase_jax_ds2.rnnt.loss import transducer_losses
from benchbase_jax_ds2.rnnt.model import (
    Extent,
    Parameters,
    Quantizer,
    dropout_keys,
    encode,
    lattice,
    predict_labels,
)

__all__ = ["TRANSDUCER_PRECISIONS", "TransducerBatch", "batch_loss", "make_batch_loss", "make_predict"]

TRANSDUCER_PRECISIONS = frozenset({"fp32", "tf32", "bf16", "fp16", "int8-emulated"})
"""What the JAX backend implements for rnnt: IEEE float32, TF32 matmuls on GPUs (the model's
matmuls at XLA's default precision), bf16 and fp16 (every matmul's operands in bfloat16 or float16
with float32 accumulation, the gates, the joint's log-softmax and the loss in float32:
``Arithmetic``; fp16 with DS2's dynamic loss scale, ``loss_scaling``), and int8-emulated (fake
quantization, float32 arithmetic)."""


class TransducerBatch(NamedTuple):
    """A batch padded to a compiled shape (``rnnt.padding.padded_batch``); ``rows`` is the
    harness's batch size, the other rows are padding with no output frame and no label."""

    features: jax.Array
    output_lengths: jax.Array
    labels: jax.Array
    label_lengths: jax.Array
    cells: jax.Array
    """The lattice cells the joint computes (``model.lattice``)."""
    rows: jax.Array
    frames: jax.Array
    """The feature frames of the harness's padded batch, which int8-emulated's ranges are over."""
    label_width: jax.Array
    """U of the harness's padded labels."""


def batch_loss(spec: RNNTModelSpec, parameters: Parameters, statistics: Parameters, batch: TransducerBatch,
               dropout_key: jax.Array | None = None, platform: str = "cpu") -> tuple[jax.Array, Parameters]:
    """(the mean transducer loss of ``batch``, the statistics after it: int8-emulated's ranges as
    this training pass updated them); dropout on when ``dropout_key`` is given."""
    math = arithmetic(spec, platform)
    keys = dropout_keys(spec, dropout_key) if dropout_key is not None and spec.dropout > 0 else None
    quantizer = Quantizer(spec, statistics, training=True,
                          extent=Extent(batch.rows, batch.frames, batch.label_width))
    encoded = encode(spec, parameters, batch.features, math, keys, quantizer)
    predicted = predict_labels(spec, parameters, batch.labels, batch.label_lengths, math, keys, quantizer)
    joint = lattice(spec, parameters, encoded, predicted, batch.labels, batch.label_lengths, batch.cells, math, keys,
                    quantizer)
    loss = jnp.sum(transducer_losses(joint, batch.output_lengths, batch.label_lengths)) / batch.rows
    return loss, quantizer.updated


def make_batch_loss(spec: RNNTModelSpec, platform: str = "cpu") -> BatchLoss:
    """``batch_loss`` with dropout on, as the training step differentiates it (``family.BatchLoss``)."""
    return lambda parameters, statistics, batch, dropout_key: batch_loss(spec, parameters, statistics, batch,
                                                                         dropout_key, platform)


def make_predict(spec: RNNTModelSpec, platform: str = "cpu") -> Callable[..., jax.Array]:
    """A jitted (parameters, statistics, features, rows, frames) -> the joint's encoder projection,
    in inference mode (no dropout; int8-emulated's stored ranges).

    ``rows`` and ``frames``: how much of the padded ``features`` is the caller's batch (its rows,
    its feature frames), which an untrained int8-emulated model takes its ranges from.
    """
    math = arithmetic(spec, platform)

    def predict(parameters: Parameters, statistics: Parameters, features: jax.Array, rows: jax.Array,
                frames: jax.Array) -> jax.Array:
        quantizer = Quantizer(spec, statistics, extent=Extent(rows, frames, jnp.int32(0)))
        return encode(spec, parameters, features, math, quantizer=quantizer)

    return jax.jit(in_precision(spec, predict))
