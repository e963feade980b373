"""The spec's optimizer in float64 NumPy: the update every backend's step must make.

Each formula is the one ``benchbase.specs.optimizer`` states, in PyTorch's convention where
frameworks differ in form but not in value:

- clipping: every gradient scaled by clip / max(norm, clip), the norm over all trainable
  weights together (optax's and TensorFlow's form; PyTorch's adds 1e-6 to the norm, a relative
  difference of 1e-6 / norm, inside the kit's bound for the gradient);
- AdaDelta: sq = rho sq + (1 - rho) g^2; delta = sqrt(acc + eps) / sqrt(sq + eps) g;
  acc = rho acc + (1 - rho) delta^2; w -= lr delta;
- AdamW: w -= lr weight_decay w (decoupled), then Adam's bias-corrected step with epsilon added
  to the square root of the corrected second moment;
- SGD: g += weight_decay w (L2), buffer = momentum buffer + g (the first buffer is g), w -= lr buffer.

The learning rate of a step is ``learning_rate_at`` of the steps taken before it. A
``Deviation`` is the same optimizer with one thing changed as backends commonly change it, so
that a backend's weights can be matched against each and the mismatch named.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from benchbase.specs import OptimizerSpec
from benchbase.specs.optimizer import AdaDeltaSpec, AdamWSpec, SGDSpec

__all__ = ["Deviation", "ReferenceOptimizer", "deviations"]

Arrays = Mapping[str, np.ndarray]


@dataclass(frozen=True)
class Deviation:
    """How a backend's optimizer may differ from the spec's: the setting named in a failure."""

    setting: str
    """What differs, as a failure message names it ("beta2 0.999 instead of 0.9")."""
    spec: OptimizerSpec
    schedule_offset: int = 0
    """The learning rate of step s taken at step s + offset."""
    coupled_decay: bool = False
    """AdamW's weight decay added to the gradient (Adam's L2) instead of to the weights."""
    updates_per_step: int = 1


@dataclass
class ReferenceOptimizer:
    """The spec's optimizer with its state, float64; ``step`` takes the weights before a step and
    the gradient the step applies and returns the weights after it."""

    spec: OptimizerSpec
    deviation: Deviation | None = None
    steps: int = 0
    """Training steps taken (the schedule's count)."""
    updates: int = 0
    """Optimizer updates made (Adam's bias correction counts these)."""
    state: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)

    def step(self, weights: Arrays, gradients: Arrays) -> dict[str, np.ndarray]:
        """The weights after one training step (only those ``gradients`` names)."""
        spec = self.deviation.spec if self.deviation else self.spec
        offset = self.deviation.schedule_offset if self.deviation else 0
        learning_rate = spec.learning_rate_at(max(self.steps + offset, 0))
        gradients = clipped({name: np.asarray(g, np.float64) for name, g in gradients.items()},
                            spec.gradient_clip_norm)
        new = {name: np.asarray(weights[name], np.float64) for name in gradients}
        for _ in range(self.deviation.updates_per_step if self.deviation else 1):
            self.updates += 1
            new = {name: self._update(spec, name, new[name], gradients[name], learning_rate) for name in new}
        self.steps += 1
        return new

    def _update(self, spec: OptimizerSpec, name: str, w: np.ndarray, g: np.ndarray, rate: float) -> np.ndarray:
        state = self.state.setdefault(name, {})
        if isinstance(spec, AdaDeltaSpec):
            return w - rate * _adadelta(spec, state, g)
        if isinstance(spec, AdamWSpec):
            if self.deviation is not None and self.deviation.coupled_decay:
                return w - rate * _adam(spec, state, g + spec.weight_decay * w, self.updates)
            return w - rate * spec.weight_decay * w - rate * _adam(spec, state, g, self.updates)
        if isinstance(spec, SGDSpec):
            return w - rate * _momentum(spec, state, g + spec.weight_decay * w)
        raise ValueError(f"no reference for the optimizer {spec.name!r}")


def clipped(gradients: dict[str, np.ndarray], clip: float | None) -> dict[str, np.ndarray]:
    """``gradients`` scaled to a global norm of at most ``clip`` (None: as they are)."""
    if clip is None:
        return gradients
    norm = float(np.sqrt(sum(float(np.sum(g * g)) for g in gradients.values())))
    scale = clip / max(norm, clip)
    return {name: g * scale for name, g in gradients.items()}


