"""The JAX backend's DS2 family: the Deep Speech 2-like model as pure functions, its CTC training and
its jitted steps."""

from __future__ import annotations

from benchbase_jax_ds2.ds2.family import DS2Family

__all__ = ["FAMILY"]

FAMILY = DS2Family()
