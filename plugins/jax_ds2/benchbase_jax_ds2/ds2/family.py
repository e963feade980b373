"""DS2 as ``JaxBackend`` sees it: this module is the family's ``FAMILY`` (it meets
``benchbase_jax_ds2.family.ModelFamily``). CTC training, predict() returning the
log-probabilities, one program per padded shape."""

from __future__ import annotations

import numpy as np

from benchbase.backend import Inputs
from benchbase.families.ds2 import weight_layout as layout
from benchbase.specs import ModelSpec
from benchbase_jax_ds2.ds2.model import initial_weights
from benchbase_jax_ds2.ds2.padding import padded_batch
from benchbase_jax_ds2.ds2.training import make_batch_loss, make_predict
from benchbase_jax_ds2.shapes import Buckets

__all__ = ["initial_weights", "layout", "make_batch_loss", "make_predict", "name", "padded_batch", "precisions",
           "predict_extent", "summary", "warm_up_label_lengths"]

name = "ds2"
summary = "DS2 (optax CTC)"
precisions = frozenset({"fp32", "tf32", "bf16", "fp16", "int8-emulated"})


def predict_extent(spec: ModelSpec, inputs: Inputs, buckets: Buckets) -> tuple[np.int32, np.int32]:
    """The caller's rows and conv output frames: BatchNorm's and the ranges' frames."""
    return np.int32(inputs.size), np.int32(spec.output_frames(inputs.features.shape[1]))


def warm_up_label_lengths(label_length: int) -> tuple[int, ...]:
    """Full-length labels: the label lengths change no program of the padded shape."""
    return (label_length,)
