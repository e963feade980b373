"""The transducer's training state, jitted training step and jitted predict, in parallel with DS2's
(``benchbase_jax_ds2.training``): the same ``TrainState`` pytree (without running statistics, which
the transducer has none of), the same optimizers, the same precision and donation rules.

The batch loss is ``loss_reduction`` "mean_over_batch": each utterance's negative log-likelihood
summed, divided by the harness's batch size. Rows the backend pads on have no output frame, so
the loss counts them zero with zero gradient, as it counts an utterance too short for the encoder.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from benchbase.errors import BenchbaseError
from benchbase.families.rnnt.spec import RNNTModelSpec
from benchbase_jax_ds2.model import arithmetic
from benchbase_jax_ds2.rnnt.loss import transducer_losses
from benchbase_jax_ds2.rnnt.model import Parameters, dropout_keys, encode, initial_weights, lattice, predict_labels
from benchbase_jax_ds2.training import DROPOUT_RNG, TrainState, in_precision

__all__ = ["TRANSDUCER_PRECISIONS", "TransducerBatch", "batch_loss", "initial_state", "make_predict",
           "make_train_step"]

TRANSDUCER_PRECISIONS = frozenset({"fp32", "tf32"})
"""What the JAX backend implements for rnnt: IEEE float32, and TF32 matmuls on GPUs (the model's
matmuls at XLA's default precision). Mixed precision and int8-emulated are DS2's only."""


class TransducerBatch(NamedTuple):
    """A batch padded to a compiled shape (``shapes.Buckets.transducer_arrays``); ``rows`` is the
    harness's batch size, the other rows are padding with no output frame and no label."""

    features: jax.Array
    output_lengths: jax.Array
    labels: jax.Array
    label_lengths: jax.Array
    cells: jax.Array
    """The lattice cells the joint computes (``model.lattice``)."""
    rows: jax.Array


def check_precision(spec: RNNTModelSpec) -> None:
    if spec.precision not in TRANSDUCER_PRECISIONS:
        raise BenchbaseError(f"the JAX backend trains rnnt in {' or '.join(sorted(TRANSDUCER_PRECISIONS))} only, "
                             f"not {spec.precision}")


def initial_state(spec: RNNTModelSpec, feature_dimension: int, optimizer: optax.GradientTransformation, seed: int,
                  device: jax.Device) -> TrainState:
    """The state before the first step, on ``device``: the parameters, no statistics, no loss scale."""
    check_precision(spec)
    parameters = jax.device_put(initial_weights(spec, feature_dimension, seed), device)
    with jax.default_device(device):
        dropout_key = jax.random.key_data(jax.random.key(seed, impl=DROPOUT_RNG))
        state = TrainState(parameters, {}, jax.jit(optimizer.init)(parameters), dropout_key)
    # Committed to the device like every later state: jit compiles again for an uncommitted argument.
    committed: TrainState = jax.device_put(state, device)
    return committed


def batch_loss(spec: RNNTModelSpec, parameters: Parameters, batch: TransducerBatch,
               dropout_key: jax.Array | None = None, platform: str = "cpu") -> jax.Array:
    """The mean transducer loss of ``batch``; dropout on when ``dropout_key`` is given."""
    math = arithmetic(spec, platform)
    keys = dropout_keys(spec, dropout_key) if dropout_key is not None and spec.dropout > 0 else None
    encoded = encode(spec, parameters, batch.features, math, keys)
    predicted = predict_labels(spec, parameters, batch.labels, batch.label_lengths, math, keys)
    joint = lattice(spec, parameters, encoded, predicted, batch.labels, batch.label_lengths, batch.cells, math, keys)
    return jnp.sum(transducer_losses(joint, batch.output_lengths, batch.label_lengths)) / batch.rows


def make_train_step(spec: RNNTModelSpec, optimizer: optax.GradientTransformationExtraArgs,
                    platform: str = "cpu") -> Callable[[TrainState, TransducerBatch, np.float32],
                                                       tuple[TrainState, jax.Array]]:
    """A jitted (state, batch, learning_rate) -> (state, loss) that donates the old state.

    ``learning_rate``: the schedule's rate for this step (``OptimizerSpec.learning_rate_at``),
    computed by the caller; see ``benchbase_jax_ds2.training.make_optimizer``.
    """

    def step(state: TrainState, batch: TransducerBatch, learning_rate: jax.Array) -> tuple[TrainState, jax.Array]:
        next_key, key = jax.random.split(jax.random.wrap_key_data(state.dropout_key, impl=DROPOUT_RNG))
        loss, grads = jax.value_and_grad(batch_loss, argnums=1)(spec, state.parameters, batch, key, platform)
        updates, optimizer_state = optimizer.update(grads, state.optimizer, state.parameters,
                                                    learning_rate=learning_rate)
        parameters = optax.apply_updates(state.parameters, updates)
        return TrainState(parameters, state.statistics, optimizer_state, jax.random.key_data(next_key)), loss

    return jax.jit(in_precision(spec, step), donate_argnums=0)


def make_predict(spec: RNNTModelSpec, platform: str = "cpu") -> Callable[[Parameters, jax.Array], jax.Array]:
    """A jitted (parameters, features) -> the joint's encoder projection, in inference mode (no dropout)."""
    math = arithmetic(spec, platform)

    def predict(parameters: Parameters, features: jax.Array) -> jax.Array:
        return encode(spec, parameters, features, math)

    return jax.jit(in_precision(spec, predict))
