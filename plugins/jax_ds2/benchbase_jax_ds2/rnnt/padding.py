"""The transducer's training batch padded to a compiled shape (``shapes.Buckets``), and the cells
of its packed joint.

The labels are padded by the same rule as DS2's (rnnt-mini's random batches' longest labels,
60 to 80 of at most 80, all fall in the top bucket), and the joint runs on the lattice cells
within each utterance's lengths only, packed into a capacity of a quarter, a half, three quarters
or all of the padded lattice's cells: the smallest that holds the batch's. rnnt-mini's batches
fill 28 to 44 % of their padded lattices, so each frame bucket has one program, whose joint does
half the dense lattice's work.
"""

from __future__ import annotations

import numpy as np

from benchbase.backend import Batch
from benchbase.families.rnnt.spec import RNNTModelSpec
from benchbase_jax_ds2.rnnt.training import TransducerBatch
from benchbase_jax_ds2.shapes import Buckets, pad_rows, padded_labels

__all__ = ["CELL_CAPACITY_STEPS", "padded_batch", "transducer_cells", "warm_up_label_lengths"]

CELL_CAPACITY_STEPS = 4
"""The transducer's packed joint holds 1, 2, .. or 4 quarters of its padded lattice's cells."""


def padded_batch(buckets: Buckets, batch: Batch, spec: RNNTModelSpec) -> TransducerBatch:
    """Every array of a ``TransducerBatch``, on the host: padded rows have no output frame and
    no label, so the loss counts them zero; padded label positions hold the blank; ``cells``
    lists the lattice cells the joint computes (``transducer_cells``)."""
    rows = batch.size
    padded_rows = buckets.row_count(rows)
    labels = padded_labels(buckets, batch, spec.blank_index)
    features = buckets.features(batch)
    frames = spec.output_frames(features.shape[1])
    return TransducerBatch(
        features=features,
        output_lengths=pad_rows(batch.output_lengths, padded_rows, 0),
        labels=labels,
        label_lengths=pad_rows(batch.label_lengths, padded_rows, 0),
        cells=transducer_cells(batch.output_lengths, batch.label_lengths, (padded_rows, frames, labels.shape[1] + 1)),
        rows=np.int32(rows),
        # How far the harness padded: int8-emulated's ranges are over that padding, not the compiled shape's.
        frames=np.int32(batch.features.shape[1]),
        label_width=np.int32(batch.labels.shape[1]),
    )


def transducer_cells(output_lengths: np.ndarray, label_lengths: np.ndarray,
                     lattice: tuple[int, int, int]) -> np.ndarray:
    """The flat indices of the cells (row, t < output length, u <= label length) of a padded
    ``lattice`` (rows, T', U + 1), ascending, then the index past the lattice up to the capacity:
    the smallest number of quarters of the lattice's cells that holds them."""
    rows, frames, positions = lattice
    inside = [(row * frames + np.arange(frames_of_row)[:, None]) * positions + np.arange(labels_of_row + 1)
              for row, (frames_of_row, labels_of_row) in enumerate(zip(output_lengths, label_lengths))]
    cells = np.concatenate([block.ravel() for block in inside]).astype(np.int32)
    total = rows * frames * positions
    capacity = next(size for step in range(1, CELL_CAPACITY_STEPS + 1)
                    if (size := -(-total * step // CELL_CAPACITY_STEPS)) >= len(cells))
    return np.concatenate([cells, np.full(capacity - len(cells), total, np.int32)])


def warm_up_label_lengths(label_length: int) -> list[int]:
    """One label length per capacity of the packed joint, for labels padded to ``label_length``
    (the frames full): the lengths at which the lattice's cells fill 1, 2, 3 or 4 quarters of it."""
    return sorted({max(1, min(label_length, (label_length + 1) * fill // CELL_CAPACITY_STEPS - 1))
                   for fill in range(1, CELL_CAPACITY_STEPS + 1)})
