"""The kit's checks of an RNN-T backend's int8-emulated precision (``benchbase.kit.int8``'s
for the transducer), for the backends that declare it for the family.

- ``quantized_encoder``: predict() of an int8-emulated transducer (its encoder projection)
  against the family's reference (``benchbase.families.rnnt.reference`` with its
  ``Quantizer``) on the same random weights and ranges. The bounds are DS2's: a grid flip
  travels as far as the reference's rounding model carried one (``flip_bound``), most outputs
  see none (``median_bound``).
- ``quantized_training_step``: the loss of one train_step and the activation ranges it leaves,
  against the reference's training pass (ranges updated by each layer's input as it passes,
  joint.output's over the lattice cells within the lengths), with the bounds of the same
  rounding model run through the whole quantized step.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from benchbase.backend import Backend, Inputs
from benchbase.families.ds2.quantization import INT8_EMULATED
from benchbase.families.parts import family_parts
from benchbase.families.rnnt.bounds import rounded_encoder, rounded_joint, rounded_prediction
from benchbase.families.rnnt.loss import transducer_loss
from benchbase.families.rnnt.quantization import Quantizer, input_range_names
from benchbase.families.rnnt.reference import lattice_cells, random_weights
from benchbase.kit.core import Kit
from benchbase.kit.data import KitData
from benchbase.kit.int8 import QuantizedForward, in_precision
from benchbase.kit.outputs import valid_frames
from benchbase.numerics.rounded import RoundedArithmetic
from benchbase.numerics.tolerances import INJECTION_DRAWS, ctc_recursion_bound, rounding_bound

__all__ = ["QuantizedStep", "int8_weights", "quantized_encoder", "quantized_training_step"]


def int8_weights(data: KitData, seed: int = 0) -> dict[str, np.ndarray]:
    """The kit's random weights of the int8-emulated transducer, ranges U(0.5, 3)."""
    model = in_precision(data.model, INT8_EMULATED)
    return random_weights(model, data.feature_dimension, np.random.default_rng(seed + 1))


def quantized_encoder(backend_class: type[Backend], data: KitData, seed: int = 0,
                      inputs: Inputs | None = None) -> QuantizedForward:
    """An int8-emulated transducer's encoder projection, inference mode, beside the reference's and its bounds."""
    model = in_precision(data.model, INT8_EMULATED)
    weights = int8_weights(data, seed)
    inputs = inputs or data.batches[0].inputs()
    with Kit(backend_class, data, seed).backend(model=model) as backend:
        backend.import_weights(weights)
        found = backend.predict(inputs)
    parts = family_parts(model)
    expected, bound = parts.bounded_outputs(weights, model, inputs.features, inputs.feature_lengths,
                                            operand_roundoff=0.0, draws=INJECTION_DRAWS)
    unquantized = {name: value for name, value in weights.items() if not name.endswith(".input_range")}
    kernels = Quantizer(weights, model, training=False)
    quantized_kernels = {name: kernels.kernel(name, value) if name.endswith("kernel") else value
                         for name, value in unquantized.items()}
    _, float32_bound = parts.bounded_outputs(quantized_kernels, data.model, inputs.features,
                                             inputs.feature_lengths, operand_roundoff=0.0, draws=INJECTION_DRAWS)
    frames = expected.shape[1]
    return QuantizedForward(found[:, :frames], expected, valid_frames(inputs, frames), bound, float32_bound)


@dataclass(frozen=True)
class QuantizedStep:
    """One int8-emulated train_step of a backend beside the reference's training pass."""

    loss: float
    expected_loss: float
    loss_bound: float
    """One side's rounding bound of the loss (grid flips of the rounding model included)."""
    ranges: dict[str, float]
    expected_ranges: dict[str, float]
    range_bounds: dict[str, float]


def quantized_training_step(backend_class: type[Backend], data: KitData, seed: int = 0,
                            first: bool = False) -> QuantizedStep:
    """One train_step from the kit's random int8 weights on the kit's first batch; ``first``:
    from zero ranges (the first step sets each to its input's max|x|)."""
    model = in_precision(data.model, INT8_EMULATED)
    weights = int8_weights(data, seed)
    if first:
        weights |= {name: np.zeros((), np.float32) for name in input_range_names(model)}
    batch = data.batches[0]
    with Kit(backend_class, data, seed).backend(model=model) as backend:
        backend.import_weights(weights)
        loss = backend.train_step(batch)
        after = backend.export_weights()
    w = {name: np.asarray(value, dtype=np.float64) for name, value in weights.items()}
    frames = int(batch.output_lengths.max(initial=0))
    names = input_range_names(model)

    def compute(rounding) -> dict[str, np.ndarray]:
        rounded, quantizer = RoundedArithmetic(rounding), Quantizer(weights, model, training=True)
        encoded = rounded_encoder(weights, model, batch.features, rounded, quantizer)[:, :frames]
        predicted = rounded_prediction(w, model, batch, rounded, quantizer)
        inside = lattice_cells(batch.output_lengths, batch.label_lengths, frames, predicted.shape[1])
        log_probs = rounded_joint(w, model, encoded, predicted, rounded, quantizer, inside)
        losses = transducer_loss(log_probs, batch.labels, batch.output_lengths, batch.label_lengths,
                                 model.blank_index)
        return {"loss": np.asarray(np.where(np.isinf(losses), 0.0, losses).mean()), "losses": losses,
                **{name: np.asarray(quantizer.ranges[name]) for name in names}}

    exact, moved = rounding_bound(compute)
    steps = batch.output_lengths + batch.label_lengths + 1
    loss_bound = float(moved["loss"]) + ctc_recursion_bound(steps, exact["losses"])
    return QuantizedStep(float(loss), float(exact["loss"]), loss_bound,
                         {name: float(after[name]) for name in names}, {name: float(exact[name]) for name in names},
                         {name: float(moved[name]) for name in names})
