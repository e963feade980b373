"""A training batch's FLOPs from a family's per-utterance cost: on the padded batch the step
computes, and on the valid frames and labels alone (what the step would cost without padding)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

__all__ = ["batch_training_flops"]


def batch_training_flops(utterance_flops: Callable[[int, int], int], padded_frames: int,
                         feature_lengths: Sequence[int], label_lengths: Sequence[int]) -> tuple[int, int]:
    """(padded, valid) training FLOPs of a batch: ``utterance_flops(frames, labels)`` for every row
    at the batch's padded frames and longest label, and for every row at its own lengths."""
    costs: dict[tuple[int, int], int] = {}  # a batch repeats lengths: count each pair once

    def cost(frames: int, labels: int) -> int:
        if (frames, labels) not in costs:
            costs[frames, labels] = utterance_flops(frames, labels)
        return costs[frames, labels]

    labels = [int(length) for length in label_lengths]
    padded = len(labels) * cost(int(padded_frames), max(labels, default=0))
    valid = sum(cost(int(frames), length) for frames, length in zip(feature_lengths, labels, strict=True))
    return padded, valid
