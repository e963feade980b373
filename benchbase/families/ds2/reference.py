"""benchbase's NumPy reference of the DS2 model family: the forward pass the spec pins.

Computed in float64 from weights in the framework-neutral layout (``benchbase.families.ds2.weight_layout``),
so that a backend's float32 results can be compared with it on the very same weights:

    conv1d (valid, strided, no bias) -> BatchNorm -> clipped ReLU (or ReLU)
      -> [LSTM (gates i, f, g, o; zero initial state) -> BatchNorm] x layers
      -> dense -> log-softmax

For a model of precision int8-emulated the conv's, each LSTM's and the output layer's inputs
and weight matrices (and h(t-1) of the recurrent matmul) are fake-quantized first, with
``benchbase.numerics.quantization``'s functions, as ``ModelSpec.quantization`` pins; the activation
ranges are read from the weights ("conv.input_range", ...) and returned updated beside
BatchNorm's statistics. Every other precision is computed as fp32 (in float64).

Dropout is never applied (the conformance kit trains with dropout 0). In training mode,
BatchNorm normalizes with the statistics of the batch, per channel over the batch and every
frame of the padded batch (padding included: ``ModelSpec.batchnorm_frames``), with the biased
variance (``batchnorm_variance``), and the running statistics move toward them with the
spec's momentum (Keras's convention: the share of the old value kept).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from benchbase.backend import Batch
from benchbase.families.ctc import bounded_ctc_step
from benchbase.families.ds2.weight_layout import weight_layout
from benchbase.families.parts import ReferenceStep
from benchbase.numerics import quantization
from benchbase.numerics.rounded import RoundedArithmetic, log_softmax, lstm_layer
from benchbase.numerics.tolerances import INJECTION_DRAWS, RoundingModel, rounding_bound
from benchbase.specs import ModelSpec

__all__ = [
    "BoundedReference",
    "batchnorm_names",
    "bounded_reference",
    "bounded_step",
    "random_weights",
    "reference_forward",
]


def reference_forward(weights: Mapping[str, np.ndarray], model: ModelSpec, features: np.ndarray,
                      feature_lengths: np.ndarray, training: bool,
                      rounding: RoundingModel | None = None) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Log-probabilities (batch, output frames of the padded batch, symbols), float64, and the
    running BatchNorm statistics after this pass ("conv_norm.mean", ... float64).

    ``training=True`` normalizes with the batch's statistics and returns the updated running
    statistics; ``training=False`` normalizes with the running statistics and returns them as
    they were. ``feature_lengths`` only checks the batch: outputs past an utterance's
    ``model.output_frames`` are computed over its padding, as a backend computes them.

    ``rounding``: a ``benchbase.numerics.tolerances.RoundingModel`` that moves every
    accumulation and vector function by its float32 rounding bound (the error model's
    propagation step); ``None`` computes the reference as it is.
    """
    _check_inputs(weights, model, features, feature_lengths)
    w = {name: np.asarray(value, dtype=np.float64) for name, value in weights.items()}
    running: dict[str, np.ndarray] = {}
    quantize = _Quantizer(weights, model, training, running)
    rounded = RoundedArithmetic(rounding)
    x = quantize.input("conv", np.asarray(features, dtype=np.float64))
    x = _convolve(x, quantize.kernel("conv.kernel", w), model.conv_stride, rounded)
    x = _batchnorm(x, w, "conv_norm", model, training, running, rounded)
    x = np.minimum(np.maximum(x, 0.0), 20.0) if model.conv_activation == "clipped_relu" else np.maximum(x, 0.0)
    for layer in range(model.lstm_layers):
        prefix = f"lstm.{layer}"
        x = quantize.input(prefix, x)
        x = lstm_layer(x, quantize.kernel(f"{prefix}.input_kernel", w),
                       quantize.kernel(f"{prefix}.recurrent_kernel", w), w[f"{prefix}.bias"], quantize.recurrent_state,
                       rounded)
        x = _batchnorm(x, w, f"lstm_norm.{layer}", model, training, running, rounded)
    x = quantize.input("output", x)
    kernel = quantize.kernel("output.kernel", w)
    logits = rounded.dot(x, kernel, w["output.bias"])
    return log_softmax(logits, rounded), running


@dataclass(frozen=True)
class BoundedReference:
    """The reference's results and, elementwise, how far one float32 computation of them may
    land (``benchbase.numerics.tolerances``, rule 4)."""

    log_probs: np.ndarray
    running: dict[str, np.ndarray]
    log_probs_bound: np.ndarray
    running_bound: dict[str, np.ndarray]


