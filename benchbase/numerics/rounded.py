"""The float64 references' arithmetic, with an error model's rounding moves injected where asked.

Every family's NumPy reference computes through ``RoundedArithmetic``: without a rounding model
it is plain float64 arithmetic; with one (``benchbase.numerics.tolerances.RoundingModel``) each
accumulation and vector function is moved by its float32 rounding bound, which is how the error
model derives a bound for each output. The LSTM and the log-softmax live here because more than
one family uses them.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from benchbase.numerics.tolerances import RoundingModel

__all__ = ["RoundedArithmetic", "log_softmax", "lstm_layer"]


class RoundedArithmetic:
    """The reference's arithmetic with a rounding model's moves applied (none without one)."""

    def __init__(self, model: RoundingModel | None) -> None:
        self.model = model

    def dot(self, x: np.ndarray, kernel: np.ndarray, bias: np.ndarray | float = 0.0) -> np.ndarray:
        """x @ kernel + bias, moved by the bound of a (kernel rows + 1)-term accumulation."""
        value = x @ kernel + bias
        if self.model is None:
            return value
        magnitude = np.abs(x) @ np.abs(kernel) + np.abs(bias)
        return self.model.accumulation(value, magnitude, kernel.shape[0] + 1)

    def matmul(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """a @ b over stacked matrices (attention's scores and sums), moved by the bound of a
        (b's rows)-term accumulation."""
        value = a @ b
        if self.model is None:
            return value
        return self.model.accumulation(value, np.abs(a) @ np.abs(b), b.shape[-2])

    def mean(self, values: np.ndarray, axis: int = 0) -> np.ndarray:
        """The mean over ``axis``, moved by the bound of that many terms."""
        return self.sum(values, axis) / values.shape[axis]

    def sum(self, values: np.ndarray, axis: int = 0) -> np.ndarray:
        """The sum over ``axis``, moved by the bound of that many terms."""
        value = values.sum(axis=axis)
        if self.model is None:
            return value
        return self.model.accumulation(value, np.abs(values).sum(axis=axis), values.shape[axis])

    def function(self, value: np.ndarray, operations: int = 1) -> np.ndarray:
        return value if self.model is None else self.model.elementwise(value, operations)


def lstm_layer(x: np.ndarray, input_kernel: np.ndarray, recurrent_kernel: np.ndarray, bias: np.ndarray,
               quantize_state: Callable[[np.ndarray], np.ndarray] | None = None,
               rounded: RoundedArithmetic | None = None) -> np.ndarray:
    """A unidirectional LSTM from a zero state: (batch, frames, inputs) -> (batch, frames, units).

    ``quantize_state``: int8-emulated's fake quantization of h(t-1) before the recurrent matmul.
    """
    rounded = rounded or RoundedArithmetic(None)
    batch, frames, _ = x.shape
    units = recurrent_kernel.shape[0]
    # Every frame's input part at once; only h @ recurrent is sequential. The rounding model
    # counts the gate's input and recurrent parts as one accumulation, as a fused kernel does.
    projected = rounded.dot(x, input_kernel, bias)
    h = np.zeros((batch, units))
    c = np.zeros((batch, units))
    outputs = np.empty((batch, frames, units))
    for frame in range(frames):
        z = projected[:, frame] + rounded.dot(h if quantize_state is None else quantize_state(h), recurrent_kernel)
        gates = [z[:, k * units : (k + 1) * units] for k in range(4)]
        i, f, o = (rounded.function(_sigmoid(gates[k])) for k in (0, 1, 3))
        g = rounded.function(np.tanh(gates[2]))
        c = rounded.function(f * c + i * g, 3)
        h = rounded.function(o * rounded.function(np.tanh(c)))
        outputs[:, frame] = h
    return outputs


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * (np.tanh(0.5 * x) + 1.0)  # the tanh form never overflows


def log_softmax(logits: np.ndarray, rounded: RoundedArithmetic | None = None) -> np.ndarray:
    rounded = rounded or RoundedArithmetic(None)
    shifted = rounded.function(logits - logits.max(axis=-1, keepdims=True))
    total = rounded.sum(rounded.function(np.exp(shifted)), axis=-1)
    return rounded.function(shifted - rounded.function(np.log(total))[..., None])
