"""The DS2 family's ``precision: int8-emulated``: which tensors it fake-quantizes and the ranges it keeps.

The scheme and its float32 functions are shared (``benchbase.numerics.quantization``);
``benchbase.families.ds2.reference`` runs the whole quantized forward pass with them at each
point ``ModelSpec.quantization`` names: the convolution's, every LSTM's and the output layer's
input activation and weight matrix, and h(t-1) of every recurrent matmul. Each layer's input
range is model state in the weight layout, a float32 scalar:

    conv.input_range, lstm.{i}.input_range, output.input_range
"""

from __future__ import annotations

import numpy as np

from benchbase.families.ds2.spec import DS2ModelSpec
from benchbase.families.parts import Weights
from benchbase.numerics.quantization import fake_quantize_weight, is_quantized

__all__ = ["input_range_names", "quantized_kernels", "range_names",
           "quantizer_state_layout", "tensor_name"]


def input_range_names(model: DS2ModelSpec) -> list[str]:
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


def quantizer_state_layout(model: DS2ModelSpec) -> dict[str, tuple[int, ...]]:
    """The ranges' entries of the neutral weight layout: each a float32 scalar, 0 before training."""
    return {name: () for name in input_range_names(model)}


def tensor_name(name: str) -> str:
    """The family's tensor of a layout name: "lstm.1.input_kernel" -> "lstm.input_kernel" (every
    LSTM layer shares its tensors' names)."""
    return "lstm." + name.rsplit(".", 1)[-1] if name.startswith("lstm.") else name


def quantized_kernels(weights: Weights, model: DS2ModelSpec) -> dict[str, np.ndarray]:
    """The weight matrices an int8-emulated ``model`` multiplies with, as float32 (the rest as they are)."""
    spec = model.quantization

    def quantized(name: str) -> bool:
        return is_quantized(model) and name.endswith("kernel") and spec.quantizes(tensor_name(name))

    return {name: fake_quantize_weight(value, spec) if quantized(name) else value for name, value in weights.items()}


range_names = input_range_names
"""This module is the family's ``benchbase.families.parts.QuantizedReference``: its ``range_names``
and ``quantized_kernels``."""