def bounded_reference(weights: Mapping[str, np.ndarray], model: ModelSpec, features: np.ndarray,
                      feature_lengths: np.ndarray, training: bool, operand_roundoff: float = 0.0,
                      draws: int = INJECTION_DRAWS) -> BoundedReference:
    """``reference_forward`` with the rounding bound of each of its outputs: of float32
    arithmetic, or with ``operand_roundoff`` of a mixed precision whose operands are narrower;
    ``draws``: random-sign injections whose largest movement is the bound."""
    def compute(rounding: RoundingModel | None) -> dict[str, np.ndarray]:
        log_probs, running = reference_forward(weights, model, features, feature_lengths, training, rounding)
        return {"log_probs": log_probs, **running}

    exact, bound = rounding_bound(compute, draws=draws, operand_roundoff=operand_roundoff)
    running = {name: value for name, value in exact.items() if name != "log_probs"}
    return BoundedReference(exact["log_probs"], running, bound.pop("log_probs"), bound)


def bounded_step(weights: Mapping[str, np.ndarray], model: ModelSpec, batch: Batch) -> ReferenceStep:
    """A training step's forward pass on ``batch``: its mean CTC loss and the running statistics it
    leaves, each with its rounding bound (``benchbase.families.ctc.bounded_ctc_step``)."""
    def forward(rounding: RoundingModel | None) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        return reference_forward(weights, model, batch.features, batch.feature_lengths, True, rounding)

    return bounded_ctc_step(forward, batch, model.ctc_blank_index, model.batchnorm_momentum)


class _Quantizer:
    """int8-emulated's fake quantization at each point ``ModelSpec.quantization`` names, with
    ``benchbase.numerics.quantization``'s float32 functions; the identity for every other precision.

    The quantized values are float32 grid points, exact in the float64 arithmetic around them.
    The updated (training) or unchanged (inference) ranges go into ``running`` as
    "<layer>.input_range", beside BatchNorm's statistics.
    """

    def __init__(self, weights: Mapping[str, np.ndarray], model: ModelSpec, training: bool,
                 running: dict[str, np.ndarray]) -> None:
        self.on = quantization.is_quantized(model)
        self.spec = model.quantization
        self.weights, self.training, self.running = weights, training, running

    def input(self, layer: str, x: np.ndarray) -> np.ndarray:
        tensor = "lstm.input" if layer.startswith("lstm.") else f"{layer}.input"
        if not (self.on and self.spec.quantizes(tensor)):
            return x
        name = f"{layer}.input_range"
        quantized, value_range = quantization.fake_quantize_activation(x, self.weights[name], self.spec,
                                                                       self.training)
        self.running[name] = np.asarray(value_range, np.float64)
        return quantized.astype(np.float64)

    def kernel(self, name: str, w: dict[str, np.ndarray]) -> np.ndarray:
        tensor = "lstm." + name.split(".")[-1] if name.startswith("lstm.") else name
        if not (self.on and self.spec.quantizes(tensor)):
            return w[name]
        return quantization.fake_quantize_weight(self.weights[name], self.spec).astype(np.float64)

    @property
    def recurrent_state(self):
        if not (self.on and self.spec.quantizes("lstm.recurrent_state")):
            return None
        scale, qmax = quantization.recurrent_state_scale(self.spec), self.spec.qmax
        return lambda h: quantization.fake_quantize(h, scale, qmax).astype(np.float64)


