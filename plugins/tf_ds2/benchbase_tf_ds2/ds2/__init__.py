"""The TensorFlow backend's DS2 family: the Deep Speech 2-like model, its CTC loss and neutral weights."""

from __future__ import annotations

from benchbase_tf_ds2.ds2.family import DS2Family

__all__ = ["FAMILY"]

FAMILY = DS2Family()
