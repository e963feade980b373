"""benchbase's framework-neutral weight layout for the Conformer family.

Backends export and import their weights in this layout, so that the NumPy reference
(``benchbase.families.conformer.reference``) runs on the very same weights. Every array is
float32 and every dense layer is Keras's ``x @ kernel + bias``; each backend transposes to its own.
d = encoder_dim, h = d * feed_forward_expansion, k = conv_kernel_size, C = d channels:

    subsampling.{i}.kernel           (3, 3, 1 or C, C)  (time, frequency, in, out); i < subsampling_layers
    subsampling.{i}.bias             (C,)
    subsampling.projection.kernel    (F' * C, d)        F' = subsampled frequency rows; the input row is
                                                        f * C + c (frequency-major, channel fastest)
    subsampling.projection.bias      (d,)
    blocks.{b}.ff1.norm.scale|bias   (d,)               LayerNorm: x_hat * (1 + scale) + bias
    blocks.{b}.ff1.inner.kernel      (d, h)   .bias (h,)
    blocks.{b}.ff1.outer.kernel      (h, d)   .bias (d,)
    blocks.{b}.attention.norm.scale|bias  (d,)
    blocks.{b}.attention.qkv.kernel  (d, 3d)  .bias (3d,)   columns: queries, keys, values, each d wide,
                                                        head j's the j-th block of d / heads columns
    blocks.{b}.attention.query_scale (d / heads,)        queries times 1.442695041 * softplus(scale),
                                                        then the usual 1 / sqrt(d / heads)
    blocks.{b}.attention.output.kernel (d, d) .bias (d,)
    blocks.{b}.conv.norm.scale|bias  (d,)
    blocks.{b}.conv.glu.kernel       (d, 2d)  .bias (2d,)   GLU: the first d columns times sigmoid(the last d)
    blocks.{b}.conv.depthwise.kernel (k, d)             y[t, c] = sum_j x[t + j - (k - 1) / 2, c] kernel[j, c]
    blocks.{b}.conv.batchnorm.scale|offset|mean|variance  (d,)   normalized * (1 + scale) + offset
    blocks.{b}.conv.output.kernel    (d, d)   .bias (d,)
    blocks.{b}.ff2.*                 as ff1
    blocks.{b}.norm.scale|bias       (d,)               the block's post-LayerNorm
    final_norm.scale|bias            (d,)
    output.kernel                    (d, symbols)  .bias (symbols,)
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from benchbase.families.conformer.spec import ConformerModelSpec
from benchbase.families.layout import check_against_layout

__all__ = ["batchnorm_names", "block_names", "validate_weights", "weight_layout"]


def block_names(model: ConformerModelSpec) -> list[str]:
    return [f"blocks.{block}" for block in range(model.encoder_layers)]


def batchnorm_names(model: ConformerModelSpec) -> list[str]:
    """Every BatchNorm's prefix, in order: one per block's convolution module."""
    return [f"{block}.conv.batchnorm" for block in block_names(model)]


def weight_layout(model: ConformerModelSpec, feature_dimension: int) -> dict[str, tuple[int, ...]]:
    """Every weight's name and shape, in a fixed order (subsampling, blocks, head)."""
    d, hidden = model.encoder_dim, model.encoder_dim * model.feed_forward_expansion
    layout: dict[str, tuple[int, ...]] = {}
    channels_in = 1
    for layer in range(model.subsampling_layers):
        layout[f"subsampling.{layer}.kernel"] = (3, 3, channels_in, d)
        layout[f"subsampling.{layer}.bias"] = (d,)
        channels_in = d
    layout["subsampling.projection.kernel"] = (model.subsampled_bins(feature_dimension) * d, d)
    layout["subsampling.projection.bias"] = (d,)
    for block in block_names(model):
        layout |= _feed_forward(f"{block}.ff1", d, hidden)
        layout |= _norm(f"{block}.attention.norm", d)
        layout |= _dense(f"{block}.attention.qkv", d, 3 * d)
        layout[f"{block}.attention.query_scale"] = (model.head_dim,)
        layout |= _dense(f"{block}.attention.output", d, d)
        layout |= _norm(f"{block}.conv.norm", d)
        layout |= _dense(f"{block}.conv.glu", d, 2 * d)
        layout[f"{block}.conv.depthwise.kernel"] = (model.conv_kernel_size, d)
        for part in ("scale", "offset", "mean", "variance"):
            layout[f"{block}.conv.batchnorm.{part}"] = (d,)
        layout |= _dense(f"{block}.conv.output", d, d)
        layout |= _feed_forward(f"{block}.ff2", d, hidden)
        layout |= _norm(f"{block}.norm", d)
    layout |= _norm("final_norm", d)
    layout |= _dense("output", d, model.symbols)
    return layout


def validate_weights(weights: Mapping[str, np.ndarray], model: ConformerModelSpec, feature_dimension: int) -> None:
    """``BenchbaseError`` unless ``weights`` has exactly the layout's names and shapes."""
    check_against_layout(weights, weight_layout(model, feature_dimension))


def _feed_forward(prefix: str, d: int, hidden: int) -> dict[str, tuple[int, ...]]:
    return {**_norm(f"{prefix}.norm", d), **_dense(f"{prefix}.inner", d, hidden),
            **_dense(f"{prefix}.outer", hidden, d)}


def _norm(prefix: str, d: int) -> dict[str, tuple[int, ...]]:
    return {f"{prefix}.scale": (d,), f"{prefix}.bias": (d,)}


def _dense(prefix: str, inputs: int, outputs: int) -> dict[str, tuple[int, ...]]:
    return {f"{prefix}.kernel": (inputs, outputs), f"{prefix}.bias": (outputs,)}
