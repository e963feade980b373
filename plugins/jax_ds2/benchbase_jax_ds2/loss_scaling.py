"""fp16's dynamic loss scaling, for every family's training step.

float16 has 5 exponent bits: gradients below about 6e-8 flush to zero in its operands' cotangents.
So an fp16 step differentiates the loss times a scale and divides the gradients by it again, in
float32, before the optimizer sees them. The scale is dynamic, as jmp and PyTorch's GradScaler
keep it: a step whose gradients overflowed (an inf or a NaN) changes no weight and no optimizer
state and halves the scale; a run of ``GROWTH_STEPS`` finite steps doubles it. The state's running
statistics (BatchNorm's, int8-emulated's ranges) move either way, as in PyTorch. Every other
precision keeps no scale (``TrainState.loss_scale`` None) and its step is unchanged.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from benchbase_jax_ds2.state import TrainState

__all__ = ["GROWTH_STEPS", "INITIAL_SCALE", "guarded_update", "initial_loss_scale", "scaled_gradients"]

INITIAL_SCALE = 2.0**15
GROWTH_STEPS = 2000
"""jmp's defaults: start at 2**15, x2 after 2000 finite steps, /2 (never below 1) on an overflow."""


def initial_loss_scale(precision: str) -> dict | None:
    """The loss scale a state starts with in ``precision``: fp16's, or None."""
    if precision != "fp16":
        return None
    return {"scale": np.float32(INITIAL_SCALE), "finite_steps": np.int32(0)}


def scaled_gradients(loss: Callable[[dict], tuple[jax.Array, Any]], state: TrainState) -> tuple[jax.Array, Any, dict]:
    """(loss, aux, gradients) of ``loss(parameters) -> (loss, aux)`` at ``state.parameters``; under a
    loss scale the loss is scaled before differentiating and the gradients unscaled after."""
    if state.loss_scale is None:
        (value, aux), gradients = jax.value_and_grad(loss, has_aux=True)(state.parameters)
        return value, aux, gradients
    scale = state.loss_scale["scale"]

    def scaled(parameters: dict) -> tuple[jax.Array, tuple[jax.Array, Any]]:
        value, aux = loss(parameters)
        return value * scale, (value, aux)

    (_, (value, aux)), gradients = jax.value_and_grad(scaled, has_aux=True)(state.parameters)
    return value, aux, jax.tree_util.tree_map(lambda gradient: gradient / scale, gradients)


def guarded_update(state: TrainState, gradients: dict, parameters: dict,
                   optimizer_state: Any) -> tuple[dict, Any, dict | None]:
    """(parameters, optimizer state, loss scale) after a step that computed ``gradients`` and from
    them the new ``parameters`` and ``optimizer_state``: under a loss scale, the old ones where a
    gradient overflowed, and the scale moved."""
    loss_scale = state.loss_scale
    if loss_scale is None:
        return parameters, optimizer_state, None
    finite = jnp.all(jnp.stack([jnp.all(jnp.isfinite(g)) for g in jax.tree_util.tree_leaves(gradients)]))
    parameters, optimizer_state = jax.tree_util.tree_map(lambda new, old: jnp.where(finite, new, old),
                                                         (parameters, optimizer_state),
                                                         (state.parameters, state.optimizer))
    return parameters, optimizer_state, _next_loss_scale(loss_scale, finite)


def _next_loss_scale(loss_scale: dict, finite: jax.Array) -> dict:
    steps = jnp.where(finite, loss_scale["finite_steps"] + 1, 0)
    grow = steps >= GROWTH_STEPS
    scale = jnp.where(finite, jnp.where(grow, loss_scale["scale"] * 2, loss_scale["scale"]),
                      jnp.maximum(loss_scale["scale"] / 2, 1.0))
    return {"scale": scale, "finite_steps": jnp.where(grow, 0, steps).astype(jnp.int32)}
