"""The TensorFlow backend's RNN-T family: the transducer model, its loss, and what ``TensorFlowBackend`` asks."""

from __future__ import annotations

from benchbase_tf_ds2.rnnt.family import RNNTFamily

__all__ = ["FAMILY"]

FAMILY = RNNTFamily()
