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
joint's hidden layer after its activation. Its masks come from the shared counter hash
(``benchbase_jax_ds2.dropout``), a handful of integer operations XLA fuses into the dropout itself.

int8-emulated (``benchbase.families.rnnt.quantization``, whose ``Quantizer`` is the spec): a
``Quantizer`` fake-quantizes each layer's input (after dropout: the input as the layer receives
it) and kernels and every LSTM's h(t-1), with the primitives both families share
(``benchbase_jax_ds2.quantization``). A range is over the harness's batch only (``Extent``): the
rows, frames and label positions the backend padded on are masked out of its max|x|, as the DS2
model masks them, so a range never depends on the compiled shape. joint.output's range is over
the cells the packed joint computes, which are exactly the lattice's cells within the lengths.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from benchbase.families.rnnt import reference
from benchbase.families.rnnt.quantization import tensor_name
from benchbase.families.rnnt.spec import RNNTModelSpec, stacked_frames
from benchbase.families.rnnt.weight_layout import encoder_layer_names, prediction_layer_names
from benchbase.numerics.quantization import is_quantized
from benchbase_jax_ds2.arithmetic import Arithmetic
from benchbase_jax_ds2.dropout import counter_hash
from benchbase_jax_ds2.quantization import quantize_activation, quantize_weight, updated_range
from benchbase_jax_ds2.recurrence import FP32_RECURRENCE, Recurrent, recurrence

__all__ = ["Extent", "Lattice", "Parameters", "Quantizer", "dropout_keys", "encode", "every_cell", "initial_weights",
           "lattice", "predict_labels", "stack_frames"]

Parameters = dict[str, jax.Array]
"""Every weight under its neutral name."""


class Lattice(NamedTuple):
    """What the transducer loss reads of the joint, each (batch, T', U + 1) float32: log P(blank | t, u)
    and log P(y_{u+1} | t, u) (at u = U, and past a row's labels, the blank's; outside the lengths
    whatever ``lattice`` left there: the loss masks them all)."""

    blank: jax.Array
    emit: jax.Array


class Extent(NamedTuple):
    """How much of a padded batch is the harness's, as traced int32 scalars (one program for every batch)."""

    rows: jax.Array
    frames: jax.Array
    """The feature frames of the harness's padded batch."""
    label_width: jax.Array
    """U of the harness's padded labels (the prediction network reads U + 1 positions)."""


class Quantizer:
    """int8-emulated's fake quantization of one pass, ``benchbase.families.rnnt.quantization.Quantizer``'s
    scheme in JAX; the identity unless ``spec`` is int8-emulated.

    ``ranges``: the stored activation ranges (the state's statistics). In training (``training``)
    each input's range is first updated by its max|x| and the input quantized with the new range,
    which ``updated`` collects; inference quantizes with the stored range, or with the input's own
    max|x| while that is 0. ``extent``: the harness's part of the padded batch, the only elements a
    range counts (none: every element).
    """

    def __init__(self, spec: RNNTModelSpec, ranges: Parameters | None = None, training: bool = False,
                 extent: Extent | None = None) -> None:
        self.scheme = spec.quantization if is_quantized(spec) else None
        self.ranges, self.training, self.extent = dict(ranges or {}), training, extent
        self.updated = dict(self.ranges)

    def quantizes(self, name: str) -> bool:
        return self.scheme is not None and self.scheme.quantizes(tensor_name(name))

    def kernel(self, parameters: Parameters, name: str) -> jax.Array:
        weight, scheme = parameters[name], self.scheme
        return quantize_weight(scheme, weight) if scheme is not None and self.quantizes(name) else weight

    def input(self, layer: str, x: jax.Array, counted: jax.Array | None = None) -> jax.Array:
        """``layer``'s input as the layer computes with it; ``counted`` (broadcastable to ``x``): the
        elements its range is taken over (none: all). A range none are counted in stays as it is."""
        scheme = self.scheme
        if scheme is None or not scheme.quantizes(tensor_name(f"{layer}.input")):
            return x
        name = f"{layer}.input_range"
        magnitude = jnp.abs(lax.stop_gradient(x))
        if counted is not None:
            magnitude = jnp.where(counted, magnitude, 0.0)
        batch_max = jnp.max(magnitude, initial=0.0)  # initial: an encoder too short for any frame has none
        # The reference keeps a range that a pass counts nothing in (a batch with no lattice cell).
        anything = jnp.any(counted) if counted is not None else x.size > 0
        stored = self.ranges[name]
        if self.training:
            used = jnp.where(anything, updated_range(scheme, stored, batch_max), stored)
            self.updated[name] = used
        else:
            used = jnp.where(stored > 0, stored, batch_max)
        return quantize_activation(scheme, x, used)

    def harness(self, x: jax.Array, steps: jax.Array | None, time_major: bool = True) -> jax.Array | None:
        """Which elements of ``x`` (time-major (steps, rows, ...), else (rows, steps, ...)) the harness's
        batch holds: its rows, and its first ``steps`` steps; none without an ``extent``."""
        if self.extent is None or steps is None:
            return None
        time = jnp.arange(x.shape[0 if time_major else 1]) < steps
        rows = jnp.arange(x.shape[1 if time_major else 0]) < self.extent.rows
        inside = time[:, None] & rows[None, :] if time_major else rows[:, None] & time[None, :]
        return inside[..., None]

    def recurrence(self, prefix: str, math: Arithmetic) -> Recurrent:
        """The recurrence's settings: ``math``, and h(t-1) quantized where int8-emulated quantizes it."""
        state = self.scheme if self.quantizes(f"{prefix}.recurrent_state") else None
        return FP32_RECURRENCE._replace(math=math, state_quantizer=state)


