"""What predict() must return, for any family: a float32 (batch, frames, width) array, finite on
every valid frame, and a log-softmax there where the family's outputs are log-probabilities."""

from __future__ import annotations

import numpy as np

from benchbase.backend import Inputs
from benchbase.kit.core import ConformanceFailure, Kit, describe_difference
from benchbase.numerics.tolerances import ELEMENTWISE_ULPS, FLOAT32_UNIT_ROUNDOFF, accumulation_bound

__all__ = ["check_outputs", "normalization_bound", "valid_frames"]


def check_outputs(rule: str, result: object, inputs: Inputs, kit: Kit) -> np.ndarray:
    """predict()'s result has the contract's and the family's form (``FamilyParts.output_width``,
    ``log_probability_outputs``); returns it."""
    parts = kit.parts
    what, width = parts.outputs_name, parts.output_width(kit.model)
    if isinstance(result, tuple):
        raise ConformanceFailure(rule, "predict() returned a tuple, as backend contract 2 did; contract 3 returns "
                                 f"the {what} only (the output lengths are the harness's)")
    longest = int(inputs.output_lengths.max(initial=0))
    if not isinstance(result, np.ndarray) or result.dtype != np.float32 or result.ndim != 3 \
            or result.shape[0] != inputs.size or result.shape[1] < longest or result.shape[2] != width:
        found = f"{type(result).__name__} {getattr(result, 'dtype', '?')} {getattr(result, 'shape', '?')}"
        raise ConformanceFailure(rule, f"predict() returned {found}, expected the {what}: float32 numpy "
                                 f"({inputs.size}, at least {longest} frames, {width})")
    if not np.isfinite(result[:, :longest][valid_frames(inputs, longest)[:, :, 0]]).all():
        raise ConformanceFailure(rule, f"the {what} hold NaN or infinite values on valid frames")
    if parts.log_probability_outputs:
        _check_normalized(rule, result, inputs)
    return result


def valid_frames(inputs: Inputs, frames: int) -> np.ndarray:
    """(batch, frames, 1): True on each utterance's output frames, False on padding."""
    return (np.arange(frames)[None, :] < inputs.output_lengths[:, None])[:, :, None]


def _check_normalized(rule: str, log_probs: np.ndarray, inputs: Inputs) -> None:
    frames = int(inputs.output_lengths.max(initial=0))
    mask = valid_frames(inputs, frames)[:, :, 0]
    values = log_probs[:, :frames].astype(np.float64)
    totals = np.log(np.exp(values).sum(axis=-1))
    worst, where = describe_difference(totals, np.zeros_like(totals), mask)
    allowed = normalization_bound(values[mask])
    if worst > allowed:
        raise ConformanceFailure(rule, f"a valid frame's probabilities do not sum to one: logsumexp is off by "
                                 f"{worst:.3g} {where} [row, frame] (float32 rounding bound {allowed:.3g}); "
                                 "expected a log-softmax over the symbols")


def normalization_bound(log_probs: np.ndarray) -> float:
    """How far from 0 a float32 log-softmax's logsumexp may land: each log-probability carries
    a few roundings of the largest magnitude in its frame (the shift by the maximum, the exp,
    the log of the sum), the sum over the symbols gamma_S, and the log one more."""
    largest = float(np.abs(log_probs).max()) if log_probs.size else 0.0
    roundings = (ELEMENTWISE_ULPS + 2) * FLOAT32_UNIT_ROUNDOFF * largest
    return roundings + accumulation_bound(log_probs.shape[-1]) + ELEMENTWISE_ULPS * FLOAT32_UNIT_ROUNDOFF
