"""Dropout's randomness, the same in every family: the key the training state carries
(``DROPOUT_RNG``) and the bits each mask is drawn from (``counter_hash``)."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from jax import lax

__all__ = ["DROPOUT_RNG", "counter_hash"]

DROPOUT_RNG = "rbg"
"""The key that the state carries and each step splits; the masks themselves come from
``counter_hash``. rbg keys split without threefry's unrolled rounds, which would add to
every compilation (one per batch shape, on the run clock)."""


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
