"""The JAX backend's RNN-T family: the transducer as pure functions, its loss and its jitted predict;
``family`` is its ``FAMILY``."""

from __future__ import annotations

from benchbase_jax_ds2.rnnt import family as FAMILY

__all__ = ["FAMILY"]
