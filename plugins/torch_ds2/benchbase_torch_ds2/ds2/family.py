"""The torch backend's DS2 family: the Deep Speech 2-like network, trained on CTC.

``predict()`` returns its per-frame log-probabilities (batch, output frames, symbols); the
harness decodes them.
"""

from __future__ import annotations

import warnings

import torch

from benchbase.backend import Batch, BuildContext
from benchbase.families.ds2 import weight_layout
from benchbase_torch_ds2.ctc import CTCFamily
from benchbase_torch_ds2.ds2 import weights
from benchbase_torch_ds2.ds2.model import DeepSpeech2
from benchbase_torch_ds2.family import ToDevice
from benchbase_torch_ds2.strategies import synchronizes_statistics

__all__ = ["DS2Family"]


class DS2Family(CTCFamily):
    name = "ds2"
    summary = "DS2 (CTC)"
    # bf16 and fp16 are torch.autocast's mixed precision (the backend's); int8-emulated is the model's.
    precisions = frozenset({"fp32", "tf32", "bf16", "fp16", "int8-emulated"})
    layout = weight_layout
    weights = weights
    cuda_graphs = True  # convolution, cuDNN's LSTMs, BatchNorm and the output layer: static in the input's shape

    def build_network(self, context: BuildContext) -> DeepSpeech2:
        if context.plan.distributed:
            # The synchronized BatchNorm uses torch.distributed.nn's differentiable all_reduce, which
            # PyTorch marks deprecated in favour of a private module; it is the public one that works on gloo.
            warnings.filterwarnings("ignore", message="torch.distributed.nn.functional.all_reduce is deprecated")
        return DeepSpeech2(context.model, context.feature_dimension, distributed=synchronizes_statistics(context))

    def network_inputs(self, batch: Batch, to_device: ToDevice) -> tuple[torch.Tensor]:
        return (to_device(batch.features),)  # right-padded and unidirectional: the valid outputs never see the padding

    def predict(self, network: torch.nn.Module, features: torch.Tensor, feature_lengths: torch.Tensor) -> torch.Tensor:
        return network(features)
