"""The LSTM's loop over frames, with its backward pass written by hand: every family's LSTMs run it.

Gates i, f, g, o, from a zero state; ``Recurrent`` carries the loop's static settings (its
arithmetic, and int8-emulated's quantization of h(t-1)).
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from benchbase.specs.workload import QuantizationSpec
from benchbase_jax_ds2.arithmetic import HIGHEST, Arithmetic
from benchbase_jax_ds2.quantization import quantize_state

__all__ = ["FP32_RECURRENCE", "SCAN_UNROLL", "Recurrent", "recurrence"]

SCAN_UNROLL = 1
"""Frames per iteration of the loops over frames, forward and backward (``lax.scan``'s ``unroll``):
fewer, larger loop bodies for XLA; the same arithmetic. On one thread of a 2-core AVX-512 EPYC
(rough: the machine loaded by other work, alternating on the same ds2-mini batches) 2, 4 and 8
made the step slower (1.50-1.60x PyTorch's against 1.28x unrolled once), so 1 stays; the GPU
measurement sets it (benchmarks/gpu_bundle.py's ``unrollN``). Read when the step is traced."""


class Recurrent(NamedTuple):
    """The recurrence's static settings: its arithmetic, and int8-emulated's quantization of h(t-1)."""

    math: Arithmetic
    state_quantizer: QuantizationSpec | None

    def state(self, h: jax.Array) -> jax.Array:
        return h if self.state_quantizer is None else quantize_state(self.state_quantizer, h)


FP32_RECURRENCE = Recurrent(Arithmetic(jnp.float32, HIGHEST), None)


def recurrence(inputs: jax.Array, recurrent_kernel: jax.Array, settings: Recurrent = FP32_RECURRENCE) -> jax.Array:
    """The LSTM's loop (see ``_recurrence``), in fp32 unless ``settings`` say otherwise."""
    return _recurrence(inputs, recurrent_kernel, settings)


@functools.partial(jax.custom_vjp, nondiff_argnums=(2,))
def _recurrence(inputs: jax.Array, recurrent_kernel: jax.Array, settings: Recurrent) -> jax.Array:
    """The LSTM's loop: (frames, batch, 4 units) input projections -> (frames, batch, units) outputs.

    Its gradient is written by hand, as cuDNN's and PyTorch's are: the loop back in time only
    carries the hidden and cell gradients, and the recurrent kernel's gradient is one matmul
    over all frames afterwards. Differentiating the scan instead accumulates a small matmul per
    frame inside the loop and keeps several (frames, batch, 4 units) residuals, which on a CPU
    costs about as much as the rest of the step.

    int8-emulated quantizes h(t-1) before the recurrent matmul (``settings.state_quantizer``);
    its gradient is straight-through, so the backward pass is the same with the quantized h.
    """
    return _recurrence_forward(inputs, recurrent_kernel, settings)[0]


def _recurrence_forward(inputs: jax.Array, recurrent_kernel: jax.Array, settings: Recurrent):
    def step(carry, z):
        h, c = carry
        z = z + settings.math.dot("bu,ug->bg", settings.state(h), recurrent_kernel)
        i, f, g, o = jnp.split(z, 4, axis=-1)
        i, f, g, o = jax.nn.sigmoid(i), jax.nn.sigmoid(f), jnp.tanh(g), jax.nn.sigmoid(o)
        c = f * c + i * g
        h = o * jnp.tanh(c)
        return (h, c), (h, c, jnp.concatenate([i, f, g, o], axis=-1))

    zeros = jnp.zeros(inputs.shape[1:2] + recurrent_kernel.shape[:1], inputs.dtype)
    _, (hidden, cells, gates) = lax.scan(step, (zeros, zeros), inputs, unroll=SCAN_UNROLL)
    return hidden, (hidden, cells, gates, recurrent_kernel)


def _recurrence_backward_rule(settings: Recurrent, residuals, hidden_gradient: jax.Array):
    return _recurrence_backward(residuals, hidden_gradient, settings)


def _recurrence_forward_rule(inputs: jax.Array, recurrent_kernel: jax.Array, settings: Recurrent):
    return _recurrence_forward(inputs, recurrent_kernel, settings)


def _recurrence_backward(residuals, hidden_gradient: jax.Array,
                         settings: Recurrent) -> tuple[jax.Array, jax.Array]:
    hidden, cells, gates, recurrent_kernel = residuals
    previous_cells = jnp.concatenate([jnp.zeros_like(cells[:1]), cells[:-1]])

    def step(carry, frame):
        dh_next, dc_next = carry
        dh, c, c_previous, gate = frame
        i, f, g, o = jnp.split(gate, 4, axis=-1)
        dh = dh + dh_next
        tanh_c = jnp.tanh(c)
        dc = dh * o * (1 - tanh_c**2) + dc_next
        dz = jnp.concatenate([dc * g * i * (1 - i), dc * c_previous * f * (1 - f), dc * i * (1 - g**2),
                              dh * tanh_c * o * (1 - o)], axis=-1)
        return (settings.math.dot("bg,ug->bu", dz, recurrent_kernel), dc * f), dz

    zeros = jnp.zeros_like(hidden[0])
    _, input_gradient = lax.scan(step, (zeros, zeros), (hidden_gradient, cells, previous_cells, gates), reverse=True,
                                 unroll=SCAN_UNROLL)
    previous_hidden = settings.state(jnp.concatenate([jnp.zeros_like(hidden[:1]), hidden[:-1]]))
    kernel_gradient = settings.math.dot("tbu,tbg->ug", previous_hidden, input_gradient)
    return input_gradient, kernel_gradient


_recurrence.defvjp(_recurrence_forward_rule, _recurrence_backward_rule)
