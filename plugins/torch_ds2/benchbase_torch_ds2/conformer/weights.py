"""The Conformer's weights to and from benchbase's framework-neutral layout.

The layout (``benchbase.families.conformer.weight_layout``) is Keras's: dense kernels are
(inputs, outputs), PyTorch's Linear keeps (outputs, inputs); the subsampling kernels are
(time, frequency, in, out), PyTorch's Conv2d (out, in, time, frequency); the depthwise kernel
is (width, channels), PyTorch's grouped Conv1d (channels, 1, width). The torch modules are
named as the layout is, so each neutral name is its module's path plus the part, except the
subsampling convolutions (``subsampling.convs.{i}`` here, ``subsampling.{i}`` there).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np
import torch
from torch import nn

from benchbase.families.conformer.weight_layout import weight_layout
from benchbase_torch_ds2.conformer.model import Conformer, SelfAttention
from benchbase_torch_ds2.conformer.normalization import LayerNorm, MaskedBatchNorm

__all__ = ["export_weights", "import_weights"]

Convert = Callable[[torch.Tensor], torch.Tensor]


def export_weights(network: Conformer) -> dict[str, np.ndarray]:
    """Every weight by its neutral name, float32, in the layout's order."""
    entries = _entries(network)
    return {name: entries[name][1](entries[name][0].detach()).cpu().numpy().astype(np.float32)
            for name in weight_layout(network.spec, network.feature_dimension)}


def import_weights(network: Conformer, weights: Mapping[str, np.ndarray]) -> None:
    """Overwrites every weight (``validate_weights`` has checked names and shapes)."""
    with torch.no_grad():
        for name, (tensor, _, to_torch) in _entries(network).items():
            tensor.copy_(to_torch(torch.as_tensor(np.asarray(weights[name], dtype=np.float32))))


def _entries(network: Conformer) -> dict[str, tuple[torch.Tensor, Convert, Convert]]:
    """Each neutral name -> (the torch tensor, torch -> neutral layout, neutral -> torch layout)."""
    entries: dict[str, tuple[torch.Tensor, Convert, Convert]] = {}
    for path, module in network.named_modules():
        prefix = path.replace("subsampling.convs.", "subsampling.")
        if isinstance(module, nn.Linear):
            entries[f"{prefix}.kernel"] = (module.weight, _transposed, _transposed)
            entries[f"{prefix}.bias"] = (module.bias, _same, _same)
        elif isinstance(module, nn.Conv2d):
            entries[f"{prefix}.kernel"] = (module.weight, lambda w: w.permute(2, 3, 1, 0),
                                           lambda k: k.permute(3, 2, 0, 1))
            entries[f"{prefix}.bias"] = (module.bias, _same, _same)
        elif isinstance(module, nn.Conv1d):
            entries[f"{prefix}.kernel"] = (module.weight, lambda w: w[:, 0, :].t(), lambda k: k.t()[:, None, :])
        elif isinstance(module, LayerNorm):
            entries |= {f"{prefix}.{part}": (getattr(module, part), _same, _same) for part in ("scale", "bias")}
        elif isinstance(module, MaskedBatchNorm):
            entries |= {f"{prefix}.{part}": (getattr(module, part), _same, _same)
                        for part in ("scale", "offset", "mean", "variance")}
        elif isinstance(module, SelfAttention):
            entries[f"{prefix}.query_scale"] = (module.query_scale, _same, _same)
    return entries


def _same(tensor: torch.Tensor) -> torch.Tensor:
    return tensor


def _transposed(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.t()
