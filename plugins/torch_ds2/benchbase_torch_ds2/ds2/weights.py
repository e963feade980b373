"""The DS2 network's weights to and from benchbase's framework-neutral layout.

The layout is Keras's (benchbase.families.ds2.weight_layout): kernels are (inputs, outputs), the
convolution (width, inputs, outputs); PyTorch keeps (outputs, inputs) and (outputs, inputs,
width). Both use the LSTM gate order input, forget, cell, output. PyTorch's second LSTM bias
(bias_hh) stays zero and frozen, so the neutral bias is bias_ih alone.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import torch

from benchbase.families.ds2.quantization import input_range_names
from benchbase.families.ds2.weight_layout import BATCHNORM_PARTS
from benchbase_torch_ds2.ds2.model import DeepSpeech2

__all__ = ["export_weights", "import_weights"]

_BATCHNORM_BUFFERS = dict(zip(BATCHNORM_PARTS, ("weight", "bias", "running_mean", "running_var")))


def export_weights(model: DeepSpeech2) -> dict[str, np.ndarray]:
    return {name: tensor.detach().cpu().numpy().astype(np.float32) for name, tensor in _neutral_view(model).items()}


def import_weights(model: DeepSpeech2, weights: Mapping[str, np.ndarray]) -> None:
    targets = _torch_targets(model)
    with torch.no_grad():
        for name, (tensor, to_torch) in targets.items():
            tensor.copy_(to_torch(torch.as_tensor(np.asarray(weights[name], dtype=np.float32))))
        for lstm in model.lstms:
            for name, parameter in lstm.named_parameters():
                if name.startswith("bias_hh"):
                    parameter.zero_()


def _neutral_view(model: DeepSpeech2) -> dict[str, torch.Tensor]:
    """Each neutral name -> the torch tensor in the neutral layout."""
    view = {"conv.kernel": model.conv.weight.permute(2, 1, 0)}
    view |= _batchnorm_view("conv_norm", model.conv_norm)
    for layer, (lstm, norm) in enumerate(zip(model.lstms, model.lstm_norms)):
        view[f"lstm.{layer}.input_kernel"] = lstm.weight_ih_l0.t()
        view[f"lstm.{layer}.recurrent_kernel"] = lstm.weight_hh_l0.t()
        view[f"lstm.{layer}.bias"] = lstm.bias_ih_l0 + lstm.bias_hh_l0
        view |= _batchnorm_view(f"lstm_norm.{layer}", norm)
    view["output.kernel"] = model.output.weight.t()
    view["output.bias"] = model.output.bias
    return view | _range_view(model)


def _torch_targets(model: DeepSpeech2) -> dict:
    """Each neutral name -> (torch tensor to overwrite, conversion from the neutral layout)."""

    def same(tensor):
        return tensor

    def transposed(tensor):
        return tensor.t()

    targets = {"conv.kernel": (model.conv.weight, lambda tensor: tensor.permute(2, 1, 0))}
    targets |= {name: (tensor, same) for name, tensor in _batchnorm_view("conv_norm", model.conv_norm).items()}
    for layer, (lstm, norm) in enumerate(zip(model.lstms, model.lstm_norms)):
        targets[f"lstm.{layer}.input_kernel"] = (lstm.weight_ih_l0, transposed)
        targets[f"lstm.{layer}.recurrent_kernel"] = (lstm.weight_hh_l0, transposed)
        targets[f"lstm.{layer}.bias"] = (lstm.bias_ih_l0, same)
        targets |= {name: (tensor, same) for name, tensor in _batchnorm_view(f"lstm_norm.{layer}", norm).items()}
    targets["output.kernel"] = (model.output.weight, transposed)
    targets["output.bias"] = (model.output.bias, same)
    return targets | {name: (tensor, same) for name, tensor in _range_view(model).items()}


def _range_view(model: DeepSpeech2) -> dict[str, torch.Tensor]:
    """int8-emulated's activation ranges (the ``input_range`` buffers), by their neutral names."""
    layers = {"conv": model.conv, "output": model.output} | {f"lstm.{i}": lstm for i, lstm in enumerate(model.lstms)}
    return {name: layers[name.removesuffix(".input_range")].input_range for name in input_range_names(model.spec)}


def _batchnorm_view(prefix: str, norm: torch.nn.BatchNorm1d) -> dict[str, torch.Tensor]:
    return {f"{prefix}.{part}": getattr(norm, attribute) for part, attribute in _BATCHNORM_BUFFERS.items()}
