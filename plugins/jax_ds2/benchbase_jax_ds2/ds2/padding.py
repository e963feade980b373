"""DS2's training batch padded to a compiled shape (``shapes.Buckets``): one program per padded shape."""

from __future__ import annotations

import numpy as np

from benchbase.backend import Batch
from benchbase.specs import ModelSpec
from benchbase_jax_ds2.ds2.training import PaddedBatch
from benchbase_jax_ds2.shapes import Buckets, pad_rows, padded_labels

__all__ = ["padded_batch"]


def padded_batch(buckets: Buckets, batch: Batch, spec: ModelSpec) -> PaddedBatch:
    """Every array of a ``PaddedBatch``, on the host; padded rows have no labels and one frame."""
    rows = batch.size
    padded_rows = buckets.row_count(rows)
    return PaddedBatch(
        features=buckets.features(batch),
        output_lengths=pad_rows(batch.output_lengths, padded_rows, 1),
        labels=padded_labels(buckets, batch, spec.ctc_blank_index),
        label_lengths=pad_rows(batch.label_lengths, padded_rows, 0),
        rows=np.int32(rows),
        frames=np.int32(spec.output_frames(batch.features.shape[1])),
    )
