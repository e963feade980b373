"""The JAX backend's DS2 family: the Deep Speech 2-like model as pure functions, its CTC loss and its
jitted predict; ``family`` is its ``FAMILY``."""

from __future__ import annotations

from benchbase_jax_ds2.ds2 import family as FAMILY

__all__ = ["FAMILY"]
