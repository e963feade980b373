"""The loss, the optimizer and the jitted steps.

optax's CTC returns a large finite loss (not infinity) for an utterance whose labels cannot
be aligned within its frames, with gradients that are meaningless; the spec pins zero loss
and zero gradient for those (PyTorch's zero_infinity), so they are found and masked here.
optax's AdaDelta is PyTorch's (sq, delta, acc in that order); tests/test_jax_backend.py
checks it against the formula.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax

from benchbase.specs import ModelSpec, OptimizerSpec
from benchbase_jax_ds2.model import forward, initial_weights, split_weights

__all__ = [
    "PaddedBatch",
    "TrainState",
    "ctc_per_utterance",
    "initial_state",
    "make_optimizer",
    "make_predict",
    "make_train_step",
]


DROPOUT_RNG = "rbg"
"""The key that the state carries and each step splits; the masks themselves come from
``model._counter_hash``. rbg keys split without threefry's unrolled rounds, which would add to
every compilation (one per batch shape, on the run clock)."""


class TrainState(NamedTuple):
    """Everything a step changes, and everything a checkpoint holds."""

    parameters: dict
    statistics: dict
    optimizer: optax.OptState
    dropout_key: jax.Array
    """Raw key data (uint32), so that the state holds plain arrays only."""


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


def make_optimizer(spec: OptimizerSpec) -> optax.GradientTransformation:
    """AdaDelta (and the clip), over all parameters as one vector.

    One vector: a handful of fused kernels instead of a few per weight, which takes seconds
    off every compilation (elementwise, so the numbers are the same).
    """
    adadelta = optax.adadelta(spec.learning_rate, rho=spec.rho, eps=spec.epsilon)
    if spec.gradient_clip_norm is not None:
        adadelta = optax.chain(optax.clip_by_global_norm(spec.gradient_clip_norm), adadelta)
    return optax.flatten(adadelta)


def initial_state(spec: ModelSpec, feature_dimension: int, optimizer: optax.GradientTransformation, seed: int,
                  device: jax.Device) -> TrainState:
    """The state before the first step, on ``device``."""
    parameters, statistics = jax.device_put(split_weights(initial_weights(spec, feature_dimension, seed)), device)
    with jax.default_device(device):
        dropout_key = jax.random.key_data(jax.random.key(seed, impl=DROPOUT_RNG))
        state = TrainState(parameters, statistics, jax.jit(optimizer.init)(parameters), dropout_key)
    # Committed to the device like every later state: jit compiles again for an uncommitted argument.
    return jax.device_put(state, device)


def ctc_per_utterance(spec: ModelSpec, log_probs: jax.Array, output_lengths: jax.Array, labels: jax.Array,
                      label_lengths: jax.Array) -> jax.Array:
    """Each utterance's CTC negative log-likelihood; zero where no alignment exists."""
    frame_padding = jnp.arange(log_probs.shape[1]) >= output_lengths[:, None]
    label_padding = jnp.arange(labels.shape[1]) >= label_lengths[:, None]
    loss = optax.ctc_loss(log_probs, frame_padding.astype(jnp.float32), labels, label_padding.astype(jnp.float32),
                          blank_id=spec.ctc_blank_index)
    return jnp.where(_alignable(output_lengths, labels, label_lengths), loss, 0.0)


def _alignable(output_lengths: jax.Array, labels: jax.Array, label_lengths: jax.Array) -> jax.Array:
    """CTC needs a frame per label plus a blank between each pair of equal neighbours."""
    inside = jnp.arange(1, labels.shape[1]) < label_lengths[:, None]
    repeats = jnp.sum((labels[:, 1:] == labels[:, :-1]) & inside, axis=1)
    return output_lengths >= label_lengths + repeats


def make_train_step(spec: ModelSpec, optimizer: optax.GradientTransformation):
    """A jitted (state, batch) -> (state, loss) that donates the old state."""

    def loss_and_statistics(parameters, state: TrainState, batch: PaddedBatch, dropout_key):
        mask = _frame_mask(spec, batch)
        log_probs, statistics = forward(spec, parameters, state.statistics, batch.features, frame_mask=mask,
                                        dropout_key=dropout_key)
        losses = ctc_per_utterance(spec, log_probs, batch.output_lengths, batch.labels, batch.label_lengths)
        real = jnp.arange(losses.shape[0]) < batch.rows
        return jnp.sum(jnp.where(real, losses, 0.0)) / batch.rows, statistics

    def step(state: TrainState, batch: PaddedBatch) -> tuple[TrainState, jax.Array]:
        next_key, key = jax.random.split(jax.random.wrap_key_data(state.dropout_key, impl=DROPOUT_RNG))
        gradient = jax.value_and_grad(loss_and_statistics, has_aux=True)
        (loss, statistics), grads = gradient(state.parameters, state, batch, key)
        updates, optimizer_state = optimizer.update(grads, state.optimizer, state.parameters)
        parameters = optax.apply_updates(state.parameters, updates)
        return TrainState(parameters, statistics, optimizer_state, jax.random.key_data(next_key)), loss

    return jax.jit(_highest_precision(step), donate_argnums=0)


def make_predict(spec: ModelSpec):
    """A jitted (parameters, statistics, features) -> log-probs in inference mode."""

    def predict(parameters, statistics, features):
        return forward(spec, parameters, statistics, features)[0]

    return jax.jit(_highest_precision(predict))


def _frame_mask(spec: ModelSpec, batch: PaddedBatch) -> jax.Array:
    """(rows, conv output frames): True where the harness's own batch is."""
    rows, frames = batch.features.shape[0], spec.output_frames(batch.features.shape[1])
    return (jnp.arange(rows)[:, None] < batch.rows) & (jnp.arange(frames)[None] < batch.frames)


def _highest_precision(function):
    """Runs ``function`` (while it is traced) with float32 matmuls everywhere, optax's CTC included."""

    def traced(*args):
        with jax.default_matmul_precision("highest"):
            return function(*args)

    return traced
