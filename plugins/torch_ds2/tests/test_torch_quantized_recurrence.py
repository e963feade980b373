"""int8-emulated's LSTM recurrence (benchbase_torch_ds2.quantized_recurrence) against the autograd
loop it replaced: the same forward values bit for bit in float32, and in float64 the very gradients
autograd derives (the backward pass is written by hand, so it is checked where rounding cannot
hide a wrong term)."""

from __future__ import annotations

import pytest
import torch
from benchbase_torch_ds2.quantization import fake_quantize
from benchbase_torch_ds2.quantized_recurrence import StateQuantizer, quantized_recurrence
from torch import nn

pytestmark = pytest.mark.numerics  # `make test-isa` runs these again under a lower CPU ISA

UNITS = 5  # odd sizes: a gate block misplaced by a unit shows
FRAMES = 17


def autograd_loop(projected, kernel, state):
    """The recurrence as autograd sees it step by step (the implementation before this module)."""
    h = projected.new_zeros(projected.shape[0], kernel.shape[1])
    c = torch.zeros_like(h)
    outputs = []
    for frame in range(projected.shape[1]):
        read = h if state is None else h + (fake_quantize(h.detach(), state.scale.to(h.dtype), state.qmax) - h).detach()
        i, f, g, o = (projected[:, frame] + nn.functional.linear(read, kernel)).chunk(4, dim=1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        h = torch.sigmoid(o) * torch.tanh(c)
        outputs.append(h)
    return torch.stack(outputs, dim=1)


def inputs(dtype, seed=0):
    generator = torch.Generator().manual_seed(seed)
    projected = torch.randn(3, FRAMES, 4 * UNITS, generator=generator, dtype=dtype).requires_grad_()
    kernel = (0.6 * torch.randn(4 * UNITS, UNITS, generator=generator, dtype=dtype)).requires_grad_()
    weights = torch.randn(3, FRAMES, UNITS, generator=generator, dtype=dtype)  # a loss that weighs every output
    return projected, kernel, weights


QUANTIZED = StateQuantizer(torch.tensor(1.0) / 127, 127)


@pytest.mark.parametrize("state", [None, QUANTIZED], ids=["fp32 state", "quantized state"])
def test_the_forward_pass_is_the_autograd_loops_bit_for_bit(state):
    projected, kernel, _ = inputs(torch.float32)
    assert torch.equal(quantized_recurrence(projected, kernel, state), autograd_loop(projected, kernel, state))


@pytest.mark.parametrize("state", [None, QUANTIZED], ids=["fp32 state", "quantized state"])
def test_the_hand_written_backward_pass_is_autograds_in_float64(state):
    projected, kernel, weights = inputs(torch.float64, seed=1)
    found = torch.autograd.grad((quantized_recurrence(projected, kernel, state) * weights).sum(), [projected, kernel])
    expected = torch.autograd.grad((autograd_loop(projected, kernel, state) * weights).sum(), [projected, kernel])
    for mine, theirs in zip(found, expected):
        torch.testing.assert_close(mine, theirs, rtol=1e-12, atol=1e-12)


def test_a_sequence_without_frames_gives_no_outputs_and_zero_gradients():
    projected = torch.zeros(2, 0, 4 * UNITS, requires_grad=True)
    kernel = torch.ones(4 * UNITS, UNITS, requires_grad=True)
    outputs = quantized_recurrence(projected, kernel, QUANTIZED)
    assert outputs.shape == (2, 0, UNITS)
    (gradient,) = torch.autograd.grad(outputs.sum(), [kernel])
    assert torch.equal(gradient, torch.zeros_like(kernel))
