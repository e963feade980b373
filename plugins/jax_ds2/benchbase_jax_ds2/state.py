"""The training state every family's steps replace: one immutable pytree, which a checkpoint writes out.

Weights live in flat dicts keyed by benchbase's framework-neutral names (each family's
``weight_layout``), so exporting, importing and checkpointing need no renaming. They are split
into trainable parameters, which the optimizer sees, and running statistics, which it never does.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import numpy as np
import optax

from benchbase_jax_ds2.dropout import DROPOUT_RNG

__all__ = ["STATISTICS", "TrainState", "initial_train_state", "split_weights"]

STATISTICS = ("mean", "variance", "input_range")
"""The last parts of the names of weights that are running statistics, not trainable parameters:
BatchNorm's, and int8-emulated's activation ranges."""


class TrainState(NamedTuple):
    """Everything a step changes, and everything a checkpoint holds."""

    parameters: dict
    statistics: dict
    optimizer: optax.OptState
    dropout_key: jax.Array
    """Raw key data (uint32), so that the state holds plain arrays only."""
    loss_scale: dict | None = None
    """fp16 only: the dynamic loss scale ({"scale", "finite_steps"}); None (no leaves, so the
    checkpoint of every other precision is unchanged) otherwise."""


def split_weights(weights: dict) -> tuple[dict, dict]:
    """(trainable parameters, running statistics)."""
    parameters = {name: value for name, value in weights.items() if name.rsplit(".", 1)[-1] not in STATISTICS}
    statistics = {name: value for name, value in weights.items() if name not in parameters}
    return parameters, statistics


def initial_train_state(weights: dict[str, np.ndarray], optimizer: optax.GradientTransformation, seed: int,
                        device: jax.Device, loss_scale: dict | None = None) -> TrainState:
    """The state before the first step, on ``device``: ``weights`` split, the optimizer's initial
    state, the dropout key of ``seed``, and ``loss_scale`` as given."""
    parameters, statistics = jax.device_put(split_weights(weights), device)
    with jax.default_device(device):
        dropout_key = jax.random.key_data(jax.random.key(seed, impl=DROPOUT_RNG))
        state = TrainState(parameters, statistics, jax.jit(optimizer.init)(parameters), dropout_key, loss_scale)
    # Committed to the device like every later state: jit compiles again for an uncommitted argument.
    committed: TrainState = jax.device_put(state, device)
    return committed
