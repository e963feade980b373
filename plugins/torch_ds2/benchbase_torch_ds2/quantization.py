"""int8-emulated in PyTorch: fake quantization exactly as ``ModelSpec.quantization`` pins it.

``benchbase.families.ds2.quantization`` is the NumPy reference these functions are tested against
(tests/test_precision.py): the same float32 operations in the same order, so a weight
quantizes to the very same grid values. The straight-through gradient is written as
``x + (q(x) - x).detach()``: the forward value is q(x), the backward pass sees the identity
(for activations, of the clamp to the range, so a saturated element gets no gradient).
"""

from __future__ import annotations

import torch
from torch import nn

from benchbase.specs.workload import QuantizationSpec

__all__ = ["FakeQuantizer", "fake_quantize", "quantized_lstm"]


def fake_quantize(x: torch.Tensor, scale: torch.Tensor, qmax: int) -> torch.Tensor:
    """clip(round_half_even(x / scale), -qmax, qmax) * scale (torch.round rounds half to even)."""
    return torch.clamp(torch.round(x / scale), -qmax, qmax) * scale


class FakeQuantizer:
    """The quantization points of one model: weights, layer inputs with their ranges, h(t-1)."""

    def __init__(self, spec: QuantizationSpec, global_max: bool = False) -> None:
        """``global_max``: training across processes, where a batch's range is that of the whole
        global batch (a MAX all-reduce), so every rank keeps the same ranges as one process would."""
        self.spec = spec
        self.qmax = spec.qmax
        self.global_max = global_max

    def weight(self, tensor: str, weight: torch.Tensor) -> torch.Tensor:
        if not self.spec.quantizes(tensor):
            return weight
        with torch.no_grad():
            largest = weight.detach().abs().max()
            scale = torch.where(largest > 0, largest / self.qmax, torch.ones_like(largest))
        return weight + (fake_quantize(weight.detach(), scale, self.qmax) - weight).detach()

    def activation(self, tensor: str, layer: nn.Module, x: torch.Tensor) -> torch.Tensor:
        """``x``, the input of ``layer`` (whose ``input_range`` buffer is its range), fake-quantized.

        Training updates the range before quantizing; inference quantizes with the stored one,
        or with the batch's own max|x| while it is 0 (never trained).
        """
        if not self.spec.quantizes(tensor):
            return x
        stored: torch.Tensor = layer.input_range
        with torch.no_grad():
            batch = x.detach().abs().max().float()
            if layer.training:
                if self.global_max:
                    torch.distributed.all_reduce(batch, op=torch.distributed.ReduceOp.MAX)
                momentum = self.spec.range_momentum
                stored.copy_(torch.where(stored == 0, batch, stored * momentum + batch * (1.0 - momentum)))
                used = stored.clone()
            else:
                used = torch.where(stored > 0, stored, batch)
            scale = torch.where(used > 0, used / self.qmax, torch.ones_like(used))
        clipped = torch.clamp(x, -used, used)
        return clipped + (fake_quantize(clipped.detach(), scale, self.qmax) - clipped).detach()

    def state_quantizer(self, tensor: str = "lstm.recurrent_state"):
        """The fake quantization of h(t-1) before the recurrent matmul (fixed range), or None.
        ``tensor``: the state's name in the model family's quantization spec."""
        if not self.spec.quantizes(tensor):
            return None
        scale = torch.tensor(self.spec.recurrent_state_range, dtype=torch.float32) / self.qmax

        def quantize(h: torch.Tensor) -> torch.Tensor:
            return h + (fake_quantize(h.detach(), scale.to(h.device), self.qmax) - h).detach()

        return quantize


def quantized_lstm(x: torch.Tensor, input_kernel: torch.Tensor, recurrent_kernel: torch.Tensor, bias: torch.Tensor,
                   quantize_state) -> torch.Tensor:
    """An LSTM (gates i, f, g, o; zero initial state) over (batch, frames, inputs), frame by frame.

    The fused cuDNN and oneDNN kernels cannot quantize h(t-1) inside their loop, so the
    emulation steps through time in Python, with autograd through the loop; kernels are in
    PyTorch's (outputs, inputs) layout.
    """
    batch, frames, _ = x.shape
    units = recurrent_kernel.shape[1]
    projected = nn.functional.linear(x, input_kernel, bias)  # every frame's input part at once
    h = x.new_zeros(batch, units)
    c = x.new_zeros(batch, units)
    outputs = []
    for frame in range(frames):
        state = h if quantize_state is None else quantize_state(h)
        z = projected[:, frame] + nn.functional.linear(state, recurrent_kernel)
        i, f, g, o = z.chunk(4, dim=1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        h = torch.sigmoid(o) * torch.tanh(c)
        outputs.append(h)
    return torch.stack(outputs, dim=1)
