"""The kit's checks of a backend's int8-emulated precision, for any family with a quantized
reference (``FamilyParts.quantized_reference``), written once over the family's parts.

- ``quantized_forward``: predict() of an int8-emulated model against the family's quantized
  reference (its ``bounded_outputs`` on the int8-emulated model) on the same random weights and
  ranges. The fake-quantized weights are bit-identical everywhere (the same float32 operations,
  ``benchbase.numerics.quantization``); an activation a float32 rounding away from a grid step's
  midpoint may land one step apart (range / 127), and a recurrence carries that step on. The
  reference's rounding model flips exactly such activations, so its bound shows how far a flip
  travels; a backend's own roundings flip others, hence ``flip_bound``. Most outputs see no flip
  and must be the reference's to float32's own bound (``median_bound``).
- ``quantized_training_step``: the loss of one train_step and the activation ranges it leaves,
  against the family's reference step on the int8-emulated model (each range updated by its
  layer's input before quantizing with it), within the bounds of the same rounding model run
  through the whole quantized step (a flip upstream moves a maximum too).

Rules of the kit (``benchbase.kit.precision_rules``) and helpers of a backend's own tests for
the precisions its ``Capabilities`` declare; the tolerances come from
``benchbase.numerics.tolerances``' error model.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from benchbase.backend import Backend, Inputs
from benchbase.errors import BenchbaseError
from benchbase.families.parts import QuantizedReference, family_parts, quantized_reference_of
from benchbase.kit.core import Kit
from benchbase.kit.data import KitData
from benchbase.kit.outputs import valid_frames
from benchbase.numerics.quantization import INT8_EMULATED
from benchbase.numerics.tolerances import BOTH_SIDES, FLOAT32_UNIT_ROUNDOFF, INJECTION_DRAWS
from benchbase.specs import ModelSpec

__all__ = [
    "QuantizedForward",
    "QuantizedStep",
    "flip_bound",
    "in_precision",
    "int8_weights",
    "median_bound",
    "quantized_forward",
    "quantized_reference",
    "quantized_training_step",
    "range_update_rounding",
]


@dataclass(frozen=True)
class QuantizedForward:
    """A backend's int8-emulated outputs beside the reference's, with the bounds."""

    found: np.ndarray
    expected: np.ndarray
    mask: np.ndarray
    """(batch, frames, 1): the valid frames."""
    bound: np.ndarray
    """Elementwise rounding bound of the quantized forward (grid flips included)."""
    float32_bound: np.ndarray
    """Elementwise rounding bound of the same weights without quantization (no flips)."""


@dataclass(frozen=True)
class QuantizedStep:
    """One int8-emulated train_step of a backend beside the reference's training pass."""

    loss: float
    expected_loss: float
    loss_bound: float
    """One side's rounding bound of the loss (grid flips of the rounding model included)."""
    ranges: dict[str, float]
    """The backend's ranges after the step, by name (those its export_weights() has)."""
    expected_ranges: dict[str, float]
    range_bounds: dict[str, float]


def flip_bound(result: QuantizedForward) -> float:
    """The largest difference a quantized forward may show on a valid frame: the farthest the
    reference's rounding model carried a flipped grid step, for each of two sides (the
    backend's flips and the reference's, at other activations)."""
    return BOTH_SIDES * float(result.bound[np.broadcast_to(result.mask, result.bound.shape)].max())


def median_bound(result: QuantizedForward) -> float:
    """The median difference allowed over the valid frames: float32's own (both sides), since
    most outputs see no flipped step."""
    return BOTH_SIDES * float(np.median(result.float32_bound[np.broadcast_to(result.mask, result.bound.shape)]))


def range_update_rounding(value: float) -> float:
    """A range's own update in float32 (momentum x old + (1 - momentum) x max, stored): four
    roundings of its magnitude."""
    return 4 * FLOAT32_UNIT_ROUNDOFF * abs(value)


def in_precision(model: ModelSpec, precision: str) -> ModelSpec:
    """``model`` in another precision, validated."""
    return type(model).model_validate(model.model_dump() | {"precision": precision})


def quantized_reference(model: ModelSpec) -> QuantizedReference:
    """The quantized reference of ``model``'s family; ``BenchbaseError`` for a family without int8-emulated."""
    found = quantized_reference_of(family_parts(model))
    if found is None:
        raise BenchbaseError(f"the {model.family} family has no int8-emulated (its parts have no quantized_reference)")
    return found


def int8_weights(data: KitData, seed: int = 0) -> dict[str, np.ndarray]:
    """The kit's random weights of the int8-emulated kit model: the family's random weights, ranges included."""
    model = in_precision(data.model, INT8_EMULATED)
    return family_parts(model).random_weights(model, data.feature_dimension, seed + 1)


def quantized_forward(backend_class: type[Backend], data: KitData, seed: int = 0,
                      inputs: Inputs | None = None) -> QuantizedForward:
    """An int8-emulated model's forward pass on the kit's random weights and activation ranges,
    inference mode, beside the reference's and its bounds."""
    model = in_precision(data.model, INT8_EMULATED)
    parts, reference = family_parts(model), quantized_reference(model)
    weights = int8_weights(data, seed)
    inputs = inputs or data.batches[0].inputs()
    with Kit(backend_class, data, seed).backend(model=model) as backend:
        backend.import_weights(weights)
        found = backend.predict(inputs)
    expected, bound = parts.bounded_outputs(weights, model, inputs.features, inputs.feature_lengths,
                                            operand_roundoff=0.0, draws=INJECTION_DRAWS)
    ranges = set(reference.range_names(model))
    kernels = {name: value for name, value in reference.quantized_kernels(weights, model).items()
               if name not in ranges}
    _, float32_bound = parts.bounded_outputs(kernels, data.model, inputs.features, inputs.feature_lengths,
                                             operand_roundoff=0.0, draws=INJECTION_DRAWS)
    frames = expected.shape[1]
    return QuantizedForward(found[:, :frames], expected, valid_frames(inputs, frames), bound, float32_bound)


def quantized_training_step(backend_class: type[Backend], data: KitData, seed: int = 0,
                            first: bool = False) -> QuantizedStep:
    """One train_step from the kit's random int8 weights on the kit's first batch; ``first``:
    from zero ranges (the first step sets each to its input's max|x|)."""
    model = in_precision(data.model, INT8_EMULATED)
    names = quantized_reference(model).range_names(model)
    weights = int8_weights(data, seed)
    if first:
        weights |= {name: np.zeros((), np.float32) for name in names}
    batch = data.batches[0]
    with Kit(backend_class, data, seed).backend(model=model) as backend:
        backend.import_weights(weights)
        loss = backend.train_step(batch)
        after = backend.export_weights()
    reference = family_parts(model).reference_step(weights, model, batch)
    return QuantizedStep(float(loss), reference.loss, reference.loss_bound,
                         {name: float(after[name]) for name in names if name in after},
                         {name: float(reference.running[name]) for name in names},
                         {name: float(reference.running_bound[name]) for name in names})
