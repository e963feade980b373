"""Conformance rule on what a training step does to the weights: the spec's optimizer, its schedule
and its clipping, applied to the reference's gradient.

Why: every setting whose default differs between frameworks is pinned in the workload, and the
log states it; only this rule proves that a backend trains with it. A backend that builds AdaDelta
with its framework's rho and epsilon, or AdamW with another beta2, trains to other weights while
its loss, forward pass and statistics are all right.

How (``optimizer_update``):

1. The gradient: a twin of the backend built with a probe optimizer (``benchbase.optimizers.probe``)
   steps once from known weights, and its weights' change is the gradient it applied. That gradient
   is checked against the family's float64 reference loss by central differences along the
   gradient and two random directions, so that the reference, not the framework, decides it.
2. The update: for every optimizer the backend declares, with settings the kit chooses so that
   each common fault shows (no framework's defaults, a clip below the gradient's norm, a warm-up
   and a decay within the steps, several steps so Adam's second moment counts), the backend takes
   ``STEPS`` steps; before each, the twin probes the gradient at the backend's current weights,
   and the spec's optimizer in float64 (``benchbase.optimizers.reference``, its state carried)
   predicts the weights after it. A mismatch is matched against the common deviations (a
   framework's default, weight decay dropped or coupled, the schedule a step off, the clip
   missing, two updates in one step) and the message names the one that fits.

The bounds: the probe's own float32 roundings, the gradient's (``GRADIENT_ROUNDINGS`` times the
forward pass's relative rounding bound, ``benchbase.numerics.tolerances``) carried through the
optimizer by running it on the gradient moved up and down by that bound, and a few roundings of
the update's float32 arithmetic.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from benchbase.backend import Batch
from benchbase.kit.core import ConformanceFailure, Kit
from benchbase.numerics.tolerances import FLOAT64_UNIT_ROUNDOFF
from benchbase.optimizers.probe import GradientProbe, probe_optimizer, trainable_names
from benchbase.optimizers.reference import ReferenceOptimizer
from benchbase.optimizers.update_check import (
    GRADIENT_ROUNDINGS,
    describe_mismatch,
    describe_optimizer,
    matching_deviation,
    moved_paths,
    update_rounding,
    worst_excess,
)
from benchbase.specs import OptimizerSpec
from benchbase.specs.optimizer import AdaDeltaSpec, AdamWSpec, SGDSpec

__all__ = ["STEPS", "check_optimizer_update", "kit_optimizers"]

RULE = "optimizer_update"
STEPS = 3
"""Enough for a warm-up and a decay to show, and for Adam's second moment (its first step is
invariant to the gradient's scale). Each on the same batch: the weights the steps move change the
gradient enough for every fault to show, and a compiling backend compiles one shape."""
FINITE_DIFFERENCE_STEP = 1e-6
"""The central difference's step per weight, times sqrt(weights) along a unit direction."""
SMALLER_PROBE = 256
"""How much smaller the probe's learning rate is when a failed gradient check looks for a second update."""
Arrays = Mapping[str, np.ndarray]


def kit_optimizers(clip: float) -> list[OptimizerSpec]:
    """One spec per optimizer kind and schedule, with settings no framework defaults to; ``clip``:
    a gradient-norm clip below the first gradient's norm."""
    return [
        AdaDeltaSpec(learning_rate=0.5, rho=0.8, epsilon=1e-5),
        AdamWSpec(learning_rate=1e-2, beta1=0.5, beta2=0.9, epsilon=1e-3, weight_decay=0.5, warmup_steps=2,
                  decay_every_steps=1, decay_factor=0.5, gradient_clip_norm=clip),
        AdamWSpec(learning_rate=1e-2, beta1=0.6, beta2=0.8, epsilon=1e-4, weight_decay=0.2, warmup_steps=1,
                  decay="cosine", decay_steps=3, min_learning_rate=1e-3, gradient_clip_norm=clip),
        SGDSpec(learning_rate=0.05, momentum=0.5, weight_decay=0.1, gradient_clip_norm=clip),
    ]


def check_optimizer_update(kit: Kit) -> str:
    """The probe's gradient against the reference loss, then STEPS steps of every optimizer the
    backend declares against the reference update of it; the note names what was stepped. A
    backend with neither SGD nor AdaDelta has no probe: the rule then passes with a note saying so."""
    declared = kit.backend_class.capabilities.optimizers
    probe_spec = probe_optimizer(declared)
    if probe_spec is None:
        return "not applicable: the backend has neither sgd nor adadelta to read its gradient with"
    weights = kit.parity_weights()
    names = trainable_names(weights, kit.parts.normalization_layers(kit.model))
    relative = GRADIENT_ROUNDINGS * _forward_relative_rounding(kit)
    with kit.backend(optimizer=probe_spec) as twin:
        probe = GradientProbe(twin, probe_spec, names, relative)
        gradient, bound = probe.gradient(weights, kit.data.batches[0])
        _check_gradient(kit, weights, kit.data.batches[0], gradient, bound, relative)
        clip = 0.5 * _norm(gradient)
        checked = []
        for spec in kit_optimizers(clip):
            if spec.name in declared:
                _check_steps(kit, probe, spec, weights)
                checked.append(describe_optimizer(spec))
    return f"{STEPS} steps of {', '.join(checked)}, gradients read with {probe_spec.name}"


# ------------------------------------------------------------------ the gradient against the reference