def random_weights(model: ModelSpec, feature_dimension: int, seed: int) -> dict[str, np.ndarray]:
    """Random float32 weights in the framework-neutral layout, for parity checks.

    Matrices are Xavier-uniform (as the spec initializes them) and every vector is random
    too, BatchNorm's running statistics included (mean ~ N(0, 0.1), variance ~ U(0.5, 1.5),
    scale ~ U(0.8, 1.2), offsets and biases ~ N(0, 0.1), an int8-emulated model's activation
    ranges ~ U(3, 8)): weights a backend only initializes
    could hide a part it ignores, such as a running variance it never reads or a bias it drops.
    A few convolution channels are shifted to about 20, around the clipped ReLU's ceiling.
    """
    rng = np.random.default_rng(seed)
    weights = {name: _random_weight(rng, name, shape)
               for name, shape in weight_layout(model, feature_dimension).items()}
    # A few channels sit around the clipped ReLU's ceiling of 20, so that a plain ReLU (or
    # another ceiling) shows; only a few, since inputs that large saturate the LSTM's gates.
    channels = rng.choice(model.conv_channels, size=max(1, model.conv_channels // 24), replace=False)
    weights["conv_norm.offset"][channels] = rng.uniform(17.0, 23.0, len(channels))
    weights["conv_norm.scale"][channels] = rng.uniform(2.0, 4.0, len(channels))
    return {name: array.astype(np.float32) for name, array in weights.items()}


def batchnorm_names(model: ModelSpec) -> list[str]:
    """The prefixes of every BatchNorm of the model, in layer order ("conv_norm", "lstm_norm.0", ...)."""
    return ["conv_norm"] + [f"lstm_norm.{layer}" for layer in range(model.lstm_layers)]


def _random_weight(rng: np.random.Generator, name: str, shape: tuple[int, ...]) -> np.ndarray:
    part = name.rsplit(".", 1)[-1]
    if part == "mean":
        return rng.normal(0.0, 0.1, shape)
    if part == "variance":
        return rng.uniform(0.5, 1.5, shape)
    if part == "scale":
        return rng.uniform(0.8, 1.2, shape)
    if part in ("offset", "bias"):
        return rng.normal(0.0, 0.1, shape)
    if part == "input_range":  # int8-emulated's activation ranges: some saturate, most do not
        return rng.uniform(3.0, 8.0, shape)
    fan_in, fan_out = int(np.prod(shape[:-1])), shape[-1]
    if name == "conv.kernel":  # Keras's fans of a convolution: receptive field x channels
        fan_in, fan_out = shape[0] * shape[1], shape[0] * shape[2]
    limit = np.sqrt(6.0 / (fan_in + fan_out))
    return rng.uniform(-limit, limit, shape)


def _check_inputs(weights, model: ModelSpec, features: np.ndarray, feature_lengths: np.ndarray) -> None:
    expected = weight_layout(model, features.shape[-1])
    missing = sorted(set(expected) - set(weights))
    if missing:
        raise ValueError(f"weights lack {', '.join(missing)}")
    wrong = [f"{name} {np.shape(weights[name])} (expected {shape})" for name, shape in expected.items()
             if tuple(np.shape(weights[name])) != shape]
    if wrong:
        raise ValueError(f"weights of the wrong shape: {'; '.join(wrong)}")
    if features.ndim != 3 or features.shape[1] < model.conv_width:
        raise ValueError(f"features must be (batch, at least {model.conv_width} frames, dimension), "
                         f"got {features.shape}")
    if np.shape(feature_lengths) != (features.shape[0],):
        raise ValueError(f"feature_lengths must be ({features.shape[0]},), got {np.shape(feature_lengths)}")


def _convolve(x: np.ndarray, kernel: np.ndarray, stride: int, rounded: RoundedArithmetic) -> np.ndarray:
    """Valid, strided 1-D convolution: (batch, frames, features) -> (batch, frames', channels)."""
    width, dimension, channels = kernel.shape
    windows = np.lib.stride_tricks.sliding_window_view(x, width, axis=1)[:, ::stride]  # (b, t', f, width)
    windows = windows.transpose(0, 1, 3, 2).reshape(x.shape[0], -1, width * dimension)
    return rounded.dot(windows, kernel.reshape(width * dimension, channels))


def _batchnorm(x: np.ndarray, w: dict[str, np.ndarray], prefix: str, model: ModelSpec, training: bool,
               running: dict[str, np.ndarray], rounded: RoundedArithmetic) -> np.ndarray:
    """Normalize per channel (the last axis); in training, with every frame of the padded batch."""
    mean, variance = w[f"{prefix}.mean"], w[f"{prefix}.variance"]
    if training:
        frames = x.reshape(-1, x.shape[-1])
        batch_mean = rounded.mean(frames)
        # Biased: divided by the frame count. Moved by the bound of E[x^2], which also covers a
        # framework that computes the variance as E[x^2] - E[x]^2.
        batch_variance = rounded.mean((frames - batch_mean) ** 2)
        if rounded.model is not None:
            batch_variance = batch_variance + (rounded.mean(frames**2) - (frames**2).mean(axis=0))
        momentum = model.batchnorm_momentum
        running[f"{prefix}.mean"] = momentum * mean + (1.0 - momentum) * batch_mean
        running[f"{prefix}.variance"] = momentum * variance + (1.0 - momentum) * batch_variance
        mean, variance = batch_mean, batch_variance
    else:
        running[f"{prefix}.mean"], running[f"{prefix}.variance"] = mean.copy(), variance.copy()
    normalized = rounded.function((x - mean) / np.sqrt(variance + model.batchnorm_epsilon), 3)
    return rounded.function(normalized * w[f"{prefix}.scale"] + w[f"{prefix}.offset"], 2)
