"""The Deep Speech 2-like model of the workload spec as pure JAX functions.

The weights live in flat dicts keyed by benchbase's framework-neutral names
(``benchbase.families.ds2.weight_layout``), so exporting, importing and checkpointing need no renaming,
and the layouts are Keras's, which is also the natural one for ``x @ kernel`` in JAX.

Batches arrive padded further than the harness padded them (to reuse compiled shapes), so
the training forward pass takes a mask of the conv output frames that the harness's own
batch holds: BatchNorm takes its statistics over exactly those (``batchnorm_frames`` =
"all_padded" means the harness's padding, not ours). The LSTMs are unidirectional, so the
extra frames at the end never reach the frames before them.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from benchbase.families.ds2.weight_layout import BATCHNORM_PARTS, weight_layout
from benchbase.numerics.quantization import is_quantized
from benchbase.specs import ModelSpec
from benchbase.specs.workload import QuantizationSpec
from benchbase_jax_ds2.arithmetic import Arithmetic, arithmetic
from benchbase_jax_ds2.dropout import counter_hash
from benchbase_jax_ds2.quantization import quantize_activation, quantize_weight, updated_range
from benchbase_jax_ds2.recurrence import Recurrent, recurrence
from benchbase_jax_ds2.state import STATISTICS

__all__ = ["CONVOLUTION", "forward", "initial_weights"]

CONVOLUTION = "nwc"
"""How the conv layer computes (``_convolution``): "nwc", XLA's convolution with the channels last
(JAX's and Keras's layout); "ncw", XLA's convolution with the channels first (PyTorch's layout,
transposed on the way in and out); "matmul", each output frame's window of input frames side by side
and one matmul with the kernel (im2col). On one thread of a 2-core AVX-512 EPYC (rough: the machine
loaded by other work, the variants alternating on the same ds2-mini batches) the step took 1.28x
PyTorch's with "nwc", 1.35x with "ncw" and 1.62x with "matmul" (one matmul per kernel tap, summed:
1.91x); the switch keeps the others for a GPU measurement. Read when the step is traced."""


def initial_weights(spec: ModelSpec, feature_dimension: int, seed: int) -> dict[str, np.ndarray]:
    """Every weight of ``weight_layout``, initialized as the spec pins it.

    Drawn with NumPy: the same on every platform, and no program to compile on the run clock
    (XLA takes seconds to compile JAX's counter-based generator for two dozen shapes).
    """
    rng = np.random.default_rng(seed)
    return {name: _initial(name, shape, rng, spec)
            for name, shape in weight_layout(spec, feature_dimension).items()}


def _initial(name: str, shape: tuple[int, ...], rng: np.random.Generator, spec: ModelSpec) -> np.ndarray:
    part = name.rsplit(".", 1)[-1]
    if part in ("kernel", "input_kernel", "recurrent_kernel"):
        return _xavier_uniform(rng, shape)
    if part in ("scale", "variance"):
        return np.ones(shape, np.float32)
    value = np.zeros(shape, np.float32)
    if part == "bias" and name.startswith("lstm."):
        value[spec.lstm_units : 2 * spec.lstm_units] = spec.lstm_forget_bias  # gates i, f, g, o
    return value


def _xavier_uniform(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Glorot-uniform over the whole matrix; a conv kernel's fans include its width (as Keras)."""
    receptive_field = int(np.prod(shape[:-2], dtype=np.int64))
    fan_in, fan_out = shape[-2] * receptive_field, shape[-1] * receptive_field
    limit = np.sqrt(6.0 / (fan_in + fan_out))
    return rng.uniform(-limit, limit, shape).astype(np.float32)


def forward(spec: ModelSpec, parameters: dict, statistics: dict, features: jax.Array, *,
            frame_mask: jax.Array | None = None, dropout_key: jax.Array | None = None,
            valid_mask: jax.Array | None = None, math: Arithmetic | None = None) -> tuple[jax.Array, dict]:
    """(batch, frames, features) -> (log-probs (batch, frames', symbols), updated statistics).

    Training mode when ``frame_mask`` (batch, frames') is given: BatchNorm normalizes with
    the statistics of the masked frames and updates its running statistics, and dropout is
    on when ``dropout_key`` is given too. Inference mode otherwise; ``valid_mask`` there marks
    the frames of the caller's own batch, which an untrained int8-emulated model takes its
    activation ranges from. ``math``: the arithmetic (``arithmetic(spec)`` by default). Log-probabilities
    are float32 in every precision.
    """
    layer = _Layer(spec, parameters, statistics, frame_mask, dropout_key, valid_mask)
    math = math or arithmetic(spec)
    x = _convolution(spec, layer.quantized_input("conv", features), layer.kernel("conv.kernel"), math)
    x = layer.dropout(_activation(spec, layer.batchnorm("conv_norm", x)))
    for index in range(spec.lstm_layers):
        prefix = f"lstm.{index}"
        x = _lstm(layer.quantized_input(prefix, x), layer.kernel(f"{prefix}.input_kernel"),
                  layer.kernel(f"{prefix}.recurrent_kernel"), parameters[f"{prefix}.bias"], math,
                  layer.state_quantizer)
        x = layer.dropout(layer.batchnorm(f"lstm_norm.{index}", x))
    x = layer.quantized_input("output", x)
    logits = math.dot("btu,us->bts", x, layer.kernel("output.kernel")) + parameters["output.bias"]
    return jax.nn.log_softmax(logits, axis=-1), layer.updated


class _Layer:
    """BatchNorm and dropout in the mode one forward pass runs in, collecting updated statistics."""

    def __init__(self, spec: ModelSpec, parameters: dict, statistics: dict, frame_mask: jax.Array | None,
                 dropout_key: jax.Array | None, valid_mask: jax.Array | None = None) -> None:
        self.spec, self.parameters, self.statistics = spec, parameters, statistics
        self.mask = frame_mask
        self.valid = frame_mask if frame_mask is not None else valid_mask
        self.keys = iter(jax.random.split(dropout_key, 1 + spec.lstm_layers)) if dropout_key is not None else None
        self.updated = dict(statistics)
        self.quantization = spec.quantization if is_quantized(spec) else None

    def quantized_input(self, layer: str, x: jax.Array) -> jax.Array:
        """int8-emulated: ``layer``'s input fake-quantized with its range (updated in training)."""
        tensor = "lstm.input" if layer.startswith("lstm.") else f"{layer}.input"
        if self.quantization is None or not self.quantization.quantizes(tensor):
            return x
        name = f"{layer}.input_range"
        magnitude = jnp.abs(lax.stop_gradient(x))
        if layer != "conv" and self.valid is not None:
            # Only the caller's own frames: the frames and rows the backend padded on are not
            # the layer's input as the spec means it. (The conv's input is zero there anyway.)
            magnitude = jnp.where(self.valid[..., None], magnitude, 0.0)
        batch_max = jnp.max(magnitude).astype(jnp.float32)
        stored = self.statistics[name]
        if self.mask is not None:
            used = updated_range(self.quantization, stored, batch_max)
            self.updated[name] = used
        else:
            used = jnp.where(stored > 0, stored, batch_max)
        return quantize_activation(self.quantization, x, used)

    def kernel(self, name: str) -> jax.Array:
        """A weight matrix, fake-quantized where int8-emulated quantizes it."""
        weight = self.parameters[name]
        tensor = "lstm." + name.rsplit(".", 1)[-1] if name.startswith("lstm.") else name
        if self.quantization is None or not self.quantization.quantizes(tensor):
            return weight
        return quantize_weight(self.quantization, weight)

    @property
    def state_quantizer(self) -> QuantizationSpec | None:
        """The scheme that quantizes h(t-1) in the recurrence, or None."""
        if self.quantization is None or not self.quantization.quantizes("lstm.recurrent_state"):
            return None
        return self.quantization

    def batchnorm(self, prefix: str, x: jax.Array) -> jax.Array:
        scale, offset, running_mean, running_variance = (self._weight(prefix, part) for part in BATCHNORM_PARTS)
        if self.mask is None:
            mean, variance = running_mean, running_variance
        else:
            mean, variance = _masked_moments(x, self.mask)
            keep = self.spec.batchnorm_momentum
            self.updated[f"{prefix}.mean"] = keep * running_mean + (1 - keep) * lax.stop_gradient(mean)
            self.updated[f"{prefix}.variance"] = keep * running_variance + (1 - keep) * lax.stop_gradient(variance)
        return (x - mean) * lax.rsqrt(variance + self.spec.batchnorm_epsilon) * scale + offset

    def dropout(self, x: jax.Array) -> jax.Array:
        rate = self.spec.dropout
        if self.keys is None or rate == 0.0:
            return x
        threshold = min(round((1.0 - rate) * 2**32), 2**32 - 1)
        keep = counter_hash(x.shape, jax.random.key_data(next(self.keys))) < jnp.uint32(threshold)
        return jnp.where(keep, x / (1.0 - rate), 0.0)

    def _weight(self, prefix: str, part: str) -> jax.Array:
        name = f"{prefix}.{part}"
        return self.statistics[name] if part in STATISTICS else self.parameters[name]


def _masked_moments(x: jax.Array, mask: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Per-channel mean and biased variance over the masked (batch, frame) positions."""
    weights = mask[..., None].astype(x.dtype)
    count = jnp.sum(weights)
    mean = jnp.sum(x * weights, axis=(0, 1)) / count
    variance = jnp.sum(jnp.square(x - mean) * weights, axis=(0, 1)) / count
    return mean, variance


def _convolution(spec: ModelSpec, x: jax.Array, kernel: jax.Array, math: Arithmetic) -> jax.Array:
    """(batch, frames, features) * (width, features, channels), stride and valid padding as the spec
    says -> (batch, output frames, channels), float32, computed as ``CONVOLUTION`` says."""
    if CONVOLUTION == "matmul":
        return math.dot("btk,kc->btc", _windows(spec, x), kernel.reshape(-1, kernel.shape[-1]))
    channels_first = CONVOLUTION == "ncw"
    x, kernel = math.operand(x), math.operand(kernel)
    if channels_first:
        x, kernel = jnp.swapaxes(x, 1, 2), jnp.transpose(kernel, (2, 1, 0))
    y = lax.conv_general_dilated(x, kernel, (spec.conv_stride,), "VALID",
                                 dimension_numbers=("NCW", "OIW", "NCW") if channels_first else ("NWC", "WIO", "NWC"),
                                 precision=math.precision, preferred_element_type=jnp.float32)
    return jnp.swapaxes(y, 1, 2) if channels_first else y


def _windows(spec: ModelSpec, x: jax.Array) -> jax.Array:
    """(batch, frames, features) -> (batch, output frames, width x features): each output frame's
    window of input frames side by side, in the kernel's (width, features) order."""
    frames = spec.output_frames(x.shape[1])
    if frames == 0:  # shorter than one window
        return jnp.zeros((x.shape[0], 0, spec.conv_width * x.shape[2]), x.dtype)
    span = spec.conv_stride * (frames - 1) + 1
    taps = [lax.slice_in_dim(x, tap, tap + span, spec.conv_stride, axis=1) for tap in range(spec.conv_width)]
    return jnp.concatenate(taps, axis=-1)


def _activation(spec: ModelSpec, x: jax.Array) -> jax.Array:
    if spec.conv_activation == "clipped_relu":
        return jnp.clip(x, 0.0, 20.0)
    return jax.nn.relu(x)


def _lstm(x: jax.Array, input_kernel: jax.Array, recurrent_kernel: jax.Array, bias: jax.Array,
          math: Arithmetic, state_quantizer: QuantizationSpec | None = None) -> jax.Array:
    """Unidirectional LSTM from a zero state over (batch, frames, inputs); gates i, f, g, o."""
    inputs = math.dot("bti,ig->tbg", x, input_kernel) + bias  # one matmul for all frames
    return jnp.swapaxes(recurrence(inputs, recurrent_kernel, Recurrent(math, state_quantizer)), 0, 1)
