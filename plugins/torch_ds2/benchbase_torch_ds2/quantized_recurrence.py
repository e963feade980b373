"""int8-emulated's LSTM recurrence: h(t-1) fake-quantized before every recurrent matmul.

No fused kernel (oneDNN's, cuDNN's) can quantize inside its loop, so the recurrence steps through
time itself. Left to autograd, every step records a dozen small operations and the backward pass
replays them one by one: that made an int8-emulated ds2-mini step 3.8x its fp32 step. Here the
loop is one ``torch.autograd.Function`` whose forward and backward passes are TorchScript loops
(no Python interpreter per step, no autograd graph): the forward keeps each step's gate
activations and quantized state, and the backward is the LSTM's backpropagation through time
written out, the state quantizer's gradient straight through (``QuantizationSpec.gradient``).

The forward computes what ``quantized_lstm`` computed before, operation for operation (the same
float32 values; tests/test_precision.py compares the two), so the grid the reference pins is
unchanged; only the gradient's float32 roundings move, within the error model's bound.
"""

from __future__ import annotations

import warnings

import torch

__all__ = ["StateQuantizer", "quantized_recurrence"]


class StateQuantizer:
    """h(t-1)'s fake quantization: clip(round_half_even(h / scale), -qmax, qmax) * scale."""

    def __init__(self, scale: torch.Tensor, qmax: int) -> None:
        self.scale = scale
        self.qmax = qmax


def quantized_recurrence(projected: torch.Tensor, recurrent_kernel: torch.Tensor,
                         state: StateQuantizer | None) -> torch.Tensor:
    """The LSTM's outputs (batch, frames, units) from a zero state: ``projected`` (batch, frames,
    4 * units) is every frame's input part with the bias, gates i, f, g, o; ``recurrent_kernel``
    is (4 * units, units), PyTorch's layout; ``state``: h(t-1)'s quantizer, or None."""
    if state is None:
        scale, qmax, quantize = projected.new_ones(()), 1.0, False
    else:
        scale, qmax, quantize = state.scale.to(projected.device), float(state.qmax), True
    return _Recurrence.apply(projected, recurrent_kernel, scale, qmax, quantize)


class _Recurrence(torch.autograd.Function):
    @staticmethod
    def forward(ctx, projected, kernel, scale, qmax, quantize):  # type: ignore[override]
        outputs, states, gates, cells = _forward_loop(projected.contiguous(), kernel, scale, qmax, quantize)
        ctx.save_for_backward(kernel, states, gates, cells)
        return outputs

    @staticmethod
    def backward(ctx, grad):  # type: ignore[override]
        kernel, states, gates, cells = ctx.saved_tensors
        grad_z = _backward_loop(grad.contiguous(), kernel, gates, cells)
        # dL/dW_hh = sum over frames and rows of dz(t)^T h_q(t-1): one matmul after the loop.
        grad_kernel = torch.einsum("btg,btu->gu", grad_z, states)
        return grad_z, grad_kernel, None, None, None


def _forward_loop(projected: torch.Tensor, kernel: torch.Tensor, scale: torch.Tensor, qmax: float,
                  quantize: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(outputs h(t), the quantized h(t-1) each step read, the gate activations i, f, g, o, c(t-1))."""
    batch, frames, width = projected.shape
    units = width // 4
    h = projected.new_zeros((batch, units))
    c = projected.new_zeros((batch, units))
    outputs = projected.new_empty((batch, frames, units))
    states = projected.new_empty((batch, frames, units))
    gates = projected.new_empty((batch, frames, width))
    cells = projected.new_empty((batch, frames, units))
    for frame in range(frames):
        read = torch.clamp(torch.round(h / scale), -qmax, qmax) * scale if quantize else h
        z = projected[:, frame] + torch.nn.functional.linear(read, kernel)
        i = torch.sigmoid(z[:, :units])
        f = torch.sigmoid(z[:, units : 2 * units])
        g = torch.tanh(z[:, 2 * units : 3 * units])
        o = torch.sigmoid(z[:, 3 * units :])
        cells[:, frame] = c
        c = f * c + i * g
        h = o * torch.tanh(c)
        outputs[:, frame] = h
        states[:, frame] = read
        gates[:, frame] = torch.cat([i, f, g, o], dim=1)
    return outputs, states, gates, cells


def _backward_loop(grad: torch.Tensor, kernel: torch.Tensor, gates: torch.Tensor, cells: torch.Tensor) -> torch.Tensor:
    """dL/dz(t) for every frame (batch, frames, 4 * units): backpropagation through time, from the
    last frame, dL/dh(t) the output's gradient plus what h(t) fed the next step."""
    batch, frames, width = gates.shape
    units = width // 4
    grad_z = torch.empty_like(gates)
    grad_h = grad.new_zeros((batch, units))
    grad_c = grad.new_zeros((batch, units))
    for step in range(frames):
        frame = frames - 1 - step
        i = gates[:, frame, :units]
        f = gates[:, frame, units : 2 * units]
        g = gates[:, frame, 2 * units : 3 * units]
        o = gates[:, frame, 3 * units :]
        previous = cells[:, frame]
        tanh_c = torch.tanh(f * previous + i * g)
        grad_h = grad[:, frame] + grad_h
        grad_c = grad_h * o * (1.0 - tanh_c * tanh_c) + grad_c
        grad_z[:, frame] = torch.cat([grad_c * g * i * (1.0 - i), grad_c * previous * f * (1.0 - f),
                                      grad_c * i * (1.0 - g * g), grad_h * tanh_c * o * (1.0 - o)], dim=1)
        grad_c = grad_c * f
        grad_h = torch.mm(grad_z[:, frame], kernel)  # through h(t-1)'s quantizer, straight
    return grad_z


# TorchScript, though PyTorch 2.x marks torch.jit.script deprecated: torch.compile would need a
# C++ compiler on the user's machine and compile on the run clock, and a custom C++ op a build
# step; the scripted loops measured 1.29x an fp32 step on ds2-mini where the autograd loop was
# 3.86x (docs/BENCHMARKS.md). A Python loop runs the same functions where scripting fails.
with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    try:
        _forward_loop = torch.jit.script(_forward_loop)
        _backward_loop = torch.jit.script(_backward_loop)
    except Exception:  # noqa: BLE001  (a torch without TorchScript: the same loops in Python)
        pass
