"""OptimizerSpec: the optimizer a workload pins, one spec class per optimizer, chosen by ``name``.

AdaDelta is the paper's (DS2); AdamW with MLPerf RNN-T's warm-up, hold and exponential decay of
the learning rate is the transducer family's, and AdamW with AlgoPerf's warm-up and cosine decay the
Conformer's. Every setting whose default differs between
frameworks is a field, and the learning rate's schedule is one formula here
(``learning_rate_at``) that every backend evaluates, so no framework's scheduler decides it.
"""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import Field, model_validator

from benchbase.specs._base import Spec

__all__ = ["OPTIMIZER_NAMES", "AdaDeltaSpec", "AdamWSpec", "OptimizerSpec", "SGDSpec", "validate_optimizer"]


class OptimizerSpec(Spec):
    """What every optimizer's spec has; a workload's ``optimizer`` is one of its subclasses."""

    name: str = Field(description="Optimizer: adadelta (the paper's) or adamw (MLPerf RNN-T's schedule).")
    learning_rate: float = Field(1.0, gt=0.0, le=100.0, description="Base learning rate.")
    gradient_clip_norm: float | None = Field(None, gt=0.0, le=1e6, description="Global gradient-norm clip, or none.")

    def learning_rate_at(self, step: int) -> float:
        """The learning rate of the 0-based optimizer step ``step``: constant unless a subclass schedules it."""
        return self.learning_rate


class AdaDeltaSpec(OptimizerSpec):
    name: Literal["adadelta"] = Field("adadelta", description="Optimizer (the paper uses AdaDelta).")
    learning_rate: float = Field(
        1.0, gt=0.0, le=100.0, description="AdaDelta learning rate (PyTorch 1.0, Keras 0.001).")
    rho: float = Field(0.95, gt=0.0, lt=1.0, description="AdaDelta decay rate (PyTorch 0.9, Keras 0.95).")
    epsilon: float = Field(1e-8, gt=0.0, le=1e-2, description="AdaDelta epsilon (PyTorch 1e-6, Keras 1e-7).")


