"""The Conformer as ``JaxBackend`` sees it: this module is the family's ``FAMILY`` (it meets
``benchbase_jax_ds2.family.ModelFamily``).

``predict()`` returns the per-frame log-probabilities (batch, output frames, symbols), float32,
which the harness decodes. Unlike DS2's, the network needs each utterance's length at prediction
too (``predict_extent``): its attention must not read the padded frames.
"""

from __future__ import annotations

import numpy as np

from benchbase.backend import Inputs
from benchbase.families.conformer import weight_layout as layout
from benchbase.families.conformer.spec import ConformerModelSpec
from benchbase_jax_ds2.conformer.model import initial_weights
from benchbase_jax_ds2.conformer.training import CONFORMER_PRECISIONS as precisions
from benchbase_jax_ds2.conformer.training import make_batch_loss, make_predict, padded_batch, padded_lengths
from benchbase_jax_ds2.shapes import Buckets

__all__ = ["initial_weights", "layout", "make_batch_loss", "make_predict", "name", "padded_batch", "precisions",
           "predict_extent", "summary", "warm_up_label_lengths"]

name = "conformer"
summary = "Conformer (optax CTC)"


def predict_extent(spec: ConformerModelSpec, inputs: Inputs, buckets: Buckets) -> tuple[np.int32, np.ndarray]:
    """The caller's rows and each padded row's feature length (0 for the rows the backend pads
    on): the attention's keys and the masks are per utterance. Padded to the bucket's rows, so
    that predict() compiles once per padded shape, as DS2's does, whatever the caller's rows."""
    return np.int32(inputs.size), padded_lengths(buckets, inputs)


def warm_up_label_lengths(label_length: int) -> tuple[int, ...]:
    """Full-length labels: the label lengths change no program of the padded shape."""
    return (label_length,)
