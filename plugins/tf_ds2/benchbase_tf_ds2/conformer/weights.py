"""The Conformer Keras model's variables by their names in benchbase's framework-neutral layout.

The neutral layout (``benchbase.families.conformer.weight_layout``) is Keras's own: Dense kernels
(inputs, outputs), the subsampling kernels (time, frequency, in, out) and the depthwise kernel
(width, channels) are stored so here, so no array is transposed.
"""

from __future__ import annotations

import keras

from benchbase.families.conformer.weight_layout import block_names
from benchbase_tf_ds2.conformer.blocks import ConformerBlock, FeedForward
from benchbase_tf_ds2.conformer.model import Conformer

__all__ = ["neutral_variables"]


def neutral_variables(model: Conformer) -> dict:
    """Each neutral name -> the Keras variable that holds it, in the layout's order."""
    sub = model.subsampling
    variables = {}
    for layer, (kernel, bias) in enumerate(zip(sub.kernels, sub.biases)):
        variables[f"subsampling.{layer}.kernel"], variables[f"subsampling.{layer}.bias"] = kernel, bias
    variables |= _dense("subsampling.projection", sub.projection)
    for prefix, block in zip(block_names(model.spec), model.blocks):
        variables |= _block(prefix, block)
    variables |= _norm("final_norm", model.final_norm)
    return variables | _dense("output", model.output_layer)


def _block(prefix: str, block: ConformerBlock) -> dict:
    attention, conv, norm = block.attention, block.conv, block.conv.batchnorm
    variables = _feed_forward(f"{prefix}.ff1", block.ff1)
    variables |= _norm(f"{prefix}.attention.norm", attention.norm)
    variables |= _dense(f"{prefix}.attention.qkv", attention.qkv)
    variables[f"{prefix}.attention.query_scale"] = attention.query_scale
    variables |= _dense(f"{prefix}.attention.output", attention.output_layer)
    variables |= _norm(f"{prefix}.conv.norm", conv.norm)
    variables |= _dense(f"{prefix}.conv.glu", conv.glu)
    variables[f"{prefix}.conv.depthwise.kernel"] = conv.depthwise
    variables |= {f"{prefix}.conv.batchnorm.{part}": getattr(norm, part)
                  for part in ("scale", "offset", "mean", "variance")}
    variables |= _dense(f"{prefix}.conv.output", conv.output_layer)
    variables |= _feed_forward(f"{prefix}.ff2", block.ff2)
    return variables | _norm(f"{prefix}.norm", block.norm)


def _feed_forward(prefix: str, module: FeedForward) -> dict:
    return {**_norm(f"{prefix}.norm", module.norm), **_dense(f"{prefix}.inner", module.inner),
            **_dense(f"{prefix}.outer", module.outer)}


def _norm(prefix: str, norm: keras.layers.Layer) -> dict:
    return {f"{prefix}.scale": norm.scale, f"{prefix}.bias": norm.bias}


def _dense(prefix: str, layer: keras.layers.Dense) -> dict:
    return {f"{prefix}.kernel": layer.kernel, f"{prefix}.bias": layer.bias}
