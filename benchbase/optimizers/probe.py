"""The gradient a backend's training step applies, read off one step of a plain optimizer.

A backend exposes weights, not gradients. Built with a probe optimizer whose step is an
invertible function of the gradient and stepped from known weights, it gives the gradient as the
weights' change over the learning rate: plain SGD ((w - w') / lr = g) where the backend has SGD,
else AdaDelta in a regime where it is nearly the identity (rho 1 - 2^-20, eps 2^-7: the first
update is g sqrt(eps / ((1 - rho) g^2 + eps)), within 1% of g up to |g| = 12; later ones depend on
the state the earlier ones left, which the probe follows), inverted exactly here. Every backend
has AdaDelta unless it declares otherwise (``Capabilities.optimizers``). The probe optimizer
decides nothing: the gradient it gives is checked against the family's float64 reference loss
(the kit's ``optimizer_update`` rule), and an optimizer that ignores the probe's settings shows there.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING

import numpy as np

from benchbase.numerics.tolerances import FLOAT32_UNIT_ROUNDOFF
from benchbase.specs import OptimizerSpec
from benchbase.specs.optimizer import AdaDeltaSpec, SGDSpec

if TYPE_CHECKING:
    from benchbase.backend import Backend, Batch

__all__ = ["PROBE_ROUNDINGS", "GradientProbe", "probe_optimizer", "trainable_names"]

PROBE_LEARNING_RATE = 2.0**-8
"""Small, so that a second update in the same step lands near the first one's double (and shows
as a gradient twice the reference's), and a power of two, so that dividing by it is exact."""
PROBE_ADADELTA = AdaDeltaSpec(learning_rate=PROBE_LEARNING_RATE, rho=1 - 2.0**-20, epsilon=2.0**-7)
"""rho and eps are float32 numbers: the backend's float32 copies of them are exact."""
PROBE_SGD = SGDSpec(learning_rate=PROBE_LEARNING_RATE)
PROBE_ROUNDINGS = 4
"""Float32 roundings in a probe step's weights: the gradient's store, the update's product and
sum, the weight's store (and AdaDelta's few more, each relative to the update, counted again)."""


def probe_optimizer(optimizers: Collection[str]) -> OptimizerSpec | None:
    """The probe for a backend declaring ``optimizers``: SGD, else AdaDelta; None without either."""
    if "sgd" in optimizers:
        return PROBE_SGD
    if "adadelta" in optimizers:
        return PROBE_ADADELTA
    return None


def trainable_names(weights: Mapping[str, np.ndarray], normalization_layers: list[str]) -> list[str]:
    """The weights an optimizer updates: all but the running statistics a training pass leaves."""
    running = {f"{layer}.{stat}" for layer in normalization_layers for stat in ("mean", "variance")}
    return [name for name in weights if name not in running]


class GradientProbe:
    """A backend built with a probe optimizer (its twin), and what its steps so far left in its
    optimizer's state: ``gradient`` reads the gradient of one training step at given weights."""

    def __init__(self, twin: Backend, spec: OptimizerSpec, names: list[str], relative_rounding: float) -> None:
        self.twin, self.spec, self.names = twin, spec, names
        self.relative_rounding = relative_rounding
        """The gradient's own rounding, relative to its largest element in a weight: two float32
        computations of it (the twin's and the backend's) may differ by this much."""
        self.state: dict[str, dict[str, np.ndarray]] = {}

    def gradient(self, weights: Mapping[str, np.ndarray], batch: Batch
                 ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        """(the gradient a training step on ``batch`` applies at ``weights``, float64, by trainable
        name; elementwise, how far it may lie from the backend's own)."""
        self.twin.import_weights(weights)
        self.twin.train_step(batch)
        after = self.twin.export_weights()
        gradients, bounds = {}, {}
        for name in self.names:
            old, new = np.asarray(weights[name], np.float64), np.asarray(after[name], np.float64)
            update = (old - new) / self.spec.learning_rate
            rounding = PROBE_ROUNDINGS * FLOAT32_UNIT_ROUNDOFF * ((np.abs(old) + np.abs(new)) / self.spec.learning_rate
                                                                  + np.abs(update))
            gradient, stretch = self._inverted(name, update)
            own = self.relative_rounding * float(np.max(np.abs(gradient), initial=0.0))
            gradients[name], bounds[name] = gradient, 2 * rounding * stretch**3 + own
        return gradients, bounds

    def _inverted(self, name: str, update: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(the gradient that made ``update``, d gradient / d update); AdaDelta's state advanced."""
        if not isinstance(self.spec, AdaDeltaSpec):
            return update, np.ones_like(update)
        # update = g sqrt(acc + eps) / sqrt(rho sq + (1 - rho) g^2 + eps), solved for g.
        rho, eps = self.spec.rho, self.spec.epsilon
        state = self.state.setdefault(name, {"square": np.zeros_like(update), "delta": np.zeros_like(update)})
        room = state["delta"] + eps - (1 - rho) * update * update
        with np.errstate(divide="ignore", invalid="ignore"):
            stretch = np.where(room > 0, np.sqrt((rho * state["square"] + eps) / np.maximum(room, 1e-300)), np.inf)
        gradient = update * stretch
        state["square"] = rho * state["square"] + (1 - rho) * gradient * gradient
        state["delta"] = rho * state["delta"] + (1 - rho) * update * update
        return gradient, stretch