def _adadelta(spec: AdaDeltaSpec, state: dict[str, np.ndarray], g: np.ndarray) -> np.ndarray:
    square = spec.rho * state.get("square", 0.0) + (1 - spec.rho) * g * g
    delta = np.sqrt(state.get("delta", 0.0) + spec.epsilon) / np.sqrt(square + spec.epsilon) * g
    state["square"], state["delta"] = square, spec.rho * state.get("delta", 0.0) + (1 - spec.rho) * delta * delta
    return delta


def _adam(spec: AdamWSpec, state: dict[str, np.ndarray], g: np.ndarray, updates: int) -> np.ndarray:
    first = spec.beta1 * state.get("first", 0.0) + (1 - spec.beta1) * g
    second = spec.beta2 * state.get("second", 0.0) + (1 - spec.beta2) * g * g
    state["first"], state["second"] = first, second
    corrected_first = first / (1 - spec.beta1**updates)
    return corrected_first / (np.sqrt(second / (1 - spec.beta2**updates)) + spec.epsilon)


def _momentum(spec: SGDSpec, state: dict[str, np.ndarray], g: np.ndarray) -> np.ndarray:
    buffer = g if "buffer" not in state or not spec.momentum else spec.momentum * state["buffer"] + g
    state["buffer"] = buffer
    return buffer


# ------------------------------------------------------------------ what backends commonly get wrong


def deviations(spec: OptimizerSpec) -> list[Deviation]:
    """The common ways a backend's optimizer differs from ``spec``: each framework's default for a
    setting the spec pins, weight decay dropped or coupled, the schedule a step off, the clip
    missing, two updates in one step."""
    found = [Deviation(f"{setting} {value:g} instead of the spec's {getattr(spec, setting):g} ({whose})",
                       spec.model_copy(update={setting: value}))
             for setting, value, whose in _DEFAULTS.get(spec.name, ()) if getattr(spec, setting) != value]
    found += [Deviation(f"{whose} ({', '.join(f'{k} {v:g}' for k, v in values.items())}) instead of the spec's",
                        spec.model_copy(update=values))
              for whose, values in _DEFAULT_SETS.get(spec.name, ()) if spec.model_copy(update=values) != spec]
    if getattr(spec, "weight_decay", 0.0):
        found.append(Deviation("no weight decay", spec.model_copy(update={"weight_decay": 0.0})))
    if isinstance(spec, AdamWSpec) and spec.weight_decay:
        found.append(Deviation("weight decay coupled (Adam's L2 on the gradient, not AdamW's decoupled decay)",
                               spec, coupled_decay=True))
    if type(spec).learning_rate_at is not OptimizerSpec.learning_rate_at:
        found += [Deviation(f"the learning-rate schedule one step {word} (learning_rate_at of step s {sign} 1)",
                            spec, schedule_offset=offset) for offset, word, sign in ((1, "ahead", "+"),
                                                                                    (-1, "behind", "-"))]
    if spec.gradient_clip_norm is not None:
        found.append(Deviation(f"no gradient clipping (the spec clips at {spec.gradient_clip_norm:.4g})",
                               spec.model_copy(update={"gradient_clip_norm": None})))
    found.append(Deviation("two optimizer updates in one step", spec, updates_per_step=2))
    return found


_DEFAULTS: dict[str, tuple[tuple[str, float, str], ...]] = {
    "adadelta": (("rho", 0.9, "PyTorch's default"), ("rho", 0.95, "Keras's default"),
                 ("epsilon", 1e-6, "PyTorch's default"), ("epsilon", 1e-7, "Keras's default"),
                 ("learning_rate", 1.0, "PyTorch's default"), ("learning_rate", 0.001, "Keras's default")),
    "adamw": (("beta1", 0.9, "the frameworks' default"), ("beta2", 0.999, "the frameworks' default"),
              ("epsilon", 1e-8, "PyTorch's and optax's default"), ("epsilon", 1e-7, "Keras's default"),
              ("weight_decay", 0.01, "PyTorch's default"), ("weight_decay", 0.004, "Keras's default")),
    "sgd": (("momentum", 0.0, "the frameworks' default"), ("momentum", 0.9, "a common choice")),
}
"""Per optimizer: (setting, a framework's default for it, whose)."""
_DEFAULT_SETS: dict[str, tuple[tuple[str, dict[str, float]], ...]] = {
    "adadelta": (("PyTorch's defaults", {"rho": 0.9, "epsilon": 1e-6}),
                 ("Keras's defaults", {"rho": 0.95, "epsilon": 1e-7})),
    "adamw": (("the frameworks' defaults", {"beta1": 0.9, "beta2": 0.999}),),
}
"""Per optimizer: a framework's defaults for several settings at once (a backend that ignores the spec)."""