def initial_weights(spec: RNNTModelSpec, feature_dimension: int, seed: int) -> dict[str, np.ndarray]:
    """Every weight of the layout as ``spec.init`` pins it, drawn with NumPy by the family's own formula
    (the same on every platform, and nothing to compile on the run clock)."""
    return reference.initial_weights(spec, feature_dimension, np.random.default_rng(seed))


def encode(spec: RNNTModelSpec, parameters: Parameters, features: jax.Array, math: Arithmetic,
           dropout_keys: Iterator[jax.Array] | None = None, quantizer: Quantizer | None = None) -> jax.Array:
    """(batch, frames, features) -> the joint's encoder projection f, (batch, T', joint_units):
    what ``predict()`` returns. Dropout is on when ``dropout_keys`` gives a key per dropout;
    ``quantizer``: int8-emulated's (none: fp32)."""
    quantizer = quantizer or Quantizer(spec)
    x = jnp.swapaxes(stack_frames(features, spec.input_stack, spec.input_subsample), 0, 1)  # time-major
    # The harness's windows: those of its own frames (the windows read forward only, so they are the first ones).
    steps = None if quantizer.extent is None else _windows(quantizer.extent.frames, spec.input_stack,
                                                           spec.input_subsample)
    for layer, prefix in enumerate(encoder_layer_names(spec)):
        if layer == spec.encoder_pre_layers:
            x = stack_frames(x, spec.stack_time_factor, spec.stack_time_factor, axis=0)
            steps = None if steps is None else _windows(steps, spec.stack_time_factor, spec.stack_time_factor)
        if layer > 0:
            x = _dropout(spec, x, dropout_keys)
        x = _lstm(parameters, prefix, quantizer.input(prefix, x, quantizer.harness(x, steps)), math, quantizer)
    x = quantizer.input("joint.encoder", x, quantizer.harness(x, steps))
    projection: jax.Array = math.dot("tbu,uj->btj", x, quantizer.kernel(parameters, "joint.encoder.kernel"))
    return projection + parameters["joint.encoder.bias"]


def predict_labels(spec: RNNTModelSpec, parameters: Parameters, labels: jax.Array, label_lengths: jax.Array,
                   math: Arithmetic, dropout_keys: Iterator[jax.Array] | None = None,
                   quantizer: Quantizer | None = None) -> jax.Array:
    """(batch, U) labels -> the prediction network's g, (batch, U + 1, prediction_units): the start
    symbol (the blank) first; labels at or past ``label_lengths`` are read as the blank.
    ``quantizer``: int8-emulated's (none: fp32)."""
    quantizer = quantizer or Quantizer(spec)
    steps = None if quantizer.extent is None else quantizer.extent.label_width + 1
    blank = spec.blank_index
    padded = jnp.where(jnp.arange(labels.shape[1]) < label_lengths[:, None], labels, blank)
    symbols = jnp.concatenate([jnp.full((labels.shape[0], 1), blank, padded.dtype), padded], axis=1)
    x = parameters["prediction.embedding"][symbols.T]  # time-major (U + 1, batch, embedding)
    for layer, prefix in enumerate(prediction_layer_names(spec)):
        if layer > 0:
            x = _dropout(spec, x, dropout_keys)
        x = _lstm(parameters, prefix, quantizer.input(prefix, x, quantizer.harness(x, steps)), math, quantizer)
    return jnp.swapaxes(x, 0, 1)


