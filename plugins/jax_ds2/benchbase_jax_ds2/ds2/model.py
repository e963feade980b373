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

import functools
import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from benchbase.families.ds2.quantization import is_quantized
from benchbase.families.ds2.weight_layout import BATCHNORM_PARTS, weight_layout
from benchbase.specs import ModelSpec
from benchbase.specs.workload import QuantizationSpec
from benchbase_jax_ds2.cpu_bf16 import native_bf16_dots
from benchbase_jax_ds2.quantization import quantize_activation, quantize_state, quantize_weight, updated_range

__all__ = ["STATISTICS", "counter_hash", "forward", "initial_weights", "split_weights"]

STATISTICS = ("mean", "variance", "input_range")
"""Weights that are running statistics, not trainable parameters: BatchNorm's, and int8-emulated's
activation ranges."""

HIGHEST = lax.Precision.HIGHEST  # ModelSpec.precision "fp32": no TF32 or bf16 passes on GPUs


class Arithmetic(NamedTuple):
    """How the model's matmuls and the convolution compute in the spec's precision.

    Operands are cast to ``operands`` and accumulated in float32 (``preferred_element_type``),
    so bf16 and fp16 run the tensor cores' formats with float32 master weights, float32
    accumulators, and float32 elementwise work (gates, cell state, BatchNorm, log-softmax),
    as cuDNN's half-precision RNNs do; tf32 keeps float32 operands at XLA's default
    (TF32 tensor-core) precision; fp32 and int8-emulated compute in true float32.

    On XLA's CPU, bf16 multiplies bfloat16 operands natively (YNNPACK's bf16 dot, float32 result)
    where ``benchbase_jax_ds2.cpu_bf16.native_bf16_dots`` finds that this jaxlib and CPU can, with
    ``ordered`` on: each dot is computed with its result's indices in operand order (the canonical
    (M, K) x (K, N) form that path takes) and transposed afterwards, behind an optimization
    barrier, which keeps XLA's simplifier from folding the transpose back into the dot as swapped
    operands, a form XLA's own dot kernel cannot run in bf16 x bf16 -> f32.

    ``rounded``: elsewhere on a CPU (fp16, or no native bf16 dot) the operands are rounded to the
    half type and multiplied in float32. That is the same number: the product of two bf16 (fp16)
    values is exact in float32, and the sum is float32 either way.
    """

    operands: Any
    precision: lax.Precision
    rounded: bool = False
    ordered: bool = False

    def operand(self, x: jax.Array) -> jax.Array:
        """``x`` as a matmul operand: in the half type, or rounded to it (``rounded``)."""
        low = x.astype(self.operands)
        return low.astype(jnp.float32) if self.rounded else low

    def dot(self, subscripts: str, x: jax.Array, y: jax.Array) -> jax.Array:
        x, y = self.operand(x), self.operand(y)
        inputs, result = subscripts.split("->")
        left, right = inputs.split(",")
        order = "".join([index for index in left if index not in right] + [i for i in right if i not in left])
        if not self.ordered or order == result:
            return jnp.einsum(subscripts, x, y, precision=self.precision, preferred_element_type=jnp.float32)
        product = jnp.einsum(f"{inputs}->{order}", x, y, precision=self.precision, preferred_element_type=jnp.float32)
        return jnp.einsum(f"{order}->{result}", lax.optimization_barrier(product))


def arithmetic(spec: ModelSpec, platform: str = "cpu") -> Arithmetic:
    """The arithmetic of ``spec.precision`` on a device of ``platform`` ("cpu", "gpu")."""
    operands = {"bf16": jnp.bfloat16, "fp16": jnp.float16}.get(spec.precision, jnp.float32)
    if operands is not jnp.float32 and platform == "cpu":
        if operands is jnp.bfloat16 and native_bf16_dots():
            return Arithmetic(operands, HIGHEST, ordered=True)
        return Arithmetic(operands, HIGHEST, rounded=True)
    return Arithmetic(operands, HIGHEST if spec.precision in ("fp32", "int8-emulated") else lax.Precision.DEFAULT)


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


def split_weights(weights: dict) -> tuple[dict, dict]:
    """(trainable parameters, BatchNorm running statistics)."""
    parameters = {name: value for name, value in weights.items() if name.rsplit(".", 1)[-1] not in STATISTICS}
    statistics = {name: value for name, value in weights.items() if name not in parameters}
    return parameters, statistics


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
    x = layer.quantized_input("conv", features)
    x = lax.conv_general_dilated(math.operand(x), math.operand(layer.kernel("conv.kernel")),
                                 (spec.conv_stride,), "VALID", dimension_numbers=("NWC", "WIO", "NWC"),
                                 precision=math.precision, preferred_element_type=jnp.float32)
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


def counter_hash(shape: tuple[int, ...], key: jax.Array) -> jax.Array:
    """32 random bits per element: each element's index through two rounds of MurmurHash3's
    finalizer (a bijection), keyed by two words of ``key``.

    Dropout's masks need independence, not cryptographic strength. JAX's generators cost
    far more on a CPU: RngBitGenerator about 25 ns per element (50 ms of a 400 ms ds2-mini
    step for the three masks), threefry a few ns but most of a second of compilation per mask
    and shape.
    This is a handful of integer operations that XLA fuses into the dropout itself.
    """
    index = lax.iota(jnp.uint32, math.prod(shape)).reshape(shape)
    return _fmix32(_fmix32(index ^ key[0]) ^ key[1])


def _fmix32(h: jax.Array) -> jax.Array:
    h = (h ^ (h >> 16)) * jnp.uint32(0x85EBCA6B)
    h = (h ^ (h >> 13)) * jnp.uint32(0xC2B2AE35)
    return h ^ (h >> 16)


