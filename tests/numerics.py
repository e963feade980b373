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
from benchbase.numerics.tolerances import BOTH_SIDES, after_steps
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


def half_outputs_against_bounds(weights, model: ModelSpec, inputs: Inputs, found: np.ndarray,
                                precision: str = "bf16") -> tuple[float, float, float]:
    """(float32's largest one-side bound, the largest difference, the half precision's largest
    both-sides bound) of ``found`` outputs in ``precision`` ("bf16", "fp16" or "tf32", whose operands
    round at the harness's ``OPERAND_ROUNDOFF``) against the float64 reference's, on the valid frames,
    for any family through its parts (``benchbase.families.parts.family_parts``: DS2's
    log-probabilities, the transducer's encoder projections). A half precision lands between the
    first and the last: visibly not float32, within its own rounding (both sides: which operands a
    framework narrows is its own choice)."""
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


def predict_then_train(backend_class, data, weights, precision: str, device: str = "cpu", steps: int = 3
                       ) -> tuple[np.ndarray, tuple[str, ...]]:
    """(predict() of ``data``'s first batch, the devices it ran on) of ``backend_class`` built for the
    kit's ``data`` in ``precision`` on ``device`` at ``weights``; the backend then trains ``steps``
    steps, which must be finite and leave every weight float32 (the master weights of a mixed
    precision)."""
    from benchbase.kit.core import Kit
    from benchbase.kit.int8 import in_precision

    with Kit(backend_class, data, device=device).backend(model=in_precision(data.model, precision)) as backend:
        backend.import_weights(weights)
        found = backend.predict(data.batches[0].inputs())
        devices = backend.devices_in_use()
        losses = [backend.train_step(data.batches[step % 3]) for step in range(steps)]
        after = backend.export_weights()
    assert found.dtype == np.float32 and all(np.isfinite(losses)), losses
    assert all(value.dtype == np.float32 for value in after.values())
    return found, devices
