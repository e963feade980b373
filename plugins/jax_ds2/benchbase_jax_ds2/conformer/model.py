"""The Conformer of ``benchbase.families.conformer.spec`` as pure JAX functions (AlgoPerf's
LibriSpeech model, CTC head), computing what ``benchbase.families.conformer.reference`` computes.

    features, lengths -> [3x3 conv, stride 2, ReLU, frames past the lengths zeroed] x subsampling_layers
      -> flatten (frequency, channel) -> Linear -> + sinusoids -> dropout
      -> [x + FFN/2, x + MHSA, x + Conv, x + FFN/2, LayerNorm] x encoder_layers
      -> LayerNorm -> Linear -> log-softmax

Weights are flat dicts under the neutral names (``weight_layout``), whose Keras layouts are JAX's
own: ``x @ kernel``, HWIO convolution kernels, and the depthwise (width, channels) kernel is WIO
with one input channel per group. Every layer that mixes frames sees the padded frames as zeros
(the convolutions) or not at all (the attention's keys, BatchNorm's statistics), so an utterance's
valid outputs do not depend on the batch it is padded in, the backend's bucket padding included.
Outputs at padded frames are garbage that CTC and decoding never read (padded queries still
attend, as in AlgoPerf and the reference).

Matmuls and convolutions take their operands in the precision's type (``Arithmetic``), with
float32 results; the residual stream, the norms, the softmax and the log-softmax are float32.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from benchbase.families.conformer.reference import QUERY_SCALE_AT_ZERO, positions
from benchbase.families.conformer.spec import ConformerModelSpec
from benchbase.families.conformer.weight_layout import block_names, weight_layout
from benchbase_jax_ds2.arithmetic import Arithmetic
from benchbase_jax_ds2.conformer.normalization import batch_norm, layer_norm
from benchbase_jax_ds2.dropout import counter_hash

__all__ = ["depthwise_convolution", "forward", "initial_weights"]

DEPTHWISE_AS_SHIFTS = True
"""The depthwise convolution as a sum of shifted products (``depthwise_convolution``); False: XLA's
grouped convolution. On a CPU, XLA's grouped convolution and its gradients are among the costliest
operations of conformer-mini's step, and the products took its step from 1610 to 1326 ms (1.21x,
one thread on a loaded 2-core AVX-512 machine, the two alternating on the same batches); the
switch keeps the convolution for a GPU measurement. Read when the step is traced."""


def initial_weights(spec: ConformerModelSpec, feature_dimension: int, seed: int) -> dict[str, np.ndarray]:
    """Every weight of the layout as the spec's ``init`` pins it: kernels Xavier-uniform with the
    layout's fans, running variances one, everything else zero.

    Drawn with NumPy, as DS2's: the same on every platform, and nothing to compile on the run clock.
    """
    rng = np.random.default_rng(seed)
    weights = {}
    for name, shape in weight_layout(spec, feature_dimension).items():
        part = name.rsplit(".", 1)[-1]
        if part == "kernel":
            fan_in, fan_out = _fans(name, shape)
            limit = np.sqrt(6.0 / (fan_in + fan_out))
            weights[name] = rng.uniform(-limit, limit, shape).astype(np.float32)
        else:
            weights[name] = (np.ones if part == "variance" else np.zeros)(shape, np.float32)
    return weights


def _fans(name: str, shape: tuple[int, ...]) -> tuple[int, int]:
    """A subsampling convolution's fans are its 3x3 field times its channels; the depthwise one's
    (each channel its own one-in, one-out filter) its width; a dense kernel's its (in, out)."""
    if len(shape) == 4:
        field = shape[0] * shape[1]
        return field * shape[2], field * shape[3]
    if name.endswith("depthwise.kernel"):
        return shape[0], shape[0]
    return shape[0], shape[1]


def forward(spec: ConformerModelSpec, parameters: dict, statistics: dict, features: jax.Array,
            feature_lengths: jax.Array, math: Arithmetic, *, training: bool = False,
            dropout_key: jax.Array | None = None) -> tuple[jax.Array, dict]:
    """(batch, frames, F), lengths (batch,) -> (log-probs (batch, output frames, symbols) float32,
    the statistics after this pass).

    ``training``: BatchNorm normalizes with the valid frames' statistics and returns the moved
    running ones; dropout is on where ``dropout_key`` is given too. A row of length 0 (one the
    backend padded on) is all padding: its outputs are garbage, finite, and no valid frame reads them.
    """
    net = _Network(spec, parameters, statistics, math, training, dropout_key)
    x, lengths = net.subsample(features, feature_lengths)
    valid = (jnp.arange(x.shape[1])[None, :] < lengths[:, None])[..., None]  # (batch, frames, 1)
    for block in block_names(spec):
        x = net.block(block, x, valid, lengths)
    x = layer_norm(x, parameters, "final_norm", spec.layernorm_epsilon)
    return jax.nn.log_softmax(net.dense("output", x), axis=-1), net.updated


