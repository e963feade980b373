"""The JAX backend's RNN-T family: the transducer as pure functions, its loss, and its jitted steps."""

from __future__ import annotations

from benchbase_jax_ds2.rnnt.family import RNNTFamily

__all__ = ["FAMILY"]

FAMILY = RNNTFamily()
