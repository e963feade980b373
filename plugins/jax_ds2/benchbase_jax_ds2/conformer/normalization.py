"""The Conformer's two normalizations, as ``benchbase.families.conformer.spec`` pins them.

Both scale by ``1 + scale`` (the scale starts at 0, AlgoPerf's convention), and both divide by
``sqrt(var + eps)`` in the reference's order. BatchNorm averages over the utterances' own frames
only: the frames the harness padded and those this backend pads on (rows and frames of a bucket)
are all past some utterance's length, so one mask of lengths excludes both, and an utterance's
statistics never depend on the padding of the batch it trains in. Everything is float32 in every
precision: the statistics of a few thousand frames lose too much in bfloat16.

Masks are applied with ``jnp.where``, never by multiplying: a padded row (length 0) is garbage,
and a garbage ``inf`` times 0 would be NaN in the statistics.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from benchbase.families.conformer.spec import ConformerModelSpec

__all__ = ["batch_norm", "layer_norm"]


def layer_norm(x: jax.Array, parameters: dict, prefix: str, epsilon: float) -> jax.Array:
    """``(x - mean) / sqrt(var + eps) * (1 + scale) + bias`` over the last axis, two passes."""
    mean = jnp.mean(x, axis=-1, keepdims=True)
    centered = x - mean
    variance = jnp.mean(centered * centered, axis=-1, keepdims=True)
    normalized = centered / jnp.sqrt(variance + epsilon)
    return normalized * (1.0 + parameters[f"{prefix}.scale"]) + parameters[f"{prefix}.bias"]


def batch_norm(x: jax.Array, valid: jax.Array, spec: ConformerModelSpec, parameters: dict, statistics: dict,
               prefix: str, updated: dict | None) -> jax.Array:
    """BatchNorm of (batch, frames, channels) per channel; ``valid`` (batch, frames, 1) marks the
    utterances' frames. Training when ``updated`` is given: normalizes with the mean and biased
    variance of the valid frames, and puts ``keep * running + (1 - keep) * batch`` into
    ``updated`` (``batchnorm_momentum`` is the share kept, the Keras convention). Inference
    normalizes with the running statistics. Padded frames of the output are zero."""
    if updated is None:
        mean, variance = statistics[f"{prefix}.mean"], statistics[f"{prefix}.variance"]
    else:
        # Two passes (the mean first), as the reference: E[x^2] - E[x]^2 cancels in float32.
        count = jnp.maximum(jnp.sum(valid.astype(jnp.float32)), 1.0)  # never 0 in a real batch
        mean = jnp.sum(jnp.where(valid, x, 0.0), axis=(0, 1)) / count
        centered = jnp.where(valid, x - mean, 0.0)
        variance = jnp.sum(centered * centered, axis=(0, 1)) / count
        keep = spec.batchnorm_momentum
        for part, batch_value in (("mean", mean), ("variance", variance)):
            name = f"{prefix}.{part}"
            updated[name] = keep * statistics[name] + (1.0 - keep) * lax.stop_gradient(batch_value)
    normalized = (x - mean) / jnp.sqrt(variance + spec.batchnorm_epsilon)
    out = normalized * (1.0 + parameters[f"{prefix}.scale"]) + parameters[f"{prefix}.offset"]
    return jnp.where(valid, out, 0.0)
