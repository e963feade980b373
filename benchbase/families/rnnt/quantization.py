"""The RNN-T family's ``precision: int8-emulated``: which tensors it fake-quantizes, the ranges
it keeps, and the quantizer the NumPy reference and the greedy search apply.

The scheme is ``QuantizationSpec``'s, computed with its shared float32 functions
(``benchbase.numerics.quantization``): weight matrices per tensor by max|W|, each layer's
input activation by a moving-average range, h(t-1) of every recurrent matmul by the fixed
``recurrent_state_range``. The family's tensors (``RNNTModelSpec.quantizable_tensors``):

    encoder.lstm.{input, input_kernel, recurrent_kernel, recurrent_state}       every encoder LSTM
    prediction.lstm.{input, input_kernel, recurrent_kernel, recurrent_state}    every prediction LSTM
    joint.encoder.{input, kernel}      the encoder's top-layer output and its projection's kernel
    joint.prediction.{input, kernel}   g(u) and its projection's kernel
    joint.output.{input, kernel}       the joint's activation and the output kernel

An input's range is over every element of the tensor as its layer receives it: the whole
padded sequence of an LSTM layer (after input or time stacking, for the encoder's, and of
every U + 1 positions for the prediction network's), which every backend computes. The
exception is joint.output: its range is over the cells of the lattice within each utterance's
lengths (t < T'(b), u <= U(b)) only, the cells the transducer loss reads. The padded lattice
is the step's largest tensor and a backend may compute only the cells inside (the torch
backend packs them), and a range must not depend on how much padding a batch happens to have.
The embedding is a lookup, not
quantized; its rows enter prediction.lstm.0 as its input. Each range is model state in the
weight layout, a float32 scalar:

    encoder.lstm.{i}.input_range, prediction.lstm.{i}.input_range,
    joint.encoder.input_range, joint.prediction.input_range, joint.output.input_range
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from benchbase.families.parts import Weights
from benchbase.families.rnnt.spec import RNNTModelSpec
from benchbase.numerics import quantization as primitives

__all__ = ["Quantizer", "input_range_names", "quantized_kernels", "range_names",
           "quantizer_state_layout", "tensor_name"]

JOINT_LAYERS = ("joint.encoder", "joint.prediction", "joint.output")


def input_range_names(model: RNNTModelSpec) -> list[str]:
    """The moving-average activation ranges the model keeps, in layer order ([] unless int8-emulated)."""
    if not primitives.is_quantized(model):
        return []
    layers = [f"encoder.lstm.{i}" for i in range(model.encoder_pre_layers + model.encoder_post_layers)]
    layers += [f"prediction.lstm.{i}" for i in range(model.prediction_layers)]
    layers += list(JOINT_LAYERS)
    return [f"{layer}.input_range" for layer in layers if model.quantization.quantizes(tensor_name(f"{layer}.input"))]


def quantizer_state_layout(model: RNNTModelSpec) -> dict[str, tuple[int, ...]]:
    """The ranges' entries of the neutral weight layout: each a float32 scalar, 0 before training."""
    return {name: () for name in input_range_names(model)}


def tensor_name(name: str) -> str:
    """The family's tensor of a layout name or layer input: "encoder.lstm.3.input_kernel" ->
    "encoder.lstm.input_kernel" (every layer of a network shares its tensors' names)."""
    return ".".join(part for part in name.split(".") if not part.isdigit())


class Quantizer:
    """Fake quantization at every point ``model.quantization`` names; the identity unless the
    model is int8-emulated. ``ranges`` holds the activation ranges, read from the weights and,
    in training, updated as each layer's input passes (the values a training step leaves)."""

    def __init__(self, weights: Mapping[str, np.ndarray], model: RNNTModelSpec, training: bool) -> None:
        self.spec = model.quantization
        self.on = primitives.is_quantized(model)
        self.training = training
        self.ranges = {name: np.float32(weights[name]) for name in input_range_names(model)}

    def quantizes(self, tensor: str) -> bool:
        return self.on and self.spec.quantizes(tensor_name(tensor))

    def input(self, layer: str, x: np.ndarray, inside: np.ndarray | None = None) -> np.ndarray:
        """``layer``'s input as the layer computes with it (values on the float32 grid, in ``x``'s dtype).

        ``inside``: a boolean mask broadcastable to ``x``; when given, a training pass takes its
        range from those elements only (every element is quantized), and keeps the range as it
        is when there are none."""
        if not self.quantizes(f"{layer}.input"):
            return x
        name = f"{layer}.input_range"
        if self.training:
            counted = x if inside is None else x[np.broadcast_to(inside, x.shape)]
            if counted.size:
                self.ranges[name] = primitives.updated_range(self.ranges[name], counted, self.spec)
            scale = primitives.activation_scale(self.ranges[name], self.spec)
            return primitives.fake_quantize(x, scale, self.spec.qmax).astype(x.dtype)
        quantized, _ = primitives.fake_quantize_activation(x, self.ranges[name], self.spec, training=False)
        return quantized.astype(x.dtype)

    def kernel(self, name: str, kernel: np.ndarray) -> np.ndarray:
        if not self.quantizes(name):
            return kernel
        return primitives.fake_quantize_weight(kernel, self.spec).astype(kernel.dtype)

    def recurrent_state(self, layer: str) -> Callable[[np.ndarray], np.ndarray]:
        """h(t-1) as ``layer``'s recurrent matmul reads it."""
        if not self.quantizes(f"{layer}.recurrent_state"):
            return lambda h: h
        scale, qmax = primitives.recurrent_state_scale(self.spec), self.spec.qmax
        return lambda h: primitives.fake_quantize(h, scale, qmax).astype(h.dtype)


def quantized_kernels(weights: Weights, model: RNNTModelSpec) -> dict[str, np.ndarray]:
    """The weight matrices an int8-emulated ``model`` multiplies with, as float32 (the rest as they are)."""
    kernels = Quantizer(weights, model, training=False)
    return {name: kernels.kernel(name, value) if name.endswith("kernel") else value for name, value in weights.items()}


range_names = input_range_names
"""This module is the family's ``benchbase.families.parts.QuantizedReference``: its ``range_names``
and ``quantized_kernels``."""