def _masked_moments(x: jax.Array, mask: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Per-channel mean and biased variance over the masked (batch, frame) positions."""
    weights = mask[..., None].astype(x.dtype)
    count = jnp.sum(weights)
    mean = jnp.sum(x * weights, axis=(0, 1)) / count
    variance = jnp.sum(jnp.square(x - mean) * weights, axis=(0, 1)) / count
    return mean, variance


def _activation(spec: ModelSpec, x: jax.Array) -> jax.Array:
    if spec.conv_activation == "clipped_relu":
        return jnp.clip(x, 0.0, 20.0)
    return jax.nn.relu(x)


def _lstm(x: jax.Array, input_kernel: jax.Array, recurrent_kernel: jax.Array, bias: jax.Array,
          math: Arithmetic, state_quantizer: QuantizationSpec | None = None) -> jax.Array:
    """Unidirectional LSTM from a zero state over (batch, frames, inputs); gates i, f, g, o."""
    inputs = math.dot("bti,ig->tbg", x, input_kernel) + bias  # one matmul for all frames
    return jnp.swapaxes(recurrence(inputs, recurrent_kernel, _Recurrent(math, state_quantizer)), 0, 1)


class _Recurrent(NamedTuple):
    """The recurrence's static settings: its arithmetic, and int8-emulated's quantization of h(t-1)."""

    math: Arithmetic
    state_quantizer: QuantizationSpec | None

    def state(self, h: jax.Array) -> jax.Array:
        return h if self.state_quantizer is None else quantize_state(self.state_quantizer, h)


FP32_RECURRENCE = _Recurrent(Arithmetic(jnp.float32, HIGHEST), None)


def recurrence(inputs: jax.Array, recurrent_kernel: jax.Array, settings: _Recurrent = FP32_RECURRENCE) -> jax.Array:
    """The LSTM's loop (see ``_recurrence``), in fp32 unless ``settings`` say otherwise."""
    return _recurrence(inputs, recurrent_kernel, settings)


@functools.partial(jax.custom_vjp, nondiff_argnums=(2,))
def _recurrence(inputs: jax.Array, recurrent_kernel: jax.Array, settings: _Recurrent) -> jax.Array:
    """The LSTM's loop: (frames, batch, 4 units) input projections -> (frames, batch, units) outputs.

    Its gradient is written by hand, as cuDNN's and PyTorch's are: the loop back in time only
    carries the hidden and cell gradients, and the recurrent kernel's gradient is one matmul
    over all frames afterwards. Differentiating the scan instead accumulates a small matmul per
    frame inside the loop and keeps several (frames, batch, 4 units) residuals, which on a CPU
    costs about as much as the rest of the step.

    int8-emulated quantizes h(t-1) before the recurrent matmul (``settings.state_quantizer``);
    its gradient is straight-through, so the backward pass is the same with the quantized h.
    """
    return _recurrence_forward(inputs, recurrent_kernel, settings)[0]


def _recurrence_forward(inputs: jax.Array, recurrent_kernel: jax.Array, settings: _Recurrent):
    def step(carry, z):
        h, c = carry
        z = z + settings.math.dot("bu,ug->bg", settings.state(h), recurrent_kernel)
        i, f, g, o = jnp.split(z, 4, axis=-1)
        i, f, g, o = jax.nn.sigmoid(i), jax.nn.sigmoid(f), jnp.tanh(g), jax.nn.sigmoid(o)
        c = f * c + i * g
        h = o * jnp.tanh(c)
        return (h, c), (h, c, jnp.concatenate([i, f, g, o], axis=-1))

    zeros = jnp.zeros(inputs.shape[1:2] + recurrent_kernel.shape[:1], inputs.dtype)
    _, (hidden, cells, gates) = lax.scan(step, (zeros, zeros), inputs)
    return hidden, (hidden, cells, gates, recurrent_kernel)


def _recurrence_backward_rule(settings: _Recurrent, residuals, hidden_gradient: jax.Array):
    return _recurrence_backward(residuals, hidden_gradient, settings)


def _recurrence_forward_rule(inputs: jax.Array, recurrent_kernel: jax.Array, settings: _Recurrent):
    return _recurrence_forward(inputs, recurrent_kernel, settings)


def _recurrence_backward(residuals, hidden_gradient: jax.Array,
                         settings: _Recurrent) -> tuple[jax.Array, jax.Array]:
    hidden, cells, gates, recurrent_kernel = residuals
    previous_cells = jnp.concatenate([jnp.zeros_like(cells[:1]), cells[:-1]])

    def step(carry, frame):
        dh_next, dc_next = carry
        dh, c, c_previous, gate = frame
        i, f, g, o = jnp.split(gate, 4, axis=-1)
        dh = dh + dh_next
        tanh_c = jnp.tanh(c)
        dc = dh * o * (1 - tanh_c**2) + dc_next
        dz = jnp.concatenate([dc * g * i * (1 - i), dc * c_previous * f * (1 - f), dc * i * (1 - g**2),
                              dh * tanh_c * o * (1 - o)], axis=-1)
        return (settings.math.dot("bg,ug->bu", dz, recurrent_kernel), dc * f), dz

    zeros = jnp.zeros_like(hidden[0])
    _, input_gradient = lax.scan(step, (zeros, zeros), (hidden_gradient, cells, previous_cells, gates), reverse=True)
    previous_hidden = settings.state(jnp.concatenate([jnp.zeros_like(hidden[:1]), hidden[:-1]]))
    kernel_gradient = settings.math.dot("tbu,tbg->ug", previous_hidden, input_gradient)
    return input_gradient, kernel_gradient


_recurrence.defvjp(_recurrence_forward_rule, _recurrence_backward_rule)
