"""The NumPy reference of ``precision: int8-emulated``: fake quantization as ``QuantizationSpec`` pins it.

Backends implement the same scheme in their frameworks; their tests compare against these
functions (tests/test_precision.py), and ``benchbase.families.ds2.reference`` runs the
whole quantized forward pass with them. The scheme, in one place:

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

from benchbase.families.ds2.spec import DS2ModelSpec as ModelSpec
from benchbase.specs.model import QuantizationSpec

__all__ = [
    "INT8_EMULATED",
    "activation_scale",
    "fake_quantize",
    "fake_quantize_activation",
    "fake_quantize_weight",
    "input_range_names",
    "is_quantized",
    "quantizer_state_layout",
    "recurrent_state_scale",
    "updated_range",
    "weight_scale",
]

INT8_EMULATED = "int8-emulated"


def is_quantized(model: ModelSpec) -> bool:
    """Whether the model trains and evaluates fake-quantized."""
    return model.precision == INT8_EMULATED


def input_range_names(model: ModelSpec) -> list[str]:
    """The moving-average activation ranges the model keeps, in layer order ([] unless int8-emulated).

    "conv.input_range", "lstm.{i}.input_range", "output.input_range": the range of the named
    layer's input, where ``quantization.tensors`` quantizes that input.
    """
    if not is_quantized(model):
        return []
    spec = model.quantization
    names = ["conv.input_range"] if spec.quantizes("conv.input") else []
    if spec.quantizes("lstm.input"):
        names += [f"lstm.{layer}.input_range" for layer in range(model.lstm_layers)]
    if spec.quantizes("output.input"):
        names.append("output.input_range")
    return names


def quantizer_state_layout(model: ModelSpec) -> dict[str, tuple[int, ...]]:
    """The ranges' entries of the neutral weight layout: each a float32 scalar, 0 before training."""
    return {name: () for name in input_range_names(model)}


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
