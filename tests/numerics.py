"""The tests' numerical comparisons, with bounds from benchbase.numerics.tolerances' error model.

Every helper here compares two computations of the same mathematics and takes its bound from
the error model: the float64 reference's elementwise rounding bound of the forward pass or the
loss at the weights in question, for one float32 side (against the reference) or both
(``BOTH_SIDES``: two backends, two kernels), compounded over optimizer steps
(``after_steps``) where the two sides trained.
"""

from __future__ import annotations

import numpy as np

from benchbase.backend import Batch, Inputs
from benchbase.families.ds2.reference import bounded_reference, bounded_step
from benchbase.kit.outputs import normalization_bound
from benchbase.numerics.tolerances import BFLOAT16_UNIT_ROUNDOFF, BOTH_SIDES, after_steps
from benchbase.specs import ModelSpec


def log_probs_bound(weights, model: ModelSpec, inputs: Inputs, sides: int = BOTH_SIDES,
                    steps: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(elementwise bound, valid-frame mask) of a forward pass at ``weights`` (inference mode)."""
    model = model.model_copy(update={"dropout": 0.0})
    reference = bounded_reference(weights, model, inputs.features, inputs.feature_lengths, training=False)
    frames = reference.log_probs.shape[1]
    mask = np.broadcast_to((np.arange(frames)[None, :] < inputs.output_lengths[:, None])[..., None],
                           reference.log_probs.shape)
    return after_steps(sides * reference.log_probs_bound, steps), mask


def assert_log_probs_agree(found: np.ndarray, expected: np.ndarray, weights, model: ModelSpec, inputs: Inputs,
                           sides: int = BOTH_SIDES, steps: int = 0) -> None:
    """``found`` and ``expected`` within the rounding bound of the forward pass at ``weights``, on every valid frame."""
    bound, mask = log_probs_bound(weights, model, inputs, sides, steps)
    frames = bound.shape[1]
    difference = np.abs(np.asarray(found, np.float64)[:, :frames] - np.asarray(expected, np.float64)[:, :frames])
    excess = np.where(mask, difference - bound, -np.inf)
    assert (excess <= 0).all(), f"off by {difference[mask].max():.3g}; bound there {bound.flat[np.argmax(excess)]:.3g}"


def relative_loss_bound(weights, model: ModelSpec, batch: Batch, sides: int = BOTH_SIDES) -> float:
    """Rounding bound of a training step's loss at ``weights``, relative to the loss."""
    step = bounded_step(weights, model.model_copy(update={"dropout": 0.0}), batch)
    return sides * step.loss_bound / abs(step.loss)


def assert_losses_agree(found, expected, first_bound: float) -> None:
    """Step k's losses within the first step's relative bound compounded over k steps."""
    found, expected = np.asarray(found, np.float64), np.asarray(expected, np.float64)
    relative = np.abs(found - expected) / np.abs(expected)
    allowed = np.array([after_steps(first_bound, step) for step in range(len(relative))])
    assert (relative <= allowed).all(), (relative.tolist(), allowed.tolist())


def assert_normalized(log_probs: np.ndarray) -> None:
    """Each frame's probabilities sum to one within a float32 log-softmax's rounding."""
    totals = np.log(np.exp(np.asarray(log_probs, np.float64)).sum(-1))
    assert np.abs(totals).max() <= normalization_bound(log_probs), np.abs(totals).max()


def bf16_log_probs_against_bounds(weights, model: ModelSpec, inputs: Inputs, found: np.ndarray
                                  ) -> tuple[float, float, float]:
    """(float32's largest one-side bound, the largest difference, bfloat16's largest both-sides bound)
    of bf16 ``found`` log-probabilities against the float32 reference on the valid frames. bf16 lands
    between the first and the last: visibly not float32, within bfloat16's rounding (both sides:
    which operands a framework narrows is its own choice)."""
    float32_bound, mask = log_probs_bound(weights, model, inputs, sides=1)
    bf16 = bounded_reference(weights, model.model_copy(update={"dropout": 0.0}), inputs.features,
                             inputs.feature_lengths, training=False, operand_roundoff=BFLOAT16_UNIT_ROUNDOFF)
    expected = bf16.log_probs  # the exact outputs: the operand roundings move only the bound
    difference = np.abs(found[:, : expected.shape[1]] - expected)[mask]
    bf16_bound = BOTH_SIDES * bf16.log_probs_bound[mask].max()
    return float(float32_bound[mask].max()), float(difference.max()), float(bf16_bound)


def half_outputs_against_bounds(weights, model: ModelSpec, inputs: Inputs, found: np.ndarray,
                                precision: str = "bf16") -> tuple[float, float, float]:
    """As ``bf16_log_probs_against_bounds``, for any family through its parts
    (``benchbase.families.parts.family_parts``: the transducer's encoder projections, say) and either
    half precision (``precision``: "bf16" or "fp16", whose operands round at the harness's
    ``OPERAND_ROUNDOFF``): float32's largest one-side bound, the largest difference, the half
    precision's largest both-sides bound of ``found`` against the reference's outputs on the valid
    frames."""
    from benchbase.families.agreement import OPERAND_ROUNDOFF
    from benchbase.families.parts import family_parts
    from benchbase.numerics.tolerances import INJECTION_DRAWS

    parts, model = family_parts(model), model.model_copy(update={"dropout": 0.0, "precision": "fp32"})
    exact, float32_bound = parts.bounded_outputs(weights, model, inputs.features, inputs.feature_lengths,
                                                 operand_roundoff=0.0, draws=INJECTION_DRAWS)
    _, half_bound = parts.bounded_outputs(weights, model, inputs.features, inputs.feature_lengths,
                                          operand_roundoff=OPERAND_ROUNDOFF[precision], draws=INJECTION_DRAWS)
    valid = np.arange(exact.shape[1])[None, :] < inputs.output_lengths[:, None]
    difference = np.abs(np.asarray(found, np.float64)[:, : exact.shape[1]] - exact)[valid]
    return float(float32_bound[valid].max()), float(difference.max()), float(BOTH_SIDES * half_bound[valid].max())
