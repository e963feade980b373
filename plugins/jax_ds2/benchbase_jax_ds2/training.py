"""What every family's training shares: its initial state and its jitted step, given the family's loss.

A family supplies its initial weights and its batch loss (``family.ModelFamily``); the step
around the loss is the same for all: a fresh dropout key, fp16's scaled gradients and guarded
update (``loss_scaling``), the optimizer's update at the caller's learning rate, and the old
state donated.
"""

from __future__ import annotations

from typing import Any

import jax
import optax

from benchbase.specs import ModelSpec
from benchbase_jax_ds2.arithmetic import in_precision
from benchbase_jax_ds2.dropout import DROPOUT_RNG
from benchbase_jax_ds2.family import BatchLoss, TrainStep
from benchbase_jax_ds2.loss_scaling import guarded_update, initial_loss_scale, scaled_gradients
from benchbase_jax_ds2.state import TrainState, initial_train_state

__all__ = ["initial_state", "make_train_step"]

def initial_state(initial_weights: dict, spec: ModelSpec, optimizer: optax.GradientTransformation, seed: int,
                  device: jax.Device) -> TrainState:
    """The state before the first step, on ``device``: the family's ``initial_weights``, fp16's loss scale."""
    return initial_train_state(initial_weights, optimizer, seed, device, initial_loss_scale(spec.precision))


def make_train_step(spec: ModelSpec, optimizer: optax.GradientTransformationExtraArgs,
                    batch_loss: BatchLoss) -> TrainStep:
    """The jitted step that trains on ``batch_loss``; ``learning_rate``: the schedule's rate for this
    step, computed by the caller (``benchbase_jax_ds2.optimizers.make_optimizer``)."""

    def step(state: TrainState, batch: Any, learning_rate: jax.Array) -> tuple[TrainState, jax.Array]:
        next_key, key = jax.random.split(jax.random.wrap_key_data(state.dropout_key, impl=DROPOUT_RNG))
        loss, statistics, grads = scaled_gradients(
            lambda parameters: batch_loss(parameters, state.statistics, batch, key), state)
        updates, optimizer_state = optimizer.update(grads, state.optimizer, state.parameters,
                                                    learning_rate=learning_rate)
        parameters, optimizer_state, loss_scale = guarded_update(
            state, grads, optax.apply_updates(state.parameters, updates), optimizer_state)
        return TrainState(parameters, statistics, optimizer_state, jax.random.key_data(next_key), loss_scale), loss

    return jax.jit(in_precision(spec, step), donate_argnums=0)
