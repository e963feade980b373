"""An ``nn.LSTM`` under torch.autocast, in the autocast's type: every torch family's LSTMs in bf16 and fp16."""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["lstm_outputs"]


def lstm_outputs(lstm: nn.LSTM, x: torch.Tensor) -> torch.Tensor:
    """``lstm``'s outputs; under an autocast, computed in its type.

    torch.autocast casts cuDNN's LSTM to float16 whatever the autocast type (measured with
    PyTorch 2.11 on an H100: a bf16 autocast returned float16 LSTM outputs), which would run
    most of the model's FLOPs in fp16 without loss scaling. So bf16 runs the LSTM itself with
    bfloat16 copies of the float32 weights (their gradients flow back to the float32 ones).

    Under a float16 autocast the input is handed over in float16: on a CPU a float32 input takes
    oneDNN's LSTM, which has no float16 primitive (torch 2.13: "could not create a primitive
    descriptor"), where a float16 one runs, as the DS2 model's always did (its convolution's
    outputs are float16 under the autocast). cuDNN takes either.
    """
    device = x.device.type
    if not torch.is_autocast_enabled(device):
        return lstm(x)[0]
    if torch.get_autocast_dtype(device) == torch.float16:
        return lstm(x.to(torch.float16))[0]
    if torch.get_autocast_dtype(device) != torch.bfloat16:
        return lstm(x)[0]
    weights = {name: parameter.to(torch.bfloat16) for name, parameter in lstm.named_parameters()}
    with torch.autocast(device, enabled=False):
        return torch.func.functional_call(lstm, weights, (x.to(torch.bfloat16),))[0]
