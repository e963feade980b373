"""The Conformer's training state, padded batch, jitted training step and jitted predict, in
parallel with DS2's (``benchbase_jax_ds2.ds2.training``): the same ``TrainState`` pytree (the
BatchNorms' running statistics in ``statistics``), the same optimizers, CTC loss, precision and
donation rules, one program per padded shape.

Unlike DS2's, the network needs each utterance's length, in training and in predict(): its
attention must not read the padded frames, nor its BatchNorm average over them. Rows the backend
pads on have length 0 (every frame padded, so no statistic sees them) and count zero in the loss.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from benchbase.backend import Batch, Inputs
from benchbase.errors import BenchbaseError
from benchbase.families.conformer.spec import ConformerModelSpec
from benchbase_jax_ds2.arithmetic import Arithmetic, arithmetic, in_precision
from benchbase_jax_ds2.conformer.model import forward, initial_weights
from benchbase_jax_ds2.ctc import ctc_per_utterance
from benchbase_jax_ds2.dropout import DROPOUT_RNG
from benchbase_jax_ds2.loss_scaling import guarded_update, initial_loss_scale, scaled_gradients
from benchbase_jax_ds2.shapes import Buckets, pad_rows
from benchbase_jax_ds2.state import TrainState, initial_train_state

__all__ = ["CONFORMER_PRECISIONS", "ConformerBatch", "batch_loss", "initial_state", "make_predict",
           "make_train_step", "padded_batch", "padded_lengths"]

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


def check_precision(spec: ConformerModelSpec) -> None:
    if spec.precision not in CONFORMER_PRECISIONS:
        raise BenchbaseError(f"the JAX backend trains conformer in {' or '.join(sorted(CONFORMER_PRECISIONS))} "
                             f"only, not {spec.precision}")


def initial_state(spec: ConformerModelSpec, feature_dimension: int, optimizer: optax.GradientTransformation,
                  seed: int, device: jax.Device) -> TrainState:
    """The state before the first step, on ``device``: the spec's init from ``seed``, fp16's loss scale."""
    check_precision(spec)
    return initial_train_state(initial_weights(spec, feature_dimension, seed), optimizer, seed, device,
                               initial_loss_scale(spec.precision))


def padded_lengths(buckets: Buckets, inputs: Inputs) -> np.ndarray:
    """The feature lengths continued with 0 to the bucket's rows (``buckets.features(inputs)``'s)."""
    return pad_rows(inputs.feature_lengths, buckets.row_count(inputs.size), 0)


def padded_batch(buckets: Buckets, batch: Batch, spec: ConformerModelSpec) -> ConformerBatch:
    """Every array of a ``ConformerBatch``, on the host; padded label positions hold the blank."""
    rows = batch.size
    padded_rows = buckets.row_count(rows)
    labels = np.full((padded_rows, buckets.label_length(batch.labels.shape[1])), spec.ctc_blank_index, np.int32)
    labels[:rows, : batch.labels.shape[1]] = batch.labels
    return ConformerBatch(
        features=buckets.features(batch),
        feature_lengths=padded_lengths(buckets, batch),
        # One output frame and no label: optax's CTC of a padded row is finite (and masked out).
        output_lengths=pad_rows(batch.output_lengths, padded_rows, 1),
        labels=labels,
        label_lengths=pad_rows(batch.label_lengths, padded_rows, 0),
        rows=np.int32(rows),
    )


def batch_loss(spec: ConformerModelSpec, parameters: dict, statistics: dict, batch: ConformerBatch,
               dropout_key: jax.Array | None, math: Arithmetic) -> tuple[jax.Array, dict]:
    """(the mean CTC loss over the harness's rows, an impossible alignment zero; the running
    statistics this training pass leaves)."""
    log_probs, updated = forward(spec, parameters, statistics, batch.features, batch.feature_lengths,
                                 math, training=True, dropout_key=dropout_key)
    losses = ctc_per_utterance(spec, log_probs, batch.output_lengths, batch.labels, batch.label_lengths)
    real = jnp.arange(losses.shape[0]) < batch.rows
    return jnp.sum(jnp.where(real, losses, 0.0)) / batch.rows, updated


def make_train_step(spec: ConformerModelSpec, optimizer: optax.GradientTransformationExtraArgs,
                    platform: str = "cpu"):
    """A jitted (state, batch, learning_rate) -> (state, loss) that donates the old state.

    ``learning_rate``: the schedule's rate for this step, computed by the caller
    (``benchbase_jax_ds2.optimizers.make_optimizer``).
    """
    check_precision(spec)
    math = arithmetic(spec, platform)  # outside the trace: it may probe the CPU's bf16 dots

    def step(state: TrainState, batch: ConformerBatch, learning_rate: jax.Array) -> tuple[TrainState, jax.Array]:
        next_key, key = jax.random.split(jax.random.wrap_key_data(state.dropout_key, impl=DROPOUT_RNG))
        loss, statistics, grads = scaled_gradients(
            lambda parameters: batch_loss(spec, parameters, state.statistics, batch, key, math), state)
        updates, optimizer_state = optimizer.update(grads, state.optimizer, state.parameters,
                                                    learning_rate=learning_rate)
        parameters, optimizer_state, loss_scale = guarded_update(
            state, grads, optax.apply_updates(state.parameters, updates), optimizer_state)
        return TrainState(parameters, statistics, optimizer_state, jax.random.key_data(next_key), loss_scale), loss

    return jax.jit(in_precision(spec, step), donate_argnums=0)


def make_predict(spec: ConformerModelSpec, platform: str = "cpu"):
    """A jitted (parameters, statistics, features, rows, feature lengths) -> log-probs in inference
    mode. The lengths (one per padded row, 0 past the caller's rows: ``padded_lengths``) are all
    the masks need; ``rows`` is the protocol's and changes nothing here."""
    check_precision(spec)
    math = arithmetic(spec, platform)

    def predict(parameters: dict, statistics: dict, features: jax.Array, rows: jax.Array,
                lengths: jax.Array) -> jax.Array:
        del rows
        return forward(spec, parameters, statistics, features, lengths, math)[0]

    return jax.jit(in_precision(spec, predict))
