"""The JAX backend's Conformer family: MLCommons AlgoPerf's LibriSpeech Conformer (CTC head) as pure
functions, its CTC training and its jitted steps."""

from __future__ import annotations

from benchbase_jax_ds2.conformer.family import ConformerFamily

__all__ = ["FAMILY"]

FAMILY = ConformerFamily()
"""The Conformer as ``JaxBackend`` sees it (``benchbase_jax_ds2.family.ModelFamily``): CTC training,
predict() returning the log-probabilities, masked by each utterance's length; one program per
padded shape."""