def _check_gradient(kit: Kit, weights: Arrays, batch: Batch, gradient: Arrays, bound: Arrays,
                    relative: float) -> None:
    """g . d against the reference loss's central difference along d, for d along g and two random
    directions; the bound: the gradient's rounding, the probe's, and the difference's own error
    (estimated as its change between steps h and 2h)."""
    for label, direction in _directions(gradient, kit.seed):
        applied = _dot(gradient, direction)
        step = FINITE_DIFFERENCE_STEP * np.sqrt(sum(value.size for value in gradient.values()))
        near, far = (_central_difference(kit, weights, batch, direction, h) for h in (step, 2 * step))
        allowed = (relative * _dot(gradient, direction, absolute=True) + _dot(bound, direction, absolute=True)
                   + abs(near - far) + 64 * FLOAT64_UNIT_ROUNDOFF * abs(kit.first_step().reference.loss) / step)
        if not abs(applied - near) <= allowed:
            raise ConformanceFailure(RULE, f"the gradient train_step applies is not the reference's: along "
                                     f"{label} it is {applied:.6g}, the {kit.parts.loss_name}'s central difference "
                                     f"{near:.6g} (bound {allowed:.3g}; ratio {applied / near:.4g})"
                                     f"{_ratio_hint(kit, weights, batch, direction, near)}")


def _directions(gradient: Arrays, seed: int) -> list[tuple[str, dict[str, np.ndarray]]]:
    """The gradient's direction and two random ones, each of norm 1."""
    generator = np.random.default_rng(seed + 7)
    directions = [("the gradient's direction", {name: value / _norm(gradient) for name, value in gradient.items()})]
    for index in (1, 2):
        drawn = {name: generator.standard_normal(value.shape) for name, value in gradient.items()}
        directions.append((f"random direction {index}", {name: d / _norm(drawn) for name, d in drawn.items()}))
    return directions


def _dot(arrays: Arrays, direction: Arrays, absolute: bool = False) -> float:
    return sum(float(np.sum(np.abs(arrays[name] * direction[name]) if absolute else arrays[name] * direction[name]))
               for name in direction)


def _ratio_hint(kit: Kit, weights: Arrays, batch: Batch, direction: Arrays, reference: float) -> str:
    """Names two updates in one step: the gradient read off a step then tends to twice the
    reference's as the probe's learning rate shrinks (the second update starts closer to the first)."""
    probe_spec = probe_optimizer(kit.backend_class.capabilities.optimizers)
    assert probe_spec is not None
    smaller = probe_spec.model_copy(update={"learning_rate": probe_spec.learning_rate / SMALLER_PROBE})
    with kit.backend(optimizer=smaller) as twin:
        gradient, _ = GradientProbe(twin, smaller, list(direction), 0.0).gradient(weights, batch)
    ratio = _dot(gradient, direction) / reference
    if abs(ratio - 2) < 0.05:
        return (f"; at a {SMALLER_PROBE} times smaller learning rate the ratio is {ratio:.4g}: two updates in one "
                "step")
    return ": the opposite sign (a step up the loss)" if ratio < 0 else ""


def _central_difference(kit: Kit, weights: Arrays, batch: Batch, direction: Arrays, step: float) -> float:
    def loss(sign: float) -> float:
        moved = {name: np.asarray(value, np.float64) + sign * step * direction[name] if name in direction
                 else np.asarray(value, np.float64) for name, value in weights.items()}
        return _reference_loss(kit, moved, batch)

    return (loss(1.0) - loss(-1.0)) / (2 * step)


def _reference_loss(kit: Kit, weights: Arrays, batch: Batch) -> float:
    loss = getattr(kit.parts, "reference_loss", None)
    if loss is None:  # optional: one pass per rounding draw instead of one
        return kit.parts.reference_step(weights, kit.model, batch).loss
    return float(loss(weights, kit.model, batch))


def _forward_relative_rounding(kit: Kit) -> float:
    reference = kit.first_step().reference
    return reference.loss_bound / max(abs(reference.loss), np.finfo(np.float64).tiny)


# ------------------------------------------------------------------ the update against the spec's optimizer


def _check_steps(kit: Kit, probe: GradientProbe, spec: OptimizerSpec, initial: Arrays) -> None:
    """STEPS steps of a backend built with ``spec`` against the reference optimizer, from ``initial``."""
    exact, moved = ReferenceOptimizer(spec), [ReferenceOptimizer(spec)]
    history: list[tuple[Arrays, Arrays, Arrays, Arrays]] = []
    with kit.backend(optimizer=spec) as backend:
        backend.import_weights(initial)
        for step in range(STEPS):
            batch = kit.data.batches[0]  # one shape: a compiling backend compiles once per build
            before = backend.export_weights()
            gradient, bound = probe.gradient(before, batch)
            expected = exact.step(before, gradient)
            moved, movement = moved_paths(moved, before, gradient, bound, expected)
            backend.train_step(batch)
            after = backend.export_weights()
            allowed = {name: update_rounding(before[name], expected[name]) + movement[name] for name in expected}
            history.append((before, gradient, bound, after))
            excess = worst_excess(after, expected, allowed)
            if excess[0] > 1:
                raise ConformanceFailure(RULE, describe_mismatch(spec, step, after, expected, allowed, excess,
                                                                  matching_deviation(spec, history)))


def _norm(arrays: Arrays) -> float:
    return float(np.sqrt(sum(float(np.sum(np.square(value))) for value in arrays.values())))
