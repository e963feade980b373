"""The RNN transducer of ``RNNTModelSpec`` as pure JAX functions (``benchbase.families.rnnt.reference``'s architecture).

    features -> input stacking -> [LSTM] x pre -> time stacking -> [LSTM] x post -> joint.encoder   f
    blank, labels -> embedding -> [LSTM] x prediction_layers                                          g
    joint: log_softmax(output(activation(f(t) + joint.prediction(g(u)))))

The weights live in one flat dict under the family's neutral names
(``benchbase.families.rnnt.weight_layout``, Keras's ``x @ kernel`` layout, JAX's natural one), so
exporting, importing and checkpointing need no renaming. There is no BatchNorm, so no running
statistics: the model is its parameters.

Batches arrive padded further than the harness padded them (to reuse compiled shapes). Every LSTM
is unidirectional and the stacking windows read forward only, so frames added at the end never
reach an utterance's own frames, and label positions past its length are read as the blank, as
the reference reads them; the loss reads no cell outside the lengths.

Dropout (``spec.dropout``, training only) falls where the torch backend puts it: on the input of
every LSTM layer but the first of each network (the encoder's time stacking included), and on the
joint's hidden layer after its activation. Its masks come from the DS2 model's counter hash, a
handful of integer operations XLA fuses into the dropout itself.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from benchbase.families.rnnt import reference
from benchbase.families.rnnt.spec import RNNTModelSpec, stacked_frames
from benchbase.families.rnnt.weight_layout import encoder_layer_names, prediction_layer_names
from benchbase_jax_ds2.model import FP32_RECURRENCE, Arithmetic, counter_hash, recurrence

__all__ = ["Lattice", "Parameters", "dropout_keys", "encode", "every_cell", "initial_weights", "lattice",
           "predict_labels", "stack_frames"]

Parameters = dict[str, jax.Array]
"""Every weight under its neutral name."""


class Lattice(NamedTuple):
    """What the transducer loss reads of the joint, each (batch, T', U + 1) float32: log P(blank | t, u)
    and log P(y_{u+1} | t, u) (at u = U, and past a row's labels, the blank's; outside the lengths
    whatever ``lattice`` left there: the loss masks them all)."""

    blank: jax.Array
    emit: jax.Array


def initial_weights(spec: RNNTModelSpec, feature_dimension: int, seed: int) -> dict[str, np.ndarray]:
    """Every weight of the layout as ``spec.init`` pins it, drawn with NumPy by the family's own formula
    (the same on every platform, and nothing to compile on the run clock)."""
    return reference.initial_weights(spec, feature_dimension, np.random.default_rng(seed))


def encode(spec: RNNTModelSpec, parameters: Parameters, features: jax.Array, math: Arithmetic,
           dropout_keys: Iterator[jax.Array] | None = None) -> jax.Array:
    """(batch, frames, features) -> the joint's encoder projection f, (batch, T', joint_units):
    what ``predict()`` returns. Dropout is on when ``dropout_keys`` gives a key per dropout."""
    x = jnp.swapaxes(stack_frames(features, spec.input_stack, spec.input_subsample), 0, 1)  # time-major
    for layer, prefix in enumerate(encoder_layer_names(spec)):
        if layer == spec.encoder_pre_layers:
            x = stack_frames(x, spec.stack_time_factor, spec.stack_time_factor, axis=0)
        if layer > 0:
            x = _dropout(spec, x, dropout_keys)
        x = _lstm(parameters, prefix, x, math)
    projection: jax.Array = math.dot("tbu,uj->btj", x, parameters["joint.encoder.kernel"])
    return projection + parameters["joint.encoder.bias"]


def predict_labels(spec: RNNTModelSpec, parameters: Parameters, labels: jax.Array, label_lengths: jax.Array,
                   math: Arithmetic, dropout_keys: Iterator[jax.Array] | None = None) -> jax.Array:
    """(batch, U) labels -> the prediction network's g, (batch, U + 1, prediction_units): the start
    symbol (the blank) first; labels at or past ``label_lengths`` are read as the blank."""
    blank = spec.blank_index
    padded = jnp.where(jnp.arange(labels.shape[1]) < label_lengths[:, None], labels, blank)
    symbols = jnp.concatenate([jnp.full((labels.shape[0], 1), blank, padded.dtype), padded], axis=1)
    x = parameters["prediction.embedding"][symbols.T]  # time-major (U + 1, batch, embedding)
    for layer, prefix in enumerate(prediction_layer_names(spec)):
        if layer > 0:
            x = _dropout(spec, x, dropout_keys)
        x = _lstm(parameters, prefix, x, math)
    return jnp.swapaxes(x, 0, 1)


def lattice(spec: RNNTModelSpec, parameters: Parameters, encoded: jax.Array, predicted: jax.Array, labels: jax.Array,
            label_lengths: jax.Array, cells: jax.Array, math: Arithmetic,
            dropout_keys: Iterator[jax.Array] | None = None) -> Lattice:
    """The joint on the lattice cells ``cells`` only, reduced to the two numbers per cell the loss reads.

    ``cells`` (capacity,) int32: flat indices ``(row * T' + t) * (U + 1) + u`` of the cells to compute,
    ascending; indices past the lattice are unused capacity (``shapes.Buckets.transducer_arrays``).
    The joint's (cells, joint_units) hidden layer is a training step's largest tensor, and a
    padded batch's lattice holds two to three times the cells within its lengths, which are all
    the loss reads; the other cells of the result hold 0 and are never read. The log-softmax is
    never materialized: each number is its logit minus the cell's logsumexp.
    """
    batch, frames, width = encoded.shape
    positions = predicted.shape[1]
    row, within = jnp.divmod(cells, frames * positions)
    t, u = jnp.divmod(within, positions)
    projected = (math.dot("bup,pj->buj", predicted, parameters["joint.prediction.kernel"])
                 + parameters["joint.prediction.bias"])
    # Unused capacity reads row ``batch``, clamped to the last row by the gather; its results are dropped.
    hidden = (encoded.reshape(-1, width)[row * frames + t] + projected.reshape(-1, width)[row * positions + u])
    hidden = jax.nn.relu(hidden) if spec.joint_activation == "relu" else jnp.tanh(hidden)
    hidden = _dropout(spec, hidden, dropout_keys)
    logits = math.dot("cj,jk->ck", hidden, parameters["joint.output.kernel"]) + parameters["joint.output.bias"]
    normalizer = jax.nn.logsumexp(logits, axis=-1)
    blank = spec.blank_index
    # The label each cell (t, u) may emit: y_{u+1}, the blank past a row's labels (read, then masked).
    following = jnp.where(jnp.arange(labels.shape[1]) < label_lengths[:, None], labels, blank)
    following = jnp.pad(following, ((0, 0), (0, 1)), constant_values=blank).reshape(-1)[row * positions + u]
    emitted = jnp.sum(logits * jax.nn.one_hot(following, spec.symbols, dtype=logits.dtype), axis=-1)

    def placed(values: jax.Array) -> jax.Array:
        lattice = jnp.zeros(batch * frames * positions, values.dtype)
        return lattice.at[cells].set(values, mode="drop", indices_are_sorted=True).reshape(batch, frames, positions)

    return Lattice(placed(logits[:, blank] - normalizer), placed(emitted - normalizer))


def every_cell(batch: int, frames: int, positions: int) -> np.ndarray:
    """``cells`` for the whole (batch, frames, positions) lattice."""
    return np.arange(batch * frames * positions, dtype=np.int32)


def stack_frames(x: jax.Array, width: int, stride: int, axis: int = 1) -> jax.Array:
    """Whole windows of ``width`` consecutive frames along ``axis``, ``stride`` apart, each window's
    frames side by side in time order on the last axis (the reference's ``stack_frames``)."""
    frames = x.shape[axis]
    windows = stacked_frames(frames, width, stride)
    shape = list(x.shape)
    shape[axis], shape[-1] = windows, width * x.shape[-1]
    if windows == 0:
        return jnp.zeros(shape, x.dtype)
    span = stride * (windows - 1) + 1
    parts = [jax.lax.slice_in_dim(x, offset, offset + span, stride, axis=axis) for offset in range(width)]
    return jnp.concatenate(parts, axis=-1)


def dropout_keys(spec: RNNTModelSpec, key: jax.Array) -> Iterator[jax.Array]:
    """One key per dropout of a training pass: between the encoder's and the prediction network's
    layers, and the joint's."""
    count = spec.encoder_pre_layers + spec.encoder_post_layers - 1 + spec.prediction_layers - 1 + 1
    return iter(jax.random.split(key, count))


def _lstm(parameters: Parameters, prefix: str, x: jax.Array, math: Arithmetic) -> jax.Array:
    """A unidirectional LSTM from a zero state over time-major (frames, batch, inputs); gates i, f, g, o.
    The DS2 model's recurrence, whose backward pass is written by hand."""
    inputs = math.dot("tbi,ig->tbg", x, parameters[f"{prefix}.input_kernel"]) + parameters[f"{prefix}.bias"]
    return recurrence(inputs, parameters[f"{prefix}.recurrent_kernel"], FP32_RECURRENCE._replace(math=math))


def _dropout(spec: RNNTModelSpec, x: jax.Array, keys: Iterator[jax.Array] | None) -> jax.Array:
    """Inverted dropout at ``spec.dropout`` when ``keys`` is given (training), the identity otherwise."""
    rate = spec.dropout
    if keys is None or rate == 0.0:
        return x
    threshold = min(round((1.0 - rate) * 2**32), 2**32 - 1)
    keep = counter_hash(x.shape, jax.random.key_data(next(keys))) < jnp.uint32(threshold)
    return jnp.where(keep, x / (1.0 - rate), 0.0)
