"""SpecAugment as the harness's data: masks drawn from the run's seed over each training batch.

What a model trains on decides its score, so the masks are the harness's, like the data order:
every backend (PyTorch, TensorFlow, JAX) trains on exactly the same masked batches, and none
draws masks of its own. The sampling mirrors MLCommons AlgoPerf's ``spectrum_augmenter`` (its
librispeech_conformer workload) in NumPy, utterance by utterance:

- a mask's width is ``floor(u * max_width)``, ``u`` uniform in [0, 1), capped at its bound
  (at least 1); a time mask's max_width is ``time_mask_max_frames``, or, where that is None,
  ``time_mask_max_ratio`` of the utterance's frames, and its bound is that same fraction
  (floored); a frequency mask's max_width is ``frequency_mask_max_bins``, its bound the
  frame's features;
- its start is ``floor(u' * (range - width + 1))``, a second uniform ``u'``, so the mask lies
  within the range: the utterance's own frames (``feature_lengths``) or the frame's features;
- padding is never masked (AlgoPerf's frequency masks cross it, which changes nothing where the
  padding is zeros and the mask value 0, as here by default);
- the time masks are drawn first, then the frequency masks, each as one (rows, masks) table of
  widths and then one of starts; masks may overlap; a masked feature becomes ``mask_value``.

Evaluation batches are never masked, nor the training sentences the harness decodes.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from benchbase.backend import Batch
from benchbase.specs.augmentation import SpecAugmentSpec

__all__ = ["SpecAugmentMasks", "draw_masks", "mask_generator", "spec_augment", "training_batch"]

_SPEC_AUGMENT_STREAM = 0x5BEC_A06
"""The first word of every mask generator's entropy. It keeps the masks' random stream apart
from the data order's, which is keyed by (seed, epoch): NumPy's SeedSequence reads entropy
[seed, epoch] and [seed, epoch, 0] as the same."""


@dataclass(frozen=True)
class SpecAugmentMasks:
    """One batch's masks: (rows, masks) int64 tables of first positions and widths (0: no mask)."""

    time_starts: np.ndarray
    time_widths: np.ndarray
    frequency_starts: np.ndarray
    frequency_widths: np.ndarray


def training_batch(batch: Batch, spec: SpecAugmentSpec | None, seed: int, epoch: int, batch_index: int) -> Batch:
    """What a backend trains on: ``batch`` masked by the workload's SpecAugment, or ``batch``
    itself (the same object) when the workload has none."""
    return batch if spec is None else spec_augment(batch, spec, seed, epoch, batch_index)


def spec_augment(batch: Batch, spec: SpecAugmentSpec, seed: int, epoch: int, batch_index: int) -> Batch:
    """A new batch whose features are ``batch``'s masked by SpecAugment; everything else is
    ``batch``'s, and ``batch`` itself is left as it was (the harness still decodes it).

    The masks are a function of (seed, epoch, batch_index) alone (``mask_generator``), never
    of a generator that runs on through the run. Two things depend on that: a resumed run
    replays the data pipeline from its checkpoint's batch, skipping what was trained, and must
    mask the batches it trains as the uninterrupted run did; and in a run of several processes
    every rank masks the same global batch the same way before taking its own slice, so the
    slices add up to one batch masked once.

    Its time is the harness's data work, on the run clock like reading and padding a batch:
    the training loop masks each batch after taking it from the pipeline and before
    ``train_step``, so it counts in the batch's data wait (metrics.jsonl's ``wait_s``,
    ``data_wait_s`` in result.json's ``step_breakdown``), not in the backend's step.
    """
    frames = np.asarray(batch.feature_lengths, dtype=np.int64)
    masks = draw_masks(spec, frames, batch.features.shape[2], mask_generator(seed, epoch, batch_index))
    return dataclasses.replace(batch, features=_masked(batch.features, frames, masks, spec.mask_value))


def mask_generator(seed: int, epoch: int, batch_index: int) -> np.random.Generator:
    """The generator of one batch's masks, keyed by the run's seed, the epoch and the batch's
    number in the epoch (entropy of one fixed length, so no two keys share a stream)."""
    return np.random.default_rng(np.random.SeedSequence([_SPEC_AUGMENT_STREAM, seed, epoch, batch_index]))


def draw_masks(spec: SpecAugmentSpec, frames: np.ndarray, bins: int, rng: np.random.Generator) -> SpecAugmentMasks:
    """Every utterance's masks, for utterances of ``frames`` valid frames and ``bins`` features a frame."""
    rows = len(frames)
    time_max = (frames * spec.time_mask_max_ratio if spec.time_mask_max_frames is None
                else np.full(rows, float(spec.time_mask_max_frames)))
    time_bound = np.floor(frames * spec.time_mask_max_ratio).astype(np.int64)
    time_starts, time_widths = _draw_ranges(rng, spec.time_masks, time_max, time_bound, frames)
    every_bin = np.full(rows, bins, dtype=np.int64)
    frequency_starts, frequency_widths = _draw_ranges(
        rng, spec.frequency_masks, np.full(rows, float(spec.frequency_mask_max_bins)), every_bin, every_bin)
    return SpecAugmentMasks(time_starts, time_widths, frequency_starts, frequency_widths)


def _draw_ranges(rng: np.random.Generator, count: int, max_width: np.ndarray, bound: np.ndarray,
                 extent: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``count`` ranges per row inside [0, extent): (starts, widths), as AlgoPerf's ``_get_mask`` draws them."""
    rows = len(extent)
    widths = np.floor(max_width[:, None] * rng.random((rows, count))).astype(np.int64)
    widths = np.minimum(widths, np.maximum(bound, 1)[:, None])
    starts = np.floor(rng.random((rows, count)) * (extent[:, None] - widths + 1)).astype(np.int64)
    return starts, widths


def _masked(features: np.ndarray, frames: np.ndarray, masks: SpecAugmentMasks, value: float) -> np.ndarray:
    """A new array of ``features``, each masked (frame, bin) within an utterance's frames set to ``value``."""
    _, width, bins = features.shape
    valid = np.arange(width)[None, :] < frames[:, None]
    masked_frames = _covered(masks.time_starts, masks.time_widths, width) & valid
    masked_bins = _covered(masks.frequency_starts, masks.frequency_widths, bins)
    masked = features.copy()
    masked[masked_frames] = value  # whole frames
    # Bins row by row, within the row's own frames: a (rows, frames, bins) mask would cost twice the time.
    for row in np.flatnonzero(masked_bins.any(axis=1)):
        masked[row, : frames[row], masked_bins[row]] = value
    return masked


def _covered(starts: np.ndarray, widths: np.ndarray, size: int) -> np.ndarray:
    """(rows, size) booleans: the positions some range [start, start + width) of the row covers."""
    positions = np.arange(size)[None, None, :]
    inside = (positions >= starts[:, :, None]) & (positions < (starts + widths)[:, :, None])
    covered: np.ndarray = inside.any(axis=1)
    return covered
