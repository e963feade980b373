"""int8-emulated in JAX: fake quantization exactly as ``ModelSpec.quantization`` pins it.

``benchbase.numerics.quantization`` is the NumPy reference these functions are tested against
(tests/test_precision.py): the same float32 operations in the same order (jnp.round rounds
half to even, as NumPy does). The straight-through gradient is ``x + stop_gradient(q(x) - x)``:
the forward value is exactly q(x) (the difference of two nearby floats is exact), the backward
pass sees the identity, of the clip to the range for activations; no gradient reaches a scale.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from benchbase.specs.workload import QuantizationSpec

__all__ = ["fake_quantize", "quantize_activation", "quantize_weight", "updated_range"]


def fake_quantize(x: jax.Array, scale: jax.Array | float, qmax: int) -> jax.Array:
    """clip(round_half_even(x / scale), -qmax, qmax) * scale."""
    return jnp.clip(jnp.round(x / scale), -qmax, qmax) * scale


def quantize_weight(spec: QuantizationSpec, weight: jax.Array) -> jax.Array:
    largest = lax.stop_gradient(jnp.max(jnp.abs(weight)))
    scale = jnp.where(largest > 0, largest / spec.qmax, jnp.float32(1.0))
    return weight + lax.stop_gradient(fake_quantize(weight, scale, spec.qmax) - weight)


def quantize_activation(spec: QuantizationSpec, x: jax.Array, value_range: jax.Array) -> jax.Array:
    """``x`` fake-quantized with ``value_range`` (saturating beyond it, with zero gradient there)."""
    value_range = lax.stop_gradient(value_range)
    scale = jnp.where(value_range > 0, value_range / spec.qmax, jnp.float32(1.0))
    clipped = jnp.clip(x, -value_range, value_range)
    return clipped + lax.stop_gradient(fake_quantize(clipped, scale, spec.qmax) - clipped)


def quantize_state(spec: QuantizationSpec, h: jax.Array) -> jax.Array:
    """h(t-1) before the recurrent matmul, at the fixed range (|h| < 1: nothing saturates)."""
    scale = jnp.float32(spec.recurrent_state_range) / spec.qmax
    return h + lax.stop_gradient(fake_quantize(h, scale, spec.qmax) - h)


def updated_range(spec: QuantizationSpec, stored: jax.Array, batch_max: jax.Array) -> jax.Array:
    """The range after a training step: the batch's max|x| at the first step (range 0), else the moving average."""
    momentum = spec.range_momentum
    return jnp.where(stored == 0, batch_max, stored * momentum + batch_max * (1.0 - momentum))
