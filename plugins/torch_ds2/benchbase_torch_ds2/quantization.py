"""int8-emulated in PyTorch: fake quantization exactly as ``ModelSpec.quantization`` pins it.

``benchbase.numerics.quantization`` is the NumPy reference these functions are tested against
(tests/test_precision.py): the same float32 operations in the same order, so a weight
quantizes to the very same grid values. The straight-through gradient is written as
``x + (q(x) - x).detach()``: the forward value is q(x), the backward pass sees the identity
(for activations, of the clamp to the range, so a saturated element gets no gradient).
"""

from __future__ import annotations

import torch
from torch import nn

from benchbase.specs.workload import QuantizationSpec
from benchbase_torch_ds2.quantized_recurrence import StateQuantizer, quantized_recurrence

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

    def state_quantizer(self, tensor: str = "lstm.recurrent_state") -> StateQuantizer | None:
        """The fake quantization of h(t-1) before the recurrent matmul (fixed range), or None.
        ``tensor``: the state's name in the model family's quantization spec."""
        if not self.spec.quantizes(tensor):
            return None
        return StateQuantizer(torch.tensor(self.spec.recurrent_state_range, dtype=torch.float32) / self.qmax,
                              self.qmax)


def quantized_lstm(x: torch.Tensor, input_kernel: torch.Tensor, recurrent_kernel: torch.Tensor, bias: torch.Tensor,
                   quantize_state: StateQuantizer | None) -> torch.Tensor:
    """An LSTM (gates i, f, g, o; zero initial state) over (batch, frames, inputs): every frame's
    input part at once, then the recurrence with h(t-1) quantized (``quantized_recurrence``: the
    fused cuDNN and oneDNN kernels cannot quantize inside their loop). Kernels are in PyTorch's
    (outputs, inputs) layout."""
    projected = nn.functional.linear(x, input_kernel, bias)
    return quantized_recurrence(projected, recurrent_kernel, quantize_state)
