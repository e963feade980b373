"""The JAX backend's Conformer family: MLCommons AlgoPerf's LibriSpeech Conformer (CTC head) as pure
functions, its CTC loss and its jitted predict, masked by each utterance's length; ``family`` is its
``FAMILY``."""

from __future__ import annotations

from benchbase_jax_ds2.conformer import family as FAMILY

__all__ = ["FAMILY"]
