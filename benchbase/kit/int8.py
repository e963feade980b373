"""The kit's checks of a backend's lower precisions, for the backends that declare them.

Not rules of ``RULES`` (every backend must pass those, and fp32 is all a backend must
implement): helpers that a backend's own tests call for the precisions its ``Capabilities``
declare, on the kit's data and random weights (tests/test_precision.py does for the three
bundled backends). Their tolerances come from ``benchbase.numerics.tolerances``' error model.

- ``quantized_forward``: predict() of an int8-emulated model against benchbase's NumPy
  reference of the same scheme (``benchbase.families.ds2.quantization``) on the same weights and ranges.
  The fake-quantized weights are bit-identical everywhere (the same float32 operations); an
  activation a float32 rounding away from a grid step's midpoint may land one step apart
  (range / 127), and the recurrence carries that step on. The reference's rounding model
  flips exactly such activations, so its bound shows how far a flip travels; a backend's
  own roundings flip others, hence ``flip_bound``. Most outputs see no flip and must be the
  reference's to float32's own bound (``median_bound``).
- ``quantized_ranges_after_step``: the activation ranges one training step leaves, against
  the reference's, within their rounding bound (a flip upstream moves a maximum too).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from benchbase.backend import Backend, Inputs
from benchbase.families.ds2.quantization import INT8_EMULATED, fake_quantize_weight, input_range_names
from benchbase.families.ds2.reference import bounded_reference, random_weights
from benchbase.kit.core import Kit
from benchbase.kit.data import KitData
from benchbase.kit.outputs import valid_frames
from benchbase.numerics.tolerances import BOTH_SIDES, FLOAT32_UNIT_ROUNDOFF
from benchbase.specs import ModelSpec

__all__ = [
    "QuantizedForward",
    "flip_bound",
    "in_precision",
    "median_bound",
    "quantized_forward",
    "quantized_ranges_after_step",
    "range_update_rounding",
]

@dataclass(frozen=True)
class QuantizedForward:
    """A backend's int8-emulated log-probabilities beside the reference's, with the bounds."""

    found: np.ndarray
    expected: np.ndarray
    mask: np.ndarray
    """(batch, frames, 1): the valid frames."""
    bound: np.ndarray
    """Elementwise rounding bound of the quantized forward (grid flips included)."""
    float32_bound: np.ndarray
    """Elementwise rounding bound of the same weights without quantization (no flips)."""


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


def quantized_forward(backend_class: type[Backend], data: KitData, seed: int = 0,
                      inputs: Inputs | None = None) -> QuantizedForward:
    """An int8-emulated model's forward pass on the kit's random weights and activation ranges
    (U(3, 8)), inference mode, beside the reference's and its bounds."""
    model = in_precision(data.model, INT8_EMULATED)
    weights = random_weights(model, data.feature_dimension, seed=seed + 1)
    inputs = inputs or data.batches[0].inputs()
    kit = Kit(backend_class, data, seed)
    with kit.backend(model=model) as backend:
        backend.import_weights(weights)
        found = backend.predict(inputs)
    reference = bounded_reference(weights, model, inputs.features, inputs.feature_lengths, training=False)
    unquantized = {name: value for name, value in weights.items() if not name.endswith(".input_range")}
    float32 = bounded_reference(quantize_weights(unquantized, data.model), data.model, inputs.features,
                                inputs.feature_lengths, training=False)
    frames = reference.log_probs.shape[1]
    return QuantizedForward(found[:, :frames], reference.log_probs, valid_frames(inputs, frames),
                            reference.log_probs_bound, float32.log_probs_bound)


def quantized_ranges_after_step(backend_class: type[Backend], data: KitData, seed: int = 0, first: bool = False
                                ) -> tuple[dict[str, float], dict[str, float], dict[str, float]]:
    """({range name: the backend's value}, {the reference's}, {its rounding bound}) after one
    train_step from the kit's random weights; ``first``: from zero ranges (the first step sets them)."""
    model = in_precision(data.model, INT8_EMULATED)
    weights = random_weights(model, data.feature_dimension, seed=seed + 1)
    if first:
        weights |= {name: np.zeros((), np.float32) for name in input_range_names(model)}
    batch = data.batches[0]
    kit = Kit(backend_class, data, seed)
    with kit.backend(model=model) as backend:
        backend.import_weights(weights)
        backend.train_step(batch)
        after = backend.export_weights()
    reference = bounded_reference(weights, model, batch.features, batch.feature_lengths, training=True)
    names = input_range_names(model)
    return ({name: float(after[name]) for name in names}, {name: float(reference.running[name]) for name in names},
            {name: float(reference.running_bound[name]) for name in names})


def quantize_weights(weights: dict[str, np.ndarray], model: ModelSpec) -> dict[str, np.ndarray]:
    """The weight matrices an int8-emulated model multiplies with, as float32 (the rest as they are)."""
    spec = in_precision(model, INT8_EMULATED).quantization

    def quantized(name: str) -> bool:  # the tensor names of ModelSpec.quantization
        tensor = "lstm." + name.rsplit(".", 1)[-1] if name.startswith("lstm.") else name
        return name.endswith("kernel") and spec.quantizes(tensor)

    return {name: fake_quantize_weight(value, spec) if quantized(name) else value for name, value in weights.items()}
