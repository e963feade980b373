"""The transducer's training state, jitted training step and jitted predict, in parallel with DS2's
(``benchbase_jax_ds2.ds2.training``): the same ``TrainState`` pytree (``benchbase_jax_ds2.state``;
without running statistics but int8-emulated's ranges), the same optimizers, the same precision
and donation rules.

The batch loss is ``loss_reduction`` "mean_over_batch": each utterance's negative log-likelihood
summed, divided by the harness's batch size. Rows the backend pads on have no output frame, so
the loss counts them zero with zero gradient, as it counts an utterance too short for the encoder.

int8-emulated keeps its activation ranges where DS2 keeps its running statistics, in the state's
``statistics`` (so export, import and checkpoints carry them, and the optimizer never sees them);
a training step returns the ranges its forward pass updated (``rnnt.model.Quantizer``). The backend
trains on one device, so a batch's max|x| is the whole batch's.
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
from benchbase_jax_ds2.arithmetic import arithmetic, in_precision
from benchbase_jax_ds2.dropout import DROPOUT_RNG
from benchbase_jax_ds2.loss_scaling import guarded_update, initial_loss_scale, scaled_gradients
from benchbase_jax_ds2.rnnt.loss import transducer_losses
from benchbase_jax_ds2.rnnt.model import (
    Extent,
    Parameters,
    Quantizer,
    dropout_keys,
    encode,
    initial_weights,
    lattice,
    predict_labels,
)
from benchbase_jax_ds2.state import TrainState, initial_train_state

__all__ = ["TRANSDUCER_PRECISIONS", "TransducerBatch", "batch_loss", "initial_state", "make_predict",
           "make_train_step"]

TRANSDUCER_PRECISIONS = frozenset({"fp32", "tf32", "bf16", "fp16", "int8-emulated"})
"""What the JAX backend implements for rnnt: IEEE float32, TF32 matmuls on GPUs (the model's
matmuls at XLA's default precision), bf16 and fp16 (every matmul's operands in bfloat16 or float16
with float32 accumulation, the gates, the joint's log-softmax and the loss in float32:
``Arithmetic``; fp16 with DS2's dynamic loss scale, ``loss_scaling``), and int8-emulated (fake
quantization, float32 arithmetic)."""


class TransducerBatch(NamedTuple):
    """A batch padded to a compiled shape (``rnnt.padding.padded_batch``); ``rows`` is the
    harness's batch size, the other rows are padding with no output frame and no label."""

    features: jax.Array
    output_lengths: jax.Array
    labels: jax.Array
    label_lengths: jax.Array
    cells: jax.Array
    """The lattice cells the joint computes (``model.lattice``)."""
    rows: jax.Array
    frames: jax.Array
    """The feature frames of the harness's padded batch, which int8-emulated's ranges are over."""
    label_width: jax.Array
    """U of the harness's padded labels."""


def check_precision(spec: RNNTModelSpec) -> None:
    if spec.precision not in TRANSDUCER_PRECISIONS:
        raise BenchbaseError(f"the JAX backend trains rnnt in {' or '.join(sorted(TRANSDUCER_PRECISIONS))} only, "
                             f"not {spec.precision}")


def initial_state(spec: RNNTModelSpec, feature_dimension: int, optimizer: optax.GradientTransformation, seed: int,
                  device: jax.Device) -> TrainState:
    """The state before the first step, on ``device``: the parameters, as statistics int8-emulated's
    ranges (0: the first step sets them; none in another precision), fp16's loss scale."""
    check_precision(spec)
    return initial_train_state(initial_weights(spec, feature_dimension, seed), optimizer, seed, device,
                               initial_loss_scale(spec.precision))


def batch_loss(spec: RNNTModelSpec, parameters: Parameters, statistics: Parameters, batch: TransducerBatch,
               dropout_key: jax.Array | None = None, platform: str = "cpu") -> tuple[jax.Array, Parameters]:
    """(the mean transducer loss of ``batch``, the statistics after it: int8-emulated's ranges as
    this training pass updated them); dropout on when ``dropout_key`` is given."""
    math = arithmetic(spec, platform)
    keys = dropout_keys(spec, dropout_key) if dropout_key is not None and spec.dropout > 0 else None
    quantizer = Quantizer(spec, statistics, training=True,
                          extent=Extent(batch.rows, batch.frames, batch.label_width))
    encoded = encode(spec, parameters, batch.features, math, keys, quantizer)
    predicted = predict_labels(spec, parameters, batch.labels, batch.label_lengths, math, keys, quantizer)
    joint = lattice(spec, parameters, encoded, predicted, batch.labels, batch.label_lengths, batch.cells, math, keys,
                    quantizer)
    loss = jnp.sum(transducer_losses(joint, batch.output_lengths, batch.label_lengths)) / batch.rows
    return loss, quantizer.updated


def make_train_step(spec: RNNTModelSpec, optimizer: optax.GradientTransformationExtraArgs,
                    platform: str = "cpu") -> Callable[[TrainState, TransducerBatch, np.float32],
                                                       tuple[TrainState, jax.Array]]:
    """A jitted (state, batch, learning_rate) -> (state, loss) that donates the old state.

    ``learning_rate``: the schedule's rate for this step (``OptimizerSpec.learning_rate_at``),
    computed by the caller; see ``benchbase_jax_ds2.optimizers.make_optimizer``.
    """

    def step(state: TrainState, batch: TransducerBatch, learning_rate: jax.Array) -> tuple[TrainState, jax.Array]:
        next_key, key = jax.random.split(jax.random.wrap_key_data(state.dropout_key, impl=DROPOUT_RNG))
        loss, statistics, grads = scaled_gradients(
            lambda parameters: batch_loss(spec, parameters, state.statistics, batch, key, platform), state)
        updates, optimizer_state = optimizer.update(grads, state.optimizer, state.parameters,
                                                    learning_rate=learning_rate)
        parameters, optimizer_state, loss_scale = guarded_update(
            state, grads, optax.apply_updates(state.parameters, updates), optimizer_state)
        return TrainState(parameters, statistics, optimizer_state, jax.random.key_data(next_key), loss_scale), loss

    return jax.jit(in_precision(spec, step), donate_argnums=0)


def make_predict(spec: RNNTModelSpec, platform: str = "cpu") -> Callable[..., jax.Array]:
    """A jitted (parameters, statistics, features, rows, frames) -> the joint's encoder projection,
    in inference mode (no dropout; int8-emulated's stored ranges).

    ``rows`` and ``frames``: how much of the padded ``features`` is the caller's batch (its rows,
    its feature frames), which an untrained int8-emulated model takes its ranges from.
    """
    math = arithmetic(spec, platform)

    def predict(parameters: Parameters, statistics: Parameters, features: jax.Array, rows: jax.Array,
                frames: jax.Array) -> jax.Array:
        quantizer = Quantizer(spec, statistics, extent=Extent(rows, frames, jnp.int32(0)))
        return encode(spec, parameters, features, math, quantizer=quantizer)

    return jax.jit(in_precision(spec, predict))
