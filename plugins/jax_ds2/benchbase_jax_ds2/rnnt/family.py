"""The RNN transducer as ``JaxBackend`` sees it: this module is the family's ``FAMILY`` (it meets
``benchbase_jax_ds2.family.ModelFamily``). The transducer loss over a packed joint, predict()
returning the joint's encoder projection (the harness runs the search on exported weights), one
program per capacity of the packed joint."""

from __future__ import annotations

import numpy as np

from benchbase.backend import Inputs
from benchbase.families.rnnt import weight_layout as layout
from benchbase.families.rnnt.spec import RNNTModelSpec
from benchbase_jax_ds2.rnnt.model import initial_weights
from benchbase_jax_ds2.rnnt.padding import padded_batch, warm_up_label_lengths
from benchbase_jax_ds2.rnnt.training import TRANSDUCER_PRECISIONS as precisions
from benchbase_jax_ds2.rnnt.training import make_batch_loss, make_predict
from benchbase_jax_ds2.shapes import Buckets

__all__ = ["initial_weights", "layout", "make_batch_loss", "make_predict", "name", "padded_batch", "precisions",
           "predict_extent", "summary", "warm_up_label_lengths"]

name = "rnnt"
summary = "RNN-T (transducer loss)"


def predict_extent(spec: RNNTModelSpec, inputs: Inputs, buckets: Buckets) -> tuple[np.int32, np.int32]:
    """The caller's rows and feature frames: the encoder's ranges are over its input's frames."""
    return np.int32(inputs.size), np.int32(inputs.features.shape[1])
