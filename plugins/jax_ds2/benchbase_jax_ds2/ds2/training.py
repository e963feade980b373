"""DS2's CTC loss, its initial training state and its jitted steps.

optax's CTC returns a large finite loss (not infinity) for an utterance whose labels cannot
be aligned within its frames, with gradients that are meaningless; the spec pins zero loss
and zero gradient for those (PyTorch's zero_infinity), so they are found and masked here.
fp16 scales the loss dynamically (``benchbase_jax_ds2.loss_scaling``). The optimizers are every
family's (``benchbase_jax_ds2.optimizers``).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax

from benchbase.specs import ModelSpec
from benchbase_jax_ds2.arithmetic import arithmetic, in_precision
from benchbase_jax_ds2.ctc import ctc_per_utterance
from benchbase_jax_ds2.dropout import DROPOUT_RNG
from benchbase_jax_ds2.ds2.model import forward, initial_weights
from benchbase_jax_ds2.loss_scaling import guarded_update, initial_loss_scale, scaled_gradients
from benchbase_jax_ds2.state import TrainState, initial_train_state

__all__ = [
    "PaddedBatch",
    "initial_state",
    "make_predict",
    "make_train_step",
]


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


def initial_state(spec: ModelSpec, feature_dimension: int, optimizer: optax.GradientTransformation, seed: int,
                  device: jax.Device) -> TrainState:
    """The state before the first step, on ``device``; fp16's starts its loss scale."""
    return initial_train_state(initial_weights(spec, feature_dimension, seed), optimizer, seed, device,
                               initial_loss_scale(spec.precision))


def make_train_step(spec: ModelSpec, optimizer: optax.GradientTransformation, platform: str = "cpu"):
    """A jitted (state, batch, learning_rate) -> (state, loss) that donates the old state, for a device of
    ``platform``; ``learning_rate``: see ``benchbase_jax_ds2.optimizers.make_optimizer``."""
    math = arithmetic(spec, platform)

    def loss_and_statistics(parameters, state: TrainState, batch: PaddedBatch, dropout_key):
        mask = _frame_mask(spec, batch)
        log_probs, statistics = forward(spec, parameters, state.statistics, batch.features, frame_mask=mask,
                                        dropout_key=dropout_key, math=math)
        losses = ctc_per_utterance(spec, log_probs, batch.output_lengths, batch.labels, batch.label_lengths)
        real = jnp.arange(losses.shape[0]) < batch.rows
        return jnp.sum(jnp.where(real, losses, 0.0)) / batch.rows, statistics

    def step(state: TrainState, batch: PaddedBatch, learning_rate: jax.Array) -> tuple[TrainState, jax.Array]:
        next_key, key = jax.random.split(jax.random.wrap_key_data(state.dropout_key, impl=DROPOUT_RNG))
        loss, statistics, grads = scaled_gradients(
            lambda parameters: loss_and_statistics(parameters, state, batch, key), state)
        updates, optimizer_state = optimizer.update(grads, state.optimizer, state.parameters,
                                                    learning_rate=learning_rate)
        parameters, optimizer_state, loss_scale = guarded_update(
            state, grads, optax.apply_updates(state.parameters, updates), optimizer_state)
        return TrainState(parameters, statistics, optimizer_state, jax.random.key_data(next_key), loss_scale), loss

    return jax.jit(in_precision(spec, step), donate_argnums=0)


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