class AdamWSpec(OptimizerSpec):
    """Adam with decoupled weight decay under a schedule of three phases: linear warm-up from zero,
    a hold at the base rate, then a decay to a floor, either exponential (MLPerf RNN-T's) or a
    half cosine over a fixed number of steps (AlgoPerf's ``optax.cosine_decay_schedule``)."""

    name: Literal["adamw"] = Field("adamw", description="Adam with decoupled weight decay (Loshchilov & Hutter).")
    learning_rate: float = Field(1e-3, gt=0.0, le=10.0, description="Base (peak) learning rate.")
    beta1: float = Field(0.9, ge=0.0, lt=1.0, description="First-moment decay (every framework's default).")
    beta2: float = Field(0.999, ge=0.0, lt=1.0, description="Second-moment decay (every framework's default).")
    epsilon: float = Field(
        1e-8, gt=0.0, le=1e-2,
        description="Added to the second moment's square root (PyTorch 1e-8, Keras 1e-7, optax 1e-8).")
    weight_decay: float = Field(
        0.0, ge=0.0, le=1.0,
        description="Decoupled weight decay, multiplied by the step's learning rate (PyTorch's AdamW, "
        "optax.adamw; Keras's AdamW the same); applied to every weight matrix and bias alike.")
    warmup_steps: int = Field(
        0, ge=0, le=10_000_000,
        description="Steps of linear warm-up: step s uses learning_rate * (s + 1) / warmup_steps.")
    hold_steps: int = Field(0, ge=0, le=10_000_000, description="Steps at the base rate after the warm-up.")
    decay_every_steps: int = Field(
        1000, ge=1, le=10_000_000,
        description="After warm-up and hold the rate is learning_rate * decay_factor ** (steps since / this), "
        "continuously (MLPerf RNN-T decays per epoch; a workload states its epoch in steps).")
    decay_factor: float = Field(1.0, gt=0.0, le=1.0, description="Decay per decay_every_steps; 1: no decay.")
    min_learning_rate: float = Field(0.0, ge=0.0, le=10.0, description="Floor of the decayed rate.")
    decay: Literal["exponential", "cosine"] = Field(
        "exponential",
        description="The decay after warm-up and hold: exponential (decay_factor per decay_every_steps, "
        "MLPerf RNN-T) or cosine (from learning_rate to min_learning_rate over decay_steps, AlgoPerf).")
    decay_steps: int = Field(
        0, ge=0, le=10_000_000,
        description="Cosine decay only: the steps it takes to reach min_learning_rate (AlgoPerf: the "
        "workload's step hint less the warm-up); the rate stays there after them.")

    @model_validator(mode="after")
    def _one_consistent_schedule(self) -> AdamWSpec:
        if self.min_learning_rate > self.learning_rate:
            raise ValueError(f"min_learning_rate {self.min_learning_rate} is above learning_rate {self.learning_rate}")
        # A field the chosen decay ignores would be a number in the log that changes nothing.
        if self.decay == "cosine" and self.decay_steps == 0:
            raise ValueError("a cosine decay needs decay_steps (the steps from the end of the hold to the floor)")
        if self.decay == "cosine" and self.decay_factor != 1.0:
            raise ValueError(f"decay_factor {self.decay_factor} belongs to the exponential decay; a cosine decay "
                             "is set by decay_steps")
        if self.decay == "exponential" and self.decay_steps != 0:
            raise ValueError(f"decay_steps {self.decay_steps} belongs to the cosine decay; an exponential decay is "
                             "set by decay_factor and decay_every_steps")
        return self

    def learning_rate_at(self, step: int) -> float:
        if step < self.warmup_steps:
            return self.learning_rate * (step + 1) / self.warmup_steps
        decaying = step - self.warmup_steps - self.hold_steps
        if decaying <= 0:
            return self.learning_rate
        if self.decay == "cosine":
            # optax.cosine_decay_schedule(learning_rate, decay_steps, alpha=min/learning_rate).
            progress = min(decaying, self.decay_steps) / self.decay_steps
            cosine = 0.5 * (1.0 + math.cos(math.pi * progress))
            return self.min_learning_rate + (self.learning_rate - self.min_learning_rate) * cosine
        decayed = self.learning_rate * float(self.decay_factor ** (decaying / self.decay_every_steps))
        return max(decayed, self.min_learning_rate)


class SGDSpec(OptimizerSpec):
    """Stochastic gradient descent with heavy-ball momentum and L2 weight decay (PyTorch's SGD, Keras's
    SGD, optax.sgd with add_decayed_weights). Its update is linear in the gradient, which makes it the
    optimizer under which periodic model averaging every step and gradient averaging are one algorithm."""

    name: Literal["sgd"] = Field("sgd", description="SGD with momentum.")
    learning_rate: float = Field(0.01, gt=0.0, le=100.0, description="Learning rate.")
    momentum: float = Field(0.0, ge=0.0, lt=1.0, description="Heavy-ball momentum (PyTorch's convention: "
                            "buffer = momentum * buffer + gradient; step = learning_rate * buffer).")
    weight_decay: float = Field(0.0, ge=0.0, le=1.0, description="L2 penalty added to the gradient.")


_OPTIMIZERS: dict[str, type[OptimizerSpec]] = {"adadelta": AdaDeltaSpec, "adamw": AdamWSpec, "sgd": SGDSpec}
OPTIMIZER_NAMES: tuple[str, ...] = tuple(_OPTIMIZERS)


def validate_optimizer(value: Any) -> Any:
    """Turn a mapping into its optimizer's spec (no ``name``: adadelta, as every workload was before)."""
    if isinstance(value, dict):
        name = value.get("name", "adadelta")
        if name not in _OPTIMIZERS:
            raise ValueError(f"optimizer {name!r} is unknown (known: {', '.join(OPTIMIZER_NAMES)})")
        return _OPTIMIZERS[name].model_validate({**value, "name": name})
    return value
