"""Padding batches to a few compiled shapes.

XLA compiles one program per input shape, and compiling is on the run clock (several
seconds per shape on one CPU thread), while the harness pads each batch only to its own
longest utterance and label. Rounding frames, labels and rows up to coarse buckets (capped
at the run's bounds from ``BuildContext``) keeps the number of programs small (ds2-mini: four
or five in a run) for a few percent of padded work.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from benchbase.backend import Batch, Inputs
from benchbase.specs import ModelSpec

__all__ = ["Buckets"]

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
        """Long labels are padded to the run's longest: CTC's cost per label is small next to the
        LSTMs', a compilation is not, and random batches' longest labels cluster near the top."""
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

    def training_arrays(self, batch: Batch, model: ModelSpec) -> dict[str, np.ndarray]:
        """Every array of a ``training.PaddedBatch``; padded rows have no labels and one frame."""
        rows = batch.size
        padded_rows = self.row_count(rows)
        labels = np.full((padded_rows, self.label_length(batch.labels.shape[1])), model.ctc_blank_index, np.int32)
        labels[:rows, : batch.labels.shape[1]] = batch.labels
        return {
            "features": self.features(batch),
            "output_lengths": _pad_rows(batch.output_lengths, padded_rows, 1),
            "labels": labels,
            "label_lengths": _pad_rows(batch.label_lengths, padded_rows, 0),
            "rows": np.int32(rows),
            "frames": np.int32(model.output_frames(batch.features.shape[1])),
        }


def _bucket(size: int, step: int, cap: int) -> int:
    """``size`` rounded up to a multiple of ``step``, but not past ``cap`` (unless ``size`` is)."""
    return max(size, min(-(-size // step) * step, cap))


def _pad_rows(values: np.ndarray, rows: int, fill: int) -> np.ndarray:
    padded = np.full(rows, fill, np.int32)
    padded[: len(values)] = values
    return padded
