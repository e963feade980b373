"""Padding batches to a few compiled shapes, for every family.

XLA compiles one program per input shape, and compiling is on the run clock (several
seconds per shape on one CPU thread), while the harness pads each batch only to its own
longest utterance and label. Rounding frames, labels and rows up to coarse buckets (capped
at the run's bounds from ``BuildContext``) keeps the number of programs small (ds2-mini: four
or five in a run) for a few percent of padded work. Each family pads the rest of its step's
batch (``ModelFamily.padded_batch``) with these buckets; a family may compile more than one
program per padded shape (the transducer's packed joint: ``rnnt.padding``), and says which
labels reach them all (``ModelFamily.warm_up_label_lengths``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from benchbase.backend import Batch, BatchShape, Inputs
from benchbase.specs import ModelSpec

__all__ = ["Buckets", "pad_rows", "padded_labels", "synthetic_batches"]

FRAME_STEP = 64
LABEL_STEP = 16


@dataclass(frozen=True)
class Buckets:
    """The shapes a run's batches are padded to."""

    rows: int
    """Batch rows are padded to a multiple of this (the global batch)."""
    max_frames: int
    max_label_length: int

    def frames(self, frames: int) -> int:
        return _bucket(frames, FRAME_STEP, self.max_frames)

    def label_length(self, length: int) -> int:
        """Long labels are padded to the run's longest: their cost per label is small next to the
        LSTMs' (CTC's; the transducer's packed joint computes only the cells within the lengths),
        a compilation's is not, and random batches' longest labels cluster near the top."""
        if 2 * length >= self.max_label_length:
            return max(length, self.max_label_length)
        return _bucket(length, LABEL_STEP, self.max_label_length)

    def row_count(self, rows: int) -> int:
        return -(-rows // self.rows) * self.rows

    def features(self, inputs: Inputs) -> np.ndarray:
        """The features padded with zeros to the bucket's rows and frames."""
        rows, frames, dimension = inputs.features.shape
        padded = np.zeros((self.row_count(rows), self.frames(frames), dimension), np.float32)
        padded[:rows, :frames] = inputs.features
        return padded


def synthetic_batches(shape: BatchShape, model: ModelSpec, feature_dimension: int,
                      label_lengths: Iterable[int]) -> list[Batch]:
    """Batches of zeros of ``shape``, every row full length, one for each of ``label_lengths``
    (the family's ``warm_up_label_lengths``: those that reach every program a real batch of that
    shape can)."""
    rows, frames = shape.rows, shape.frames
    output = model.output_frames(np.full(rows, frames, np.int32))
    symbol = (model.blank_index + 1) % model.symbols  # any label but the blank
    return [Batch(features=np.zeros((rows, frames, feature_dimension), np.float32),
                  feature_lengths=np.full(rows, frames, np.int32), output_lengths=output,
                  labels=np.full((rows, shape.label_length), symbol, np.int32),
                  label_lengths=np.full(rows, length, np.int32), utterance_ids=("",) * rows, transcripts=("",) * rows)
            for length in label_lengths]


def _bucket(size: int, step: int, cap: int) -> int:
    """``size`` rounded up to a multiple of ``step``, but not past ``cap`` (unless ``size`` is)."""
    return max(size, min(-(-size // step) * step, cap))


def pad_rows(values: np.ndarray, rows: int, fill: int) -> np.ndarray:
    """Per-row ``values`` (int32) continued with ``fill`` to ``rows`` rows."""
    padded = np.full(rows, fill, np.int32)
    padded[: len(values)] = values
    return padded


def padded_labels(buckets: Buckets, batch: Batch, blank: int) -> np.ndarray:
    """The batch's labels (int32) in its bucket's rows and label length; every other position the blank."""
    rows = batch.size
    labels = np.full((buckets.row_count(rows), buckets.label_length(batch.labels.shape[1])), blank, np.int32)
    labels[:rows, : batch.labels.shape[1]] = batch.labels
    return labels
