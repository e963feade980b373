"""The torch backend's DS2 family: the Deep Speech 2-like network, trained on CTC.

``predict()`` returns its per-frame log-probabilities (batch, output frames, symbols); the
harness decodes them.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping

import numpy as np
import torch

from benchbase.backend import Batch, BuildContext
from benchbase.families.ds2 import weight_layout
from benchbase.specs import ModelSpec
from benchbase_torch_ds2.ds2 import weights
from benchbase_torch_ds2.ds2.model import DeepSpeech2
from benchbase_torch_ds2.family import Autocast, ToDevice
from benchbase_torch_ds2.strategies import synchronizes_statistics

__all__ = ["DS2Family"]


class DS2Family:
    name = "ds2"
    summary = "DS2 (CTC)"
    # bf16 and fp16 are torch.autocast's mixed precision (the backend's); int8-emulated is the model's.
    precisions = frozenset({"fp32", "tf32", "bf16", "fp16", "int8-emulated"})
    layout = weight_layout
    cuda_graphs = True  # convolution, cuDNN's LSTMs, BatchNorm and the output layer: static in the input's shape

    def build_network(self, context: BuildContext) -> DeepSpeech2:
        if context.plan.distributed:
            # The synchronized BatchNorm uses torch.distributed.nn's differentiable all_reduce, which
            # PyTorch marks deprecated in favour of a private module; it is the public one that works on gloo.
            warnings.filterwarnings("ignore", message="torch.distributed.nn.functional.all_reduce is deprecated")
        return DeepSpeech2(context.model, context.feature_dimension, distributed=synchronizes_statistics(context))

    def training_loss(self, model: torch.nn.Module, batch: Batch, spec: ModelSpec, to_device: ToDevice,
                      autocast: Autocast) -> torch.Tensor:
        features = to_device(batch.features)
        labels = to_device(batch.labels)
        output_lengths = to_device(batch.output_lengths).long()
        label_lengths = to_device(batch.label_lengths).long()
        with autocast():
            log_probs = model(features)
        # mean_over_batch: each utterance's NLL summed over frames, then averaged over the batch;
        # zero_infinity is the spec's "zero" for impossible alignments. Always in float32.
        return torch.nn.functional.ctc_loss(
            log_probs.float().transpose(0, 1), labels, output_lengths, label_lengths,
            blank=spec.ctc_blank_index, reduction="sum", zero_infinity=True,
        ) / batch.size

    def predict(self, network: torch.nn.Module, features: torch.Tensor, feature_lengths: torch.Tensor) -> torch.Tensor:
        return network(features)

    def export_weights(self, network: torch.nn.Module) -> dict[str, np.ndarray]:
        return weights.export_weights(network)

    def import_weights(self, network: torch.nn.Module, neutral: Mapping[str, np.ndarray]) -> None:
        weights.import_weights(network, neutral)
