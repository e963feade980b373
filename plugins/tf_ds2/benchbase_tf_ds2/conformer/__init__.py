"""The TensorFlow backend's Conformer family: AlgoPerf's LibriSpeech Conformer, its CTC training and neutral weights."""

from __future__ import annotations

from benchbase_tf_ds2.conformer.family import ConformerFamily

__all__ = ["FAMILY"]

FAMILY = ConformerFamily()
