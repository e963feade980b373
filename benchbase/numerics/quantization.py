"""The shared scheme of ``precision: int8-emulated``: fake quantization as ``QuantizationSpec`` pins it.

Every family that has int8-emulated computes its quantized NumPy reference with these float32
functions, and backends implement the same scheme in their frameworks (tests/test_precision.py
compares them against these). Which tensors a family quantizes and which activation ranges it
keeps are the family's own (its package's ``quantization`` module, and the ``QuantizedReference``
of its parts, ``benchbase.families.parts``). The scheme, in one place:

- A fake-quantized tensor is ``clip(round(x / scale), -qmax, qmax) * scale``, ``qmax = 2**(bits-1) - 1``,
  rounding half to even, in float32: symmetric, so zero is exact and a tensor takes at most
  ``2 * qmax + 1`` (255 for 8 bits) distinct values.
- A weight matrix's scale is ``max|W| / qmax`` of the whole tensor (per-tensor, from the float32
  master weight at every forward pass).
- An input activation's scale is ``range / qmax``, ``range`` a moving average of the batch's
  ``max|x|`` (``range_momentum`` of the old value kept; the first training step sets it) that
  training updates before quantizing and inference only reads; an activation beyond the range
  saturates.
- h(t-1) entering an LSTM's recurrent matmul has the fixed range ``recurrent_state_range``.
- Gradients are straight-through: identity inside the range, zero where an activation
  saturated; no gradient reaches a scale or a range.

Every function takes and returns NumPy arrays; float32 in, float32 out, so that a backend's
float32 result can be compared bit for bit where the arithmetic is the same.
"""

from __future__ import annotations

import numpy as np

from benchbase.specs.model import ModelSpec, QuantizationSpec

__all__ = [
    "INT8_EMULATED",
    "activation_scale",
    "fake_quantize",
    "fake_quantize_activation",
    "fake_quantize_weight",
    "is_quantized",
    "recurrent_state_scale",
    "updated_range",
    "weight_scale",
]

INT8_EMULATED = "int8-emulated"


def is_quantized(model: ModelSpec) -> bool:
    """Whether the model trains and evaluates fake-quantized."""
    return model.precision == INT8_EMULATED


def weight_scale(weight: np.ndarray, spec: QuantizationSpec) -> np.float32:
    """max|W| / qmax in float32 (1 for an all-zero tensor, which quantizes to zeros anyway)."""
    largest = np.float32(np.max(np.abs(np.asarray(weight, np.float32)))) if np.size(weight) else np.float32(0)
    return np.float32(largest / np.float32(spec.qmax)) if largest > 0 else np.float32(1.0)


def activation_scale(value_range: float, spec: QuantizationSpec) -> np.float32:
    """range / qmax in float32 (1 for a zero range, which only an all-zero tensor has)."""
    value_range = np.float32(value_range)
    return np.float32(value_range / np.float32(spec.qmax)) if value_range > 0 else np.float32(1.0)


def fake_quantize(x: np.ndarray, scale: float, qmax: int) -> np.ndarray:
    """clip(round_half_even(x / scale), -qmax, qmax) * scale, in float32."""
    scale = np.float32(scale)
    steps = np.clip(np.round(np.asarray(x, np.float32) / scale), -qmax, qmax)
    return (steps * scale).astype(np.float32)


def fake_quantize_weight(weight: np.ndarray, spec: QuantizationSpec) -> np.ndarray:
    return fake_quantize(weight, weight_scale(weight, spec), spec.qmax)


def updated_range(value_range: float, x: np.ndarray, spec: QuantizationSpec) -> np.float32:
    """The range after a training step on ``x``: max|x| at the first step (range 0), else the moving average."""
    batch = np.float32(np.max(np.abs(np.asarray(x, np.float32))))
    value_range = np.float32(value_range)
    if value_range == 0:
        return batch
    momentum = np.float32(spec.range_momentum)
    return np.float32(momentum * value_range + np.float32(1.0 - spec.range_momentum) * batch)


def fake_quantize_activation(x: np.ndarray, value_range: float, spec: QuantizationSpec,
                             training: bool) -> tuple[np.ndarray, np.float32]:
    """(the fake-quantized activation, the range after this pass).

    Training updates the range first and quantizes with the new one; inference quantizes with
    the stored range, or with the batch's own max|x| while the range is still 0 (never trained).
    """
    stored = np.float32(value_range)
    if training:
        used = updated_range(stored, x, spec)
        return fake_quantize(x, activation_scale(used, spec), spec.qmax), used
    used = stored if stored > 0 else np.float32(np.max(np.abs(np.asarray(x, np.float32))))
    return fake_quantize(x, activation_scale(used, spec), spec.qmax), stored


def recurrent_state_scale(spec: QuantizationSpec) -> np.float32:
    return activation_scale(spec.recurrent_state_range, spec)