def lattice(spec: RNNTModelSpec, parameters: Parameters, encoded: jax.Array, predicted: jax.Array, labels: jax.Array,
            label_lengths: jax.Array, cells: jax.Array, math: Arithmetic,
            dropout_keys: Iterator[jax.Array] | None = None, quantizer: Quantizer | None = None) -> Lattice:
    """The joint on the lattice cells ``cells`` only, reduced to the two numbers per cell the loss reads.

    ``cells`` (capacity,) int32: flat indices ``(row * T' + t) * (U + 1) + u`` of the cells to compute,
    ascending; indices past the lattice are unused capacity (``rnnt.padding.transducer_cells``).
    The joint's (cells, joint_units) hidden layer is a training step's largest tensor, and a
    padded batch's lattice holds two to three times the cells within its lengths, which are all
    the loss reads; the other cells of the result hold 0 and are never read. The log-softmax is
    never materialized: each number is its logit minus the cell's logsumexp.

    ``quantizer``: int8-emulated's (none: fp32). joint.output's range is over ``cells`` but the
    unused capacity: in training, the cells within the lengths.
    """
    quantizer = quantizer or Quantizer(spec)
    batch, frames, width = encoded.shape
    positions = predicted.shape[1]
    row, within = jnp.divmod(cells, frames * positions)
    t, u = jnp.divmod(within, positions)
    steps = None if quantizer.extent is None else quantizer.extent.label_width + 1
    predicted = quantizer.input("joint.prediction", predicted, quantizer.harness(predicted, steps, time_major=False))
    projected = (math.dot("bup,pj->buj", predicted, quantizer.kernel(parameters, "joint.prediction.kernel"))
                 + parameters["joint.prediction.bias"])
    # Unused capacity reads row ``batch``, clamped to the last row by the gather; its results are dropped.
    hidden = (encoded.reshape(-1, width)[row * frames + t] + projected.reshape(-1, width)[row * positions + u])
    hidden = jax.nn.relu(hidden) if spec.joint_activation == "relu" else jnp.tanh(hidden)
    hidden = _dropout(spec, hidden, dropout_keys)
    hidden = quantizer.input("joint.output", hidden, (cells < batch * frames * positions)[:, None])
    logits = (math.dot("cj,jk->ck", hidden, quantizer.kernel(parameters, "joint.output.kernel"))
              + parameters["joint.output.bias"])
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


def _lstm(parameters: Parameters, prefix: str, x: jax.Array, math: Arithmetic, quantizer: Quantizer) -> jax.Array:
    """A unidirectional LSTM from a zero state over time-major (frames, batch, inputs); gates i, f, g, o.
    The shared recurrence (``benchbase_jax_ds2.recurrence``), whose backward pass is written by hand
    (h(t-1) quantized in its loop where int8-emulated says). ``x`` is the input as quantized already."""
    inputs = (math.dot("tbi,ig->tbg", x, quantizer.kernel(parameters, f"{prefix}.input_kernel"))
              + parameters[f"{prefix}.bias"])
    return recurrence(inputs, quantizer.kernel(parameters, f"{prefix}.recurrent_kernel"),
                      quantizer.recurrence(prefix, math))


def _windows(frames: jax.Array, width: int, stride: int) -> jax.Array:
    """``spec.stacked_frames`` of a traced frame count."""
    return jnp.maximum((frames - width) // stride + 1, 0)


def _dropout(spec: RNNTModelSpec, x: jax.Array, keys: Iterator[jax.Array] | None) -> jax.Array:
    """Inverted dropout at ``spec.dropout`` when ``keys`` is given (training), the identity otherwise."""
    rate = spec.dropout
    if keys is None or rate == 0.0:
        return x
    threshold = min(round((1.0 - rate) * 2**32), 2**32 - 1)
    keep = counter_hash(x.shape, jax.random.key_data(next(keys))) < jnp.uint32(threshold)
    return jnp.where(keep, x / (1.0 - rate), 0.0)