class _Network:
    """The layers of one forward pass, in the mode it runs in, collecting the updated statistics."""

    def __init__(self, spec: ConformerModelSpec, parameters: dict, statistics: dict, math: Arithmetic,
                 training: bool, dropout_key: jax.Array | None) -> None:
        self.spec, self.parameters, self.statistics, self.math = spec, parameters, statistics, math
        self.updated: dict = dict(statistics)
        self.training = training
        # One key per dropout site: the subsampled input, and each block's four residual branches.
        sites = 1 + 4 * spec.encoder_layers
        use_dropout = training and dropout_key is not None and spec.dropout > 0.0
        self.keys = iter(jax.random.split(dropout_key, sites)) if use_dropout else None

    def dense(self, prefix: str, x: jax.Array) -> jax.Array:
        kernel = self.parameters[f"{prefix}.kernel"]
        return self.math.dot("btd,de->bte", x, kernel) + self.parameters[f"{prefix}.bias"]

    def dropout(self, x: jax.Array) -> jax.Array:
        """Inverted dropout with the backend's counter-hash masks (``benchbase_jax_ds2.dropout``)."""
        if self.keys is None:
            return x
        rate = self.spec.dropout
        threshold = min(round((1.0 - rate) * 2**32), 2**32 - 1)
        keep = counter_hash(x.shape, jax.random.key_data(next(self.keys))) < jnp.uint32(threshold)
        return jnp.where(keep, x / (1.0 - rate), 0.0)

    def subsample(self, features: jax.Array, lengths: jax.Array) -> tuple[jax.Array, jax.Array]:
        """(batch, T, F), lengths -> (batch, T', d) after the positions and dropout, and the lengths T'."""
        spec, d = self.spec, self.spec.encoder_dim
        # Zeros past each utterance: the spec's "zeros past the end" whatever the caller padded with.
        frames = jnp.arange(features.shape[1])
        x = jnp.where((frames[None, :] < lengths[:, None])[..., None], features, 0.0)[..., None]  # NHWC, C = 1
        for layer in range(spec.subsampling_layers):
            prefix = f"subsampling.{layer}"
            # Two zero rows after the end of time and frequency, then a valid stride-2 convolution:
            # output row i reads rows 2i .. 2i+2, ceil(n / 2) of them, whatever the padded length.
            x = lax.conv_general_dilated(self.math.operand(x), self.math.operand(self.parameters[f"{prefix}.kernel"]),
                                         (2, 2), ((0, 2), (0, 2)), dimension_numbers=("NHWC", "HWIO", "NHWC"),
                                         precision=self.math.precision, preferred_element_type=jnp.float32)
            lengths = (lengths + 1) // 2
            valid = jnp.arange(x.shape[1])[None, :] < lengths[:, None]
            x = jnp.where(valid[:, :, None, None], jax.nn.relu(x + self.parameters[f"{prefix}.bias"]), 0.0)
        batch, time, bins, channels = x.shape
        x = x.reshape(batch, time, bins * channels)  # NHWC flattens to row f * C + c, as the layout has it
        # The positions in float64, rounded once to float32 (a constant of the compiled shape).
        sinusoids = positions(time, d, spec.max_timescale).astype(np.float32)
        return self.dropout(self.dense("subsampling.projection", x) + sinusoids), lengths

    def block(self, block: str, x: jax.Array, valid: jax.Array, lengths: jax.Array) -> jax.Array:
        x = x + 0.5 * self.feed_forward(f"{block}.ff1", x, valid)
        x = x + self.attention(f"{block}.attention", x, lengths)
        x = x + self.convolution(f"{block}.conv", x, valid)
        x = x + 0.5 * self.feed_forward(f"{block}.ff2", x, valid)
        return layer_norm(x, self.parameters, f"{block}.norm", self.spec.layernorm_epsilon)

    def feed_forward(self, prefix: str, x: jax.Array, valid: jax.Array) -> jax.Array:
        """LayerNorm -> Linear(d, h) -> swish -> mask -> Linear(h, d) -> mask -> dropout."""
        x = layer_norm(x, self.parameters, f"{prefix}.norm", self.spec.layernorm_epsilon)
        hidden = jnp.where(valid, jax.nn.silu(self.dense(f"{prefix}.inner", x)), 0.0)
        return self.dropout(jnp.where(valid, self.dense(f"{prefix}.outer", hidden), 0.0))

    def attention(self, prefix: str, x: jax.Array, lengths: jax.Array) -> jax.Array:
        """LayerNorm -> queries, keys, values -> the learned query scale -> attention over each
        utterance's own keys -> Linear -> dropout.

        jax.nn.dot_product_attention's XLA implementation is the reference's computation: the
        logits of padded keys are replaced by a large finite negative, whose exp is exactly 0
        next to any valid key's, and softmax shifts by the row's largest (a valid key's), in
        float32. Its own scale is 1: the queries are scaled first, in the reference's order.
        """
        batch, frames, d = x.shape
        heads, width = self.spec.attention_heads, self.spec.head_dim
        qkv = self.dense(f"{prefix}.qkv", layer_norm(x, self.parameters, f"{prefix}.norm", self.spec.layernorm_epsilon))
        # Columns: queries, keys, values, each d wide, head j the j-th block of d / heads of them.
        q, k, v = (qkv[..., i * d : (i + 1) * d].reshape(batch, frames, heads, width) for i in range(3))
        scale = QUERY_SCALE_AT_ZERO * jax.nn.softplus(self.parameters[f"{prefix}.query_scale"])
        q = q * scale / float(np.sqrt(width))
        operand = self.math.operand
        # A row of length 0 has no key: its softmax is uniform over the large negatives, finite.
        attended = jax.nn.dot_product_attention(operand(q), operand(k), operand(v), scale=1.0,
                                                key_value_seq_lengths=lengths, implementation="xla")
        return self.dropout(self.dense(f"{prefix}.output", attended.reshape(batch, frames, d).astype(jnp.float32)))

    def convolution(self, prefix: str, x: jax.Array, valid: jax.Array) -> jax.Array:
        """LayerNorm -> GLU -> mask -> depthwise conv -> BatchNorm over the valid frames -> swish
        -> Linear -> dropout."""
        spec, d = self.spec, self.spec.encoder_dim
        gated = self.dense(f"{prefix}.glu", layer_norm(x, self.parameters, f"{prefix}.norm", spec.layernorm_epsilon))
        # Zeroed before the depthwise convolution: a valid frame near the end reads zeros past it.
        x = jnp.where(valid, gated[..., :d] * jax.nn.sigmoid(gated[..., d:]), 0.0)
        x = depthwise_convolution(x, self.parameters[f"{prefix}.depthwise.kernel"], self.math)
        x = batch_norm(x, valid, spec, self.parameters, self.statistics, f"{prefix}.batchnorm",
                       self.updated if self.training else None)
        return self.dropout(self.dense(f"{prefix}.output", jax.nn.silu(x)))


def depthwise_convolution(x: jax.Array, kernel: jax.Array, math: Arithmetic) -> jax.Array:
    """(batch, frames, channels) * (width, channels), "same" padding with zeros, float32 results.

    As shifted products (``DEPTHWISE_AS_SHIFTS``): products of the operands in the precision's
    type are exact in float32 and summed in float32 in the kernel's order, as a convolution
    with float32 accumulation does."""
    width, channels = kernel.shape
    half = (width - 1) // 2
    if not DEPTHWISE_AS_SHIFTS:
        return lax.conv_general_dilated(math.operand(x), math.operand(kernel[:, None, :]), (1,), ((half, half),),
                                        dimension_numbers=("NWC", "WIO", "NWC"), feature_group_count=channels,
                                        precision=math.precision, preferred_element_type=jnp.float32)
    padded = jnp.pad(math.operand(x), ((0, 0), (half, width - 1 - half), (0, 0))).astype(jnp.float32)
    taps = math.operand(kernel).astype(jnp.float32)
    frames = x.shape[1]
    out = padded[:, :frames, :] * taps[0]
    for tap in range(1, width):
        out = out + padded[:, tap : tap + frames, :] * taps[tap]
    return out
