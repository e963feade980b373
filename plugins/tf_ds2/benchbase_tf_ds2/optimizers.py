"""The workload's optimizer in Keras, every field of its spec, and the learning rate's schedule.

AdaDelta is Keras's own. AdamW is Keras's with one difference: Keras adds epsilon to the square
root of the *uncorrected* second moment, scaled by the bias corrections ("epsilon hat" in the
Adam paper), which at epsilon 1e-8 and a tiny early second moment takes a different first step
than PyTorch's and optax's AdamW, which add it to the square root of the bias-corrected moment,
as ``AdamWSpec.epsilon`` says. ``SpecAdamW`` computes the latter; Keras's decoupled weight decay
(every variable shrunk by learning rate x weight decay before the update) is already PyTorch's.

The schedule (``OptimizerSpec.learning_rate_at``) is evaluated in Python before each step, from
the optimizer's own step counter, which the checkpoint holds: a restored run resumes it.
"""

from __future__ import annotations

import keras
import tensorflow as tf

from benchbase.errors import BenchbaseError
from benchbase.specs import OptimizerSpec
from benchbase.specs.optimizer import AdaDeltaSpec, AdamWSpec

__all__ = ["SpecAdamW", "keras_optimizer", "schedule_learning_rate"]


class SpecAdamW(keras.optimizers.AdamW):  # type: ignore[misc]
    """Keras's AdamW with epsilon added to the square root of the bias-corrected second moment."""

    def update_step(self, gradient: tf.Tensor, variable: tf.Variable, learning_rate: tf.Tensor) -> None:
        dtype = variable.dtype
        learning_rate = tf.cast(learning_rate, dtype)
        gradient = tf.cast(gradient, dtype)
        step = tf.cast(self.iterations + 1, dtype)
        beta_1, beta_2 = tf.cast(self.beta_1, dtype), tf.cast(self.beta_2, dtype)
        first_correction = 1 - tf.pow(beta_1, step)
        second_correction = 1 - tf.pow(beta_2, step)
        first = self._momentums[self._get_variable_index(variable)]
        second = self._velocities[self._get_variable_index(variable)]
        # As Keras's Adam and PyTorch's lerp: m += (g - m)(1 - beta1), v += (g^2 - v)(1 - beta2).
        self.assign_add(first, (gradient - tf.convert_to_tensor(first)) * (1 - beta_1))
        self.assign_add(second, (tf.square(gradient) - tf.convert_to_tensor(second)) * (1 - beta_2))
        denominator = tf.sqrt(tf.convert_to_tensor(second)) / tf.sqrt(second_correction) + self.epsilon
        self.assign_sub(variable, (learning_rate / first_correction) * tf.convert_to_tensor(first) / denominator)


def keras_optimizer(spec: OptimizerSpec) -> keras.optimizers.Optimizer:
    """The spec's optimizer with every field of it, its learning rate a variable the schedule sets."""
    if isinstance(spec, AdamWSpec):
        return SpecAdamW(learning_rate=spec.learning_rate_at(0), beta_1=spec.beta1, beta_2=spec.beta2,
                         epsilon=spec.epsilon, weight_decay=spec.weight_decay)
    if isinstance(spec, AdaDeltaSpec):
        return keras.optimizers.Adadelta(learning_rate=spec.learning_rate, rho=spec.rho, epsilon=spec.epsilon)
    raise BenchbaseError(f"the tf backend has no optimizer {spec.name!r}")


def schedule_learning_rate(optimizer: keras.optimizers.Optimizer, spec: OptimizerSpec) -> None:
    """Set the learning rate of the coming step, ``spec.learning_rate_at`` of the steps taken.

    A constant rate (AdaDelta's) was set when the optimizer was made. Steps are counted by the
    optimizer that applies them: under fp16's loss scaling, the inner one, which counts no step
    an overflow skipped.
    """
    if type(spec).learning_rate_at is OptimizerSpec.learning_rate_at:
        return
    steps = getattr(optimizer, "inner_optimizer", optimizer).iterations
    optimizer.learning_rate.assign(spec.learning_rate_at(int(steps.numpy())))
