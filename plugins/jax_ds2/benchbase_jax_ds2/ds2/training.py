"""The loss, the optimizer and the jitted steps.

optax's CTC returns a large finite loss (not infinity) for an utterance whose labels cannot
be aligned within its frames, with gradients that are meaningless; the spec pins zero loss
and zero gradient for those (PyTorch's zero_infinity), so they are found and masked here.
optax's AdaDelta is PyTorch's (sq, delta, acc in that order); plugins/jax_ds2/tests/test_jax_backend.py
checks it against the formula. AdamW's learning rate follows ``OptimizerSpec.learning_rate_at``,
which the host evaluates for each step (``make_optimizer``).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from benchbase.errors import BenchbaseError
from benchbase.specs import ModelSpec, OptimizerSpec
from benchbase.specs.optimizer import AdaDeltaSpec, AdamWSpec
from benchbase_jax_ds2.model import arithmetic, forward, initial_weights, split_weights

__all__ = [
    "PaddedBatch",
    "TrainState",
    "ctc_per_utterance",
    "in_precision",
    "initial_state",
    "make_optimizer",
    "make_predict",
    "make_train_step",
    "next_learning_rate",
]


DROPOUT_RNG = "rbg"
"""The key that the state carries and each step splits; the masks themselves come from
``model.counter_hash``. rbg keys split without threefry's unrolled rounds, which would add to
every compilation (one per batch shape, on the run clock)."""


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


def initial_state(spec: ModelSpec, feature_dimension: int, optimizer: optax.GradientTransformation, seed: int,
                  device: jax.Device) -> TrainState:
    """The state before the first step, on ``device``."""
    parameters, statistics = jax.device_put(split_weights(initial_weights(spec, feature_dimension, seed)), device)
    with jax.default_device(device):
        dropout_key = jax.random.key_data(jax.random.key(seed, impl=DROPOUT_RNG))
        loss_scale = None
        if spec.precision == "fp16":
            loss_scale = {"scale": jnp.float32(LOSS_SCALE_INITIAL), "finite_steps": jnp.int32(0)}
        state = TrainState(parameters, statistics, jax.jit(optimizer.init)(parameters), dropout_key, loss_scale)
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


def make_train_step(spec: ModelSpec, optimizer: optax.GradientTransformation, platform: str = "cpu"):
    """A jitted (state, batch, learning_rate) -> (state, loss) that donates the old state, for a device of
    ``platform``; ``learning_rate``: see ``make_optimizer``."""
    math = arithmetic(spec, platform)

    def loss_and_statistics(parameters, state: TrainState, batch: PaddedBatch, dropout_key, scale):
        mask = _frame_mask(spec, batch)
        log_probs, statistics = forward(spec, parameters, state.statistics, batch.features, frame_mask=mask,
                                        dropout_key=dropout_key, math=math)
        losses = ctc_per_utterance(spec, log_probs, batch.output_lengths, batch.labels, batch.label_lengths)
        real = jnp.arange(losses.shape[0]) < batch.rows
        loss = jnp.sum(jnp.where(real, losses, 0.0)) / batch.rows
        return loss * scale, (loss, statistics)

    def step(state: TrainState, batch: PaddedBatch, learning_rate: jax.Array) -> tuple[TrainState, jax.Array]:
        next_key, key = jax.random.split(jax.random.wrap_key_data(state.dropout_key, impl=DROPOUT_RNG))
        gradient = jax.value_and_grad(loss_and_statistics, has_aux=True)
        scale = jnp.float32(1.0) if state.loss_scale is None else state.loss_scale["scale"]
        (_, (loss, statistics)), grads = gradient(state.parameters, state, batch, key, scale)
        if state.loss_scale is not None:
            grads = jax.tree_util.tree_map(lambda g: g / scale, grads)
        updates, optimizer_state = optimizer.update(grads, state.optimizer, state.parameters,
                                                    learning_rate=learning_rate)
        parameters = optax.apply_updates(state.parameters, updates)
        loss_scale = state.loss_scale
        if loss_scale is not None:
            # Dynamic loss scaling, as jmp and GradScaler do: a step whose gradients overflowed
            # changes no weight and no optimizer state and halves the scale; a run of finite
            # steps doubles it. BatchNorm's statistics move either way, as in PyTorch.
            finite = jnp.all(jnp.stack([jnp.all(jnp.isfinite(g)) for g in jax.tree_util.tree_leaves(grads)]))
            parameters, optimizer_state = jax.tree_util.tree_map(
                lambda new, old: jnp.where(finite, new, old), (parameters, optimizer_state),
                (state.parameters, state.optimizer))
            loss_scale = _next_loss_scale(loss_scale, finite)
        return TrainState(parameters, statistics, optimizer_state, jax.random.key_data(next_key), loss_scale), loss

    return jax.jit(in_precision(spec, step), donate_argnums=0)


LOSS_SCALE_INITIAL = 2.0**15
LOSS_SCALE_GROWTH_STEPS = 2000
"""fp16's dynamic loss scale: jmp's defaults (start at 2**15, x2 after 2000 finite steps, /2 on an overflow)."""


def _next_loss_scale(loss_scale: dict, finite: jax.Array) -> dict:
    steps = jnp.where(finite, loss_scale["finite_steps"] + 1, 0)
    grow = steps >= LOSS_SCALE_GROWTH_STEPS
    scale = jnp.where(finite, jnp.where(grow, loss_scale["scale"] * 2, loss_scale["scale"]),
                      jnp.maximum(loss_scale["scale"] / 2, 1.0))
    return {"scale": scale, "finite_steps": jnp.where(grow, 0, steps).astype(jnp.int32)}


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


def in_precision(spec: ModelSpec, function):
    """Runs ``function`` (while it is traced) with float32 matmuls everywhere the model does not
    set its own, optax's CTC included: true float32, or TF32 for the spec's tf32."""
    precision = "tensorfloat32" if spec.precision == "tf32" else "highest"

    def traced(*args):
        with jax.default_matmul_precision(precision):
            return function(*args)

    return traced
