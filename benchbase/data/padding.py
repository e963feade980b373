"""A batch padded: its utterances' features right-padded with zeros, its labels with the blank.

Its own module so that the pipeline's reader threads and its reader processes
(``benchbase.data.reader_processes``) pad with the same function.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from benchbase.backend import Batch
from benchbase.data.store import Utterance
from benchbase.errors import BenchbaseError
from benchbase.specs import ModelSpec

__all__ = ["HostArrays", "backend_array", "pad_batch"]

HostArrays = Callable[[tuple[int, ...], np.dtype], "np.ndarray | None"]
"""``Backend.host_array``: an array for a batch's padded features, or None for NumPy's."""


def pad_batch(utterances: list[Utterance], model: ModelSpec, pad_to_frames: int | None = None,
              host_arrays: HostArrays | None = None) -> Batch:
    """Right-pad features with zeros (to the longest, or to ``pad_to_frames``) and labels with the blank.

    The output lengths come from the model spec's formula, the only one. ``host_arrays`` (a
    backend's ``host_array``) gives the array the features are padded into; None, or its None: NumPy's.
    """
    frames = np.asarray([u.features.shape[0] for u in utterances], dtype=np.int32)
    label_lengths = np.asarray([len(u.labels) for u in utterances], dtype=np.int32)
    width = pad_to_frames or int(frames.max())
    if frames.max() > width:
        raise ValueError(f"an utterance has {frames.max()} frames, more than pad_to_frames {width}")
    shape = (len(utterances), width, utterances[0].features.shape[1])
    features = _host_features(host_arrays, shape)
    labels = np.full((len(utterances), label_lengths.max()), model.blank_index, dtype=np.int32)
    for row, utterance in enumerate(utterances):
        features[row, : frames[row]] = utterance.features
        labels[row, : label_lengths[row]] = utterance.labels
    return Batch(
        features=features,
        feature_lengths=frames,
        output_lengths=model.output_frames(frames),
        labels=labels,
        label_lengths=label_lengths,
        utterance_ids=tuple(u.utterance_id for u in utterances),
        transcripts=tuple(u.transcript for u in utterances),
    )


def _host_features(host_arrays: HostArrays | None, shape: tuple[int, int, int]) -> np.ndarray:
    """Zeros of ``shape``, float32, where the backend wants them (page-locked memory) or NumPy's."""
    features = backend_array(host_arrays, shape)
    if features is None:
        return np.zeros(shape, dtype=np.float32)
    features.fill(0)
    return features


def backend_array(host_arrays: HostArrays | None, shape: tuple[int, int, int]) -> np.ndarray | None:
    """The backend's float32 array of ``shape`` for a batch's features (checked), or None: NumPy's."""
    features = host_arrays(shape, np.dtype(np.float32)) if host_arrays is not None else None
    if features is not None and (features.shape != shape or features.dtype != np.float32
                                 or not features.flags.writeable):
        raise BenchbaseError(f"the backend's host_array{shape} gave a {features.dtype} array of shape "
                             f"{features.shape}; expected a writeable float32 array of that shape")
    return features
