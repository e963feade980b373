"""benchbase's float64 NumPy reference of the Conformer family: the forward pass with every mask.

Computed from weights in the neutral layout (``benchbase.families.conformer.weight_layout``)
through ``benchbase.numerics.rounded.RoundedArithmetic``, so that the error model can move every
accumulation and vector function by its float32 rounding and bound each output. What the spec
pins (``benchbase.families.conformer.spec``), with the masks of AlgoPerf's model:

- each subsampling convolution's output is zeroed on the frames past the utterance's output
  length for that layer (ceil(n / 2) per layer), so that no padding reaches a valid frame;
- each feed-forward module's hidden and output, and the convolution module's input to its
  depthwise convolution, are zeroed on padded frames;
- self-attention gives padded keys no weight (queries at padded frames still attend: their
  outputs, as every padded frame's, are never read by a valid frame nor by the loss);
- BatchNorm's batch statistics are over the valid frames only (biased variance), and its output
  is zeroed on padded frames.

Dropout is never applied (the conformance kit trains with dropout 0). In training mode BatchNorm
normalizes with the batch's statistics and moves its running statistics toward them with the
spec's momentum (the share kept); in inference it normalizes with the running statistics.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from benchbase.families.conformer.spec import ConformerModelSpec
from benchbase.families.conformer.weight_layout import block_names, weight_layout
from benchbase.numerics.rounded import RoundedArithmetic, log_softmax
from benchbase.numerics.tolerances import RoundingModel

__all__ = ["QUERY_SCALE_AT_ZERO", "positions", "random_weights", "reference_forward"]

QUERY_SCALE_AT_ZERO = 1.442695041
"""1 / softplus(0) = 1 / ln 2: the learned query scale starts at exactly 1 (AlgoPerf's QueryScaler)."""


def reference_forward(weights: Mapping[str, np.ndarray], model: ConformerModelSpec, features: np.ndarray,
                      feature_lengths: np.ndarray, training: bool,
                      rounding: RoundingModel | None = None) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Log-probabilities (batch, output frames of the padded batch, symbols), float64, and each
    BatchNorm's running statistics after this pass ("blocks.0.conv.batchnorm.mean", ...)."""
    w = {name: np.asarray(value, dtype=np.float64) for name, value in weights.items()}
    _check(w, model, features)
    rounded = RoundedArithmetic(rounding)
    lengths = np.asarray(feature_lengths, dtype=np.int64)
    x = np.asarray(features, dtype=np.float64)[..., None]  # (batch, time, frequency, channels)
    for layer in range(model.subsampling_layers):
        x, lengths = _subsample(x, w, f"subsampling.{layer}", lengths, rounded)
    batch, frames = x.shape[:2]
    x = rounded.dot(x.reshape(batch, frames, -1), w["subsampling.projection.kernel"], w["subsampling.projection.bias"])
    x = rounded.function(x + positions(frames, model.encoder_dim, model.max_timescale))
    mask = (np.arange(frames)[None, :] < lengths[:, None]).astype(np.float64)[..., None]  # (batch, frames, 1)
    running: dict[str, np.ndarray] = {}
    for block in block_names(model):
        x = _block(x, w, block, mask, model, training, running, rounded)
    x = _layer_norm(x, w, "final_norm", model.layernorm_epsilon, rounded)
    return log_softmax(rounded.dot(x, w["output.kernel"], w["output.bias"]), rounded), running


def positions(frames: int, dimension: int, max_timescale: float) -> np.ndarray:
    """(frames, dimension) sinusoidal positions: sin(p w_k) in the first half, cos(p w_k) in the second."""
    half = dimension // 2
    timescales = np.exp(np.arange(half) * -(np.log(max_timescale) / max(half - 1, 1)))
    scaled = np.arange(frames)[:, None] * timescales[None, :]
    return np.concatenate([np.sin(scaled), np.cos(scaled)], axis=1)


def _subsample(x: np.ndarray, w: dict[str, np.ndarray], prefix: str, lengths: np.ndarray,
               rounded: RoundedArithmetic) -> tuple[np.ndarray, np.ndarray]:
    """A 3x3 convolution of stride 2 reading rows 2i .. 2i + 2 of time and frequency (zeros past
    the end), + bias, ReLU, the frames past the layer's output lengths zeroed."""
    batch, frames, bins, channels = x.shape
    out_frames, out_bins = (frames + 1) // 2, (bins + 1) // 2
    padded = np.zeros((batch, frames + 2, bins + 2, channels))
    padded[:, :frames, :bins] = x
    patches = np.stack([padded[:, dt : dt + 2 * out_frames : 2, df : df + 2 * out_bins : 2]
                        for dt in range(3) for df in range(3)], axis=3)  # (batch, T', F', 9, channels)
    kernel = w[f"{prefix}.kernel"]
    out = rounded.dot(patches.reshape(batch, out_frames, out_bins, 9 * channels),
                      kernel.reshape(9 * channels, kernel.shape[-1]), w[f"{prefix}.bias"])
    lengths = (lengths + 1) // 2
    valid = np.arange(out_frames)[None, :] < lengths[:, None]
    return np.maximum(out, 0.0) * valid[:, :, None, None], lengths


def _block(x, w, block: str, mask, model: ConformerModelSpec, training: bool, running, rounded) -> np.ndarray:
    x = rounded.function(x + 0.5 * _feed_forward(x, w, f"{block}.ff1", mask, model, rounded), 2)
    x = rounded.function(x + _attention(x, w, f"{block}.attention", mask, model, rounded))
    x = rounded.function(x + _convolution(x, w, f"{block}.conv", mask, model, training, running, rounded))
    x = rounded.function(x + 0.5 * _feed_forward(x, w, f"{block}.ff2", mask, model, rounded), 2)
    return _layer_norm(x, w, f"{block}.norm", model.layernorm_epsilon, rounded)


def _feed_forward(x, w, prefix: str, mask, model: ConformerModelSpec, rounded) -> np.ndarray:
    x = _layer_norm(x, w, f"{prefix}.norm", model.layernorm_epsilon, rounded)
    hidden = _swish(rounded.dot(x, w[f"{prefix}.inner.kernel"], w[f"{prefix}.inner.bias"]), rounded) * mask
    return rounded.dot(hidden, w[f"{prefix}.outer.kernel"], w[f"{prefix}.outer.bias"]) * mask


def _attention(x, w, prefix: str, mask, model: ConformerModelSpec, rounded) -> np.ndarray:
    batch, frames, d = x.shape
    heads, width = model.attention_heads, model.head_dim
    x = _layer_norm(x, w, f"{prefix}.norm", model.layernorm_epsilon, rounded)
    qkv = rounded.dot(x, w[f"{prefix}.qkv.kernel"], w[f"{prefix}.qkv.bias"])
    q, k, v = (qkv[..., i * d : (i + 1) * d].reshape(batch, frames, heads, width).transpose(0, 2, 1, 3)
               for i in range(3))  # (batch, heads, frames, width)
    scale = rounded.function(QUERY_SCALE_AT_ZERO * np.logaddexp(0.0, w[f"{prefix}.query_scale"]), 2)
    q = rounded.function(q * scale / np.sqrt(width), 2)
    scores = rounded.matmul(q, k.transpose(0, 1, 3, 2))  # (batch, heads, queries, keys)
    keys = mask[:, None, None, :, 0] > 0  # padded keys get no weight; no value is ever -inf
    largest = np.where(keys, scores, -np.inf).max(axis=-1, keepdims=True)
    shifted = rounded.function(np.where(keys, scores - largest, 0.0))
    weights = np.where(keys, rounded.function(np.exp(shifted)), 0.0)
    weights = rounded.function(weights / rounded.sum(weights, axis=-1)[..., None])
    attended = rounded.matmul(weights, v).transpose(0, 2, 1, 3).reshape(batch, frames, d)
    return rounded.dot(attended, w[f"{prefix}.output.kernel"], w[f"{prefix}.output.bias"])


def _convolution(x, w, prefix: str, mask, model: ConformerModelSpec, training: bool, running, rounded) -> np.ndarray:
    d, width = model.encoder_dim, model.conv_kernel_size
    x = _layer_norm(x, w, f"{prefix}.norm", model.layernorm_epsilon, rounded)
    gated = rounded.dot(x, w[f"{prefix}.glu.kernel"], w[f"{prefix}.glu.bias"])
    x = rounded.function(gated[..., :d] * _sigmoid(gated[..., d:]), 2) * mask
    half, frames = (width - 1) // 2, x.shape[1]
    padded = np.pad(x, ((0, 0), (half, half), (0, 0)))
    kernel = w[f"{prefix}.depthwise.kernel"]
    x = rounded.sum(np.stack([padded[:, j : j + frames] * kernel[j] for j in range(width)]), axis=0)
    x = _batch_norm(x, w, f"{prefix}.batchnorm", mask, model, training, running, rounded)
    return rounded.dot(_swish(x, rounded), w[f"{prefix}.output.kernel"], w[f"{prefix}.output.bias"])


def _batch_norm(x, w, prefix: str, mask, model: ConformerModelSpec, training: bool, running, rounded) -> np.ndarray:
    """Per channel over the valid frames of the batch (biased variance); padded frames out zero."""
    mean, variance = w[f"{prefix}.mean"], w[f"{prefix}.variance"]
    if training:
        count = mask.sum()
        flat, flat_mask = x.reshape(-1, x.shape[-1]), mask.reshape(-1, 1)
        batch_mean = rounded.sum(flat * flat_mask, axis=0) / count
        centered = rounded.function(flat - batch_mean) * flat_mask
        batch_variance = rounded.sum(rounded.function(centered * centered), axis=0) / count
        momentum = model.batchnorm_momentum
        running[f"{prefix}.mean"] = rounded.function(momentum * mean + (1.0 - momentum) * batch_mean, 3)
        running[f"{prefix}.variance"] = rounded.function(momentum * variance + (1.0 - momentum) * batch_variance, 3)
        mean, variance = batch_mean, batch_variance
    else:
        running[f"{prefix}.mean"], running[f"{prefix}.variance"] = mean.copy(), variance.copy()
    normalized = rounded.function((x - mean) / np.sqrt(variance + model.batchnorm_epsilon), 3)
    return rounded.function(normalized * (1.0 + w[f"{prefix}.scale"]) + w[f"{prefix}.offset"], 2) * mask


def _layer_norm(x, w, prefix: str, epsilon: float, rounded) -> np.ndarray:
    width = x.shape[-1]
    mean = rounded.sum(np.moveaxis(x, -1, 0), axis=0) / width
    centered = rounded.function(x - mean[..., None])
    variance = rounded.sum(np.moveaxis(rounded.function(centered * centered), -1, 0), axis=0) / width
    normalized = rounded.function(centered / np.sqrt(variance + epsilon)[..., None], 3)
    return rounded.function(normalized * (1.0 + w[f"{prefix}.scale"]) + w[f"{prefix}.bias"], 2)


def _swish(x: np.ndarray, rounded: RoundedArithmetic) -> np.ndarray:
    return rounded.function(x * _sigmoid(x), 2)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * (np.tanh(0.5 * x) + 1.0)  # the tanh form never overflows


def random_weights(model: ConformerModelSpec, feature_dimension: int, seed: int) -> dict[str, np.ndarray]:
    """Random float32 weights in the layout, for parity checks: kernels Xavier-uniform, and every
    vector random too (LayerNorm and BatchNorm scales ~ U(-0.2, 0.2) around the 1 they add to,
    offsets, biases and running means ~ N(0, 0.1), variances ~ U(0.5, 1.5), query scales
    ~ N(0, 0.3)): weights a backend only initializes could hide a part it ignores."""
    rng = np.random.default_rng(seed)
    weights = {}
    for name, shape in weight_layout(model, feature_dimension).items():
        part = name.rsplit(".", 1)[-1]
        if part == "kernel":
            fan_in, fan_out = _fans(name, shape)
            limit = np.sqrt(6.0 / (fan_in + fan_out))
            weights[name] = rng.uniform(-limit, limit, shape)
        elif part == "scale":
            weights[name] = rng.uniform(-0.2, 0.2, shape)
        elif part == "variance":
            weights[name] = rng.uniform(0.5, 1.5, shape)
        elif part == "query_scale":
            weights[name] = rng.normal(0.0, 0.3, shape)
        else:
            weights[name] = rng.normal(0.0, 0.1, shape)
    return {name: array.astype(np.float32) for name, array in weights.items()}


def _fans(name: str, shape: tuple[int, ...]) -> tuple[int, int]:
    """Xavier's fans: a convolution's receptive field times its channels; the depthwise
    convolution's (one channel in, one out) its width."""
    if name.startswith("subsampling.") and len(shape) == 4:
        field = shape[0] * shape[1]
        return field * shape[2], field * shape[3]
    if name.endswith("depthwise.kernel"):
        return shape[0], shape[0]
    return shape[0], shape[1]


def _check(weights: Mapping[str, np.ndarray], model: ConformerModelSpec, features: np.ndarray) -> None:
    expected = weight_layout(model, np.shape(features)[-1])
    wrong = sorted(name for name, shape in expected.items() if np.shape(weights.get(name)) != shape)
    unknown = sorted(set(weights) - set(expected))
    if wrong or unknown:
        raise ValueError(f"weights do not fit the conformer layout: {wrong[:4] or unknown[:4]}")
