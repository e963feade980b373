"""What a run computed and how much of the devices' peak that was: its training FLOPs by the
model family's cost model, on the padded batches and on the valid frames alone, the padding
fraction, and hardware and useful MFU against the devices' dense peak (benchbase.telemetry.peak_flops).

MFU divides by the run clock's wall time (evaluation, checkpoints and data waits included): the
share of the peak the run as a whole kept busy with training, the figure that time-to-accuracy
pays for."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from benchbase.backend import Batch
from benchbase.families.parts import family_parts
from benchbase.specs import ModelSpec
from benchbase.telemetry.peak_flops import DevicePeak

__all__ = ["BatchFlops", "EpochFlops", "batch_flops_of", "compute_record", "mfu"]

BatchFlops = Callable[[Batch], tuple[int, int]]
"""A training batch -> its (padded, valid) training FLOPs."""


def batch_flops_of(model: ModelSpec) -> BatchFlops | None:
    """How ``model``'s family counts a global batch's FLOPs; None for a family without a cost model."""
    counted = getattr(family_parts(model), "batch_flops", None)
    if counted is None:
        return None

    def batch_flops(batch: Batch) -> tuple[int, int]:
        padded_frames, feature_dimension = batch.features.shape[1], batch.features.shape[2]
        return counted(model, feature_dimension, padded_frames, batch.feature_lengths, batch.label_lengths)

    return batch_flops


@dataclass
class EpochFlops:
    """An epoch's training FLOPs, summed over its steps, for the log's benchbase_epoch_flops."""

    padded: int = 0
    valid: int = 0
    steps: int = 0

    def add(self, padded: int, valid: int) -> None:
        self.padded, self.valid, self.steps = self.padded + padded, self.valid + valid, self.steps + 1

    def record(self) -> dict[str, int]:
        return {"padded": self.padded, "valid": self.valid, "steps": self.steps}


def compute_record(flops_padded: int, flops_valid: int, run_seconds: float, peak: DevicePeak) -> dict:
    """result.json's ``compute``: the FLOPs, ``padding_fraction`` = 1 - valid / padded, the peak
    and its source, and ``mfu_hardware`` (padded FLOPs / (run seconds x peak)) and ``mfu_useful``
    (valid FLOPs alike), each None where the peak is not known. Empty without any FLOPs counted."""
    if flops_padded <= 0:
        return {}
    known = peak.flops_per_second is not None and run_seconds > 0
    return {"flops_padded": flops_padded, "flops_valid": flops_valid,
            "padding_fraction": round(1 - flops_valid / flops_padded, 6),
            "peak_flops": peak.flops_per_second, "peak_source": peak.source,
            "mfu_hardware": mfu(flops_padded, run_seconds, peak.flops_per_second) if known else None,
            "mfu_useful": mfu(flops_valid, run_seconds, peak.flops_per_second) if known else None}


def mfu(flops: int, seconds: float, peak_flops: float) -> float:
    """The share of the peak that ``flops`` in ``seconds`` is (the one formula ``check`` re-derives with)."""
    return float(f"{flops / (seconds * peak_flops):.6g}")  # six significant digits: a CPU's MFU can be 1e-6
