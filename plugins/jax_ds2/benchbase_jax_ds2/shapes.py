"""Padding batches to a few compiled shapes.

XLA compiles one program per input shape, and compiling is on the run clock (several
seconds per shape on one CPU thread), while the harness pads each batch only to its own
longest utterance and label. Rounding frames, labels and rows up to coarse buckets (capped
at the run's bounds from ``BuildContext``) keeps the number of programs small (ds2-mini: four
or five in a run) for a few percent of padded work.

The transducer's labels are padded by the same rule (rnnt-mini's random batches' longest labels,
60 to 80 of at most 80, all fall in the top bucket), and its joint runs on the lattice cells
within each utterance's lengths only, packed into a capacity of a quarter, a half, three quarters
or all of the padded lattice's cells: the smallest that holds the batch's. rnnt-mini's batches
fill 28 to 44 % of their padded lattices, so each frame bucket has one program, whose joint does
half the dense lattice's work.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from benchbase.backend import Batch, BatchShape, Inputs
from benchbase.specs import ModelSpec

__all__ = ["Buckets", "synthetic_batches", "transducer_cells"]

FRAME_STEP = 64
LABEL_STEP = 16
CELL_CAPACITY_STEPS = 4
"""The transducer's packed joint holds 1, 2, .. or 4 quarters of its padded lattice's cells."""


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

    def transducer_arrays(self, batch: Batch, model: ModelSpec) -> dict[str, np.ndarray | np.int32]:
        """Every array of an ``rnnt.training.TransducerBatch``: padded rows have no output frame and
        no label, so the loss counts them zero; padded label positions hold the blank; ``cells``
        lists the lattice cells the joint computes (``transducer_cells``)."""
        rows = batch.size
        padded_rows = self.row_count(rows)
        labels = np.full((padded_rows, self.label_length(batch.labels.shape[1])), model.blank_index, np.int32)
        labels[:rows, : batch.labels.shape[1]] = batch.labels
        features = self.features(batch)
        frames = model.output_frames(features.shape[1])
        return {
            "features": features,
            "output_lengths": _pad_rows(batch.output_lengths, padded_rows, 0),
            "labels": labels,
            "label_lengths": _pad_rows(batch.label_lengths, padded_rows, 0),
            "cells": transducer_cells(batch.output_lengths, batch.label_lengths, (padded_rows, frames,
                                                                                  labels.shape[1] + 1)),
            "rows": np.int32(rows),
        }


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


def synthetic_batches(shape: BatchShape, model: ModelSpec, feature_dimension: int) -> list[Batch]:
    """Batches of zeros of ``shape`` that reach every program a real batch of that shape can: for
    DS2 one, every row full length; for the transducer one per capacity of its packed joint (the
    labels' lengths set so the lattice cells fill 1, 2, 3 or 4 quarters), the frames full."""
    rows, frames = shape.rows, shape.frames
    output = model.output_frames(np.full(rows, frames, np.int32))
    symbol = (model.blank_index + 1) % model.symbols  # any label but the blank
    fills = range(1, CELL_CAPACITY_STEPS + 1) if model.family == "rnnt" else (CELL_CAPACITY_STEPS,)
    lengths = sorted({max(1, min(shape.label_length, (shape.label_length + 1) * fill // CELL_CAPACITY_STEPS - 1))
                      for fill in fills})
    return [Batch(features=np.zeros((rows, frames, feature_dimension), np.float32),
                  feature_lengths=np.full(rows, frames, np.int32), output_lengths=output,
                  labels=np.full((rows, shape.label_length), symbol, np.int32),
                  label_lengths=np.full(rows, length, np.int32), utterance_ids=("",) * rows, transcripts=("",) * rows)
            for length in lengths]


def _bucket(size: int, step: int, cap: int) -> int:
    """``size`` rounded up to a multiple of ``step``, but not past ``cap`` (unless ``size`` is)."""
    return max(size, min(-(-size // step) * step, cap))


def _pad_rows(values: np.ndarray, rows: int, fill: int) -> np.ndarray:
    padded = np.full(rows, fill, np.int32)
    padded[: len(values)] = values
    return padded
