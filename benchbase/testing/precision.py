"""The kit's checks of a backend's lower precisions, for the backends that declare them.

Not rules of ``RULES`` (every backend must pass those, and fp32 is all a backend must
implement): helpers that a backend's own tests call for the precisions its ``Capabilities``
declare, on the kit's data and random weights (tests/test_precision.py does for the three
bundled backends).

- ``quantized_forward``: predict() of an int8-emulated model against benchbase's NumPy
  reference of the same scheme (``benchbase.quantization``) on the same weights and ranges.
  The fake-quantized weights are bit-identical everywhere (the same float32 operations); an
  activation a float32 rounding away from a grid step's midpoint may land one step apart,
  and a step (range / 127) is far larger than float32's error, so the stated tolerance
  ``QUANTIZED_FORWARD_ATOL`` is looser than fp32's ``FORWARD_ATOL``.
- ``quantized_ranges_after_step``: the activation ranges one training step leaves, against
  the reference's (they are maxima of float32 activations: rel. ``RANGE_RTOL``).
"""

from __future__ import annotations

import numpy as np

from benchbase.backend import Backend, Inputs
from benchbase.quantization import INT8_EMULATED, input_range_names
from benchbase.specs import ModelSpec
from benchbase.testing.kit import Kit
from benchbase.testing.kit_data import KitData
from benchbase.testing.model_rules import valid_frames
from benchbase.testing.reference_model import random_weights, reference_forward

__all__ = [
    "QUANTIZED_FORWARD_ATOL",
    "QUANTIZED_FORWARD_MEDIAN_ATOL",
    "RANGE_RTOL",
    "in_precision",
    "quantized_forward",
    "quantized_ranges_after_step",
]

QUANTIZED_FORWARD_ATOL = 5e-2
"""Largest difference of an int8-emulated backend's log-probabilities from the reference's on a
valid frame (natural-log units). Measured on the kit's first batch: the median difference is
1e-7 in all three bundled backends (the same grid, the same values); the largest 0.026
(PyTorch), 0.021 (TensorFlow) and 8e-7 (JAX), where an h(t-1) a float32 rounding away from a
grid midpoint took the neighbouring step (1/127) and the recurrence carried it on."""
QUANTIZED_FORWARD_MEDIAN_ATOL = 1e-5
"""The median difference over the valid frames: most outputs must be the reference's."""
RANGE_RTOL = 1e-4


def in_precision(model: ModelSpec, precision: str) -> ModelSpec:
    """``model`` in another precision, validated."""
    return ModelSpec.model_validate(model.model_dump() | {"precision": precision})


def quantized_forward(backend_class: type[Backend], data: KitData, seed: int = 0,
                      inputs: Inputs | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(backend's log-probs, reference's log-probs, valid-frame mask) of an int8-emulated model
    on the kit's random weights and activation ranges (U(3, 8)), inference mode."""
    model = in_precision(data.model, INT8_EMULATED)
    weights = random_weights(model, data.feature_dimension, seed=seed + 1)
    inputs = inputs or data.batches[0].inputs()
    kit = Kit(backend_class, data, seed)
    with kit.backend(model=model) as backend:
        backend.import_weights(weights)
        found, _ = backend.predict(inputs)
    expected, _ = reference_forward(weights, model, inputs.features, inputs.feature_lengths, training=False)
    frames = expected.shape[1]
    return found[:, :frames], expected, valid_frames(inputs, frames)


def quantized_ranges_after_step(backend_class: type[Backend], data: KitData, seed: int = 0,
                                first: bool = False) -> tuple[dict[str, float], dict[str, float]]:
    """({range name: the backend's value}, {range name: the reference's}) after one train_step
    from the kit's random weights; ``first``: from zero ranges (the first step sets them)."""
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
    _, running = reference_forward(weights, model, batch.features, batch.feature_lengths, training=True)
    names = input_range_names(model)
    return ({name: float(after[name]) for name in names}, {name: float(running[name]) for name in names})
