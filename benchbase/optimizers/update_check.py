"""A training step's update against the spec's optimizer in float64: what the conformance kit's
``optimizer_update`` rule and a run's replay of its first step (``benchbase.harness.optimizer_replay``)
both compare, with the bounds both use.

The bound of one step: a few float32 roundings of the update's arithmetic, plus how far the
reference optimizer lands when fed the gradient moved up and down by the gradient's own bound at
every step so far. A mismatch is matched against the common deviations
(``benchbase.optimizers.reference.deviations``), and the message names the one that fits.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping

import numpy as np

from benchbase.numerics.tolerances import DETERMINISTIC_ULPS, FLOAT32_UNIT_ROUNDOFF
from benchbase.optimizers.reference import Deviation, ReferenceOptimizer, deviations
from benchbase.specs import OptimizerSpec
from benchbase.specs.optimizer import AdamWSpec

__all__ = ["GRADIENT_ROUNDINGS", "describe_mismatch", "describe_optimizer", "matching_deviation", "moved_paths",
           "replayed_update", "update_rounding", "worst_excess"]

Arrays = Mapping[str, np.ndarray]
GRADIENT_ROUNDINGS = 3
"""A gradient's relative rounding, in units of the forward pass's: the forward pass and a backward
pass of about twice its operations, through the same Jacobians."""


def replayed_update(spec: OptimizerSpec, before: Arrays, gradient: Arrays, bound: Arrays, after: Arrays
                    ) -> tuple[float, str | None, bool]:
    """A backend's first step of ``spec`` (its state empty) against the reference's update of
    ``gradient``: (the worst |found - expected| / bound; None within the bound, else the mismatch
    described, naming the deviation that fits; whether one fits): the run's replay of its first step."""
    expected = ReferenceOptimizer(spec).step(before, gradient)
    _, movement = moved_paths([ReferenceOptimizer(spec)], before, gradient, bound, expected)
    allowed = {name: update_rounding(before[name], expected[name]) + movement[name] for name in expected}
    excess = worst_excess(after, expected, allowed)
    if excess[0] <= 1:
        return excess[0], None, False
    deviation = matching_deviation(spec, [(before, gradient, bound, after)])
    return excess[0], describe_mismatch(spec, 0, after, expected, allowed, excess, deviation), deviation is not None


def moved_paths(paths: list[ReferenceOptimizer], before: Arrays, gradient: Arrays, bound: Arrays,
                 expected: Arrays) -> tuple[list[ReferenceOptimizer], dict[str, np.ndarray]]:
    """Each path of the reference optimizer fed the gradient moved up, then down, by its bound at every
    step so far (every sign sequence: an error of one sign at one step and of the other at the next
    moves a moment estimate most), and elementwise the farthest any lands from ``expected``."""
    forked, movement = [], {name: np.zeros(np.shape(value)) for name, value in expected.items()}
    for path in paths:
        for sign in (1.0, -1.0):
            fork = copy.deepcopy(path)
            landed = fork.step(before, {name: gradient[name] + sign * bound[name] for name in gradient})
            movement = {name: np.maximum(movement[name], np.abs(landed[name] - expected[name])) for name in movement}
            forked.append(fork)
    return forked, movement


def update_rounding(before: np.ndarray, expected: np.ndarray) -> np.ndarray:
    """The update's float32 arithmetic: a handful of roundings of the weights and the update."""
    before = np.asarray(before, np.float64)
    return DETERMINISTIC_ULPS * FLOAT32_UNIT_ROUNDOFF * (np.abs(before) + np.abs(expected - before))


def worst_excess(after: Arrays, expected: Arrays, allowed: Arrays) -> tuple[float, str, tuple[int, ...]]:
    """(the largest |found - expected| / bound, where) over every trainable weight."""
    worst: tuple[float, str, tuple[int, ...]] = (0.0, "", ())
    for name in expected:
        ratio = np.abs(np.asarray(after[name], np.float64) - expected[name]) / np.maximum(
            allowed[name], np.finfo(np.float64).tiny)
        if ratio.size and float(ratio.max()) > worst[0]:
            worst = (float(ratio.max()), name, tuple(int(i) for i in np.unravel_index(int(ratio.argmax()),
                                                                                        ratio.shape)))
    return worst


def matching_deviation(spec: OptimizerSpec, history: list[tuple[Arrays, Arrays, Arrays, Arrays]]
                        ) -> Deviation | None:
    """The first common deviation whose reference the backend's steps so far fit, each within the
    deviation's own bound (its sensitivity to the gradient's error is its own)."""
    for deviation in deviations(spec):
        exact, moved = ReferenceOptimizer(spec, deviation), [ReferenceOptimizer(spec, deviation)]
        for before, gradient, bound, after in history:
            predicted = exact.step(before, gradient)
            moved, movement = moved_paths(moved, before, gradient, bound, predicted)
            allowed = {name: update_rounding(before[name], predicted[name]) + movement[name] for name in predicted}
            if worst_excess(after, predicted, allowed)[0] > 1:
                break
        else:
            return deviation
    return None


def describe_mismatch(spec, step, after, expected, allowed, excess, deviation: Deviation | None) -> str:
    _, name, where = excess
    found, wanted, bound = (float(np.asarray(array[name])[where]) for array in (after, expected, allowed))
    diagnosis = (f"it trains with {deviation.setting}" if deviation
                 else "it matches none of the common deviations (a framework's default, weight decay dropped or "
                 "coupled, the schedule a step off, the clip missing, two updates in one step)")
    return (f"{describe_optimizer(spec)}: after step {step + 1}, {name}{list(where)} is {found:.7g}, the spec's "
            f"update of the reference's gradient gives {wanted:.7g} (bound {bound:.3g}, learning rate "
            f"{spec.learning_rate_at(step):.4g}): {diagnosis}")


def describe_optimizer(spec: OptimizerSpec) -> str:
    schedule = f" ({spec.decay} decay)" if isinstance(spec, AdamWSpec) else ""
    return f"{spec.name}{schedule}"
