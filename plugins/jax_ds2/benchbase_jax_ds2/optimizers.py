"""The optimizers of ``OptimizerSpec``, the same for every family.

optax's AdaDelta is PyTorch's (sq, delta, acc in that order); plugins/jax_ds2/tests/test_jax_backend.py
checks it against the formula. AdamW's learning rate follows ``OptimizerSpec.learning_rate_at``,
which the host evaluates for each step (``make_optimizer``).
"""

from __future__ import annotations

import jax
import numpy as np
import optax

from benchbase.errors import BenchbaseError
from benchbase.specs import OptimizerSpec
from benchbase.specs.optimizer import AdaDeltaSpec, AdamWSpec

__all__ = ["make_optimizer", "next_learning_rate"]


def make_optimizer(spec: OptimizerSpec) -> optax.GradientTransformationExtraArgs:
    """The spec's optimizer (and the clip), over all parameters as one vector.

    One vector: a handful of fused kernels instead of a few per weight, which takes seconds
    off every compilation (elementwise, so the numbers are the same).

    AdamW takes each step's learning rate as the extra argument ``learning_rate``
    (``update(grads, state, params, learning_rate=...)``), from ``next_learning_rate(spec, state)``:
    the schedule is then the spec's own formula, evaluated in float64 by the host and rounded
    once, where optax's schedules would evaluate their own float32 version of it on the device.
    It counts the optimizer's steps (Adam's ``count``, in the state and so in a checkpoint), so a
    restored checkpoint resumes the schedule. AdaDelta's rate is constant and built in; it
    ignores the argument.
    """
    if isinstance(spec, AdamWSpec):
        # optax's AdamW is this chain; its decay is decoupled, lr * weight_decay * w, as PyTorch's.
        transform = optax.chain(optax.scale_by_adam(b1=spec.beta1, b2=spec.beta2, eps=spec.epsilon),
                                optax.add_decayed_weights(spec.weight_decay), _scale_by_given_learning_rate())
    elif isinstance(spec, AdaDeltaSpec):
        transform = optax.adadelta(spec.learning_rate, rho=spec.rho, eps=spec.epsilon)
    else:
        raise BenchbaseError(f"the JAX backend has no optimizer {spec.name!r}")
    if spec.gradient_clip_norm is not None:
        transform = optax.chain(optax.clip_by_global_norm(spec.gradient_clip_norm), transform)
    return optax.flatten(transform)


def next_learning_rate(spec: OptimizerSpec, optimizer_state: optax.OptState) -> np.float32:
    """The learning rate of the optimizer's next step: ``spec.learning_rate_at`` of the steps it has taken."""
    steps = optax.tree_utils.tree_get(optimizer_state, "count", 0)
    return np.float32(spec.learning_rate_at(int(steps)))


def _scale_by_given_learning_rate() -> optax.GradientTransformationExtraArgs:
    """-learning_rate * updates, the rate given to ``update`` (optax.scale_by_learning_rate's sign)."""

    def update(updates: optax.Updates, state: optax.EmptyState, params: optax.Params | None = None, *,
               learning_rate: jax.Array, **extra_args: object) -> tuple[optax.Updates, optax.EmptyState]:
        del params, extra_args
        return jax.tree_util.tree_map(lambda update: -learning_rate * update, updates), state

    return optax.GradientTransformationExtraArgs(lambda params: optax.EmptyState(), update)
