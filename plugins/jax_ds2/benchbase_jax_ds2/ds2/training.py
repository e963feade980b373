"""DS2's batch loss (CTC) and its jitted predict.

optax's CTC returns a large finite loss (not infinity) for an utterance whose labels cannot
be aligned within its frames, with gradients that are meaningless; the spec pins zero loss
and zero gradient for those (PyTorch's zero_infinity), so they are found and masked here.
The step around the loss, fp16's dynamic loss scale and the optimizers are every family's
(``benchbase_jax_ds2.training``).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from benchbase.specs import ModelSpec
from benchbase_jax_ds2.arithmetic import arithmetic, in_precision
from benchbase_jax_ds2.ctc import mean_over_rows
from benchbase_jax_ds2.ds2.model import forward
from benchbase_jax_ds2.family import BatchLoss

__all__ = ["PaddedBatch", "make_batch_loss", "make_predict"]


class PaddedBatch(NamedTuple):
    """A batch padded to a compiled shape; ``rows`` and ``frames`` say how much of it is the harness's.

    ``frames`` is the number of conv output frames of the harness's padded batch, the frames
    BatchNorm takes its statistics over.
    """

    features: jax.Array
    output_lengths: jax.Array
    labels: jax.Array
    label_lengths: jax.Array
    rows: jax.Array
    frames: jax.Array


def make_batch_loss(spec: ModelSpec, platform: str = "cpu") -> BatchLoss:
    """The mean CTC loss over the harness's rows, an impossible alignment zero, and BatchNorm's
    statistics after it (``family.BatchLoss``), for a device of ``platform``."""
    math = arithmetic(spec, platform)

    def batch_loss(parameters: dict, statistics: dict, batch: PaddedBatch, dropout_key: jax.Array):
        mask = _frame_mask(spec, batch)
        log_probs, statistics = forward(spec, parameters, statistics, batch.features, frame_mask=mask,
                                        dropout_key=dropout_key, math=math)
        return mean_over_rows(spec, log_probs, batch), statistics

    return batch_loss


def make_predict(spec: ModelSpec, platform: str = "cpu"):
    """A jitted (parameters, statistics, features, rows, frames) -> log-probs in inference mode.

    ``rows`` and ``frames``: how much of the padded ``features`` is the caller's batch (its
    rows, its conv output frames), which an untrained int8-emulated model takes its ranges from.
    """

    def predict(parameters, statistics, features, rows, frames):
        output_frames = spec.output_frames(features.shape[1])
        valid = (jnp.arange(features.shape[0])[:, None] < rows) & (jnp.arange(output_frames)[None] < frames)
        return forward(spec, parameters, statistics, features, valid_mask=valid, math=math)[0]

    math = arithmetic(spec, platform)

    return jax.jit(in_precision(spec, predict))


def _frame_mask(spec: ModelSpec, batch: PaddedBatch) -> jax.Array:
    """(rows, conv output frames): True where the harness's own batch is."""
    rows, frames = batch.features.shape[0], spec.output_frames(batch.features.shape[1])
    return (jnp.arange(rows)[:, None] < batch.rows) & (jnp.arange(frames)[None] < batch.frames)
