"""The torch backend's Conformer family: AlgoPerf's LibriSpeech Conformer, trained on CTC.

``predict()`` returns its per-frame log-probabilities (batch, output frames, symbols), float32;
the harness decodes them. Unlike DS2's, the network needs each utterance's length: its
attention must not read the padded frames, nor its BatchNorm average over them.
"""

from __future__ import annotations

import warnings

import torch

from benchbase.backend import Batch, BuildContext
from benchbase.families.conformer import weight_layout
from benchbase_torch_ds2.conformer import weights
from benchbase_torch_ds2.conformer.model import Conformer
from benchbase_torch_ds2.ctc import CTCFamily
from benchbase_torch_ds2.family import ToDevice
from benchbase_torch_ds2.strategies import synchronizes_statistics

__all__ = ["ConformerFamily"]


class ConformerFamily(CTCFamily):
    name = "conformer"
    summary = "Conformer (CTC)"
    # bf16 and fp16 are torch.autocast's mixed precision (the backend's); the spec has no int8 tensors.
    precisions = frozenset({"fp32", "tf32", "bf16", "fp16"})
    cuda_graphs = True  # the padding mask is computed on the device from the lengths; no host reads
    layout = weight_layout
    weights = weights

    def build_network(self, context: BuildContext) -> Conformer:
        spec = context.model  # a ConformerModelSpec in a precision of the family's (``TorchBackend.build``)
        if context.plan.distributed:
            # As DS2's: the synchronized BatchNorm's differentiable all_reduce (torch.distributed.nn)
            # is marked deprecated in favour of a private module; the public one works on gloo too.
            warnings.filterwarnings("ignore", message="torch.distributed.nn.functional.all_reduce is deprecated")
        return Conformer(spec, context.feature_dimension, synchronized=synchronizes_statistics(context))

    def network_inputs(self, batch: Batch, to_device: ToDevice) -> tuple[torch.Tensor, torch.Tensor]:
        return to_device(batch.features), to_device(batch.feature_lengths)

    def predict(self, network: torch.nn.Module, features: torch.Tensor,
                feature_lengths: torch.Tensor | None = None) -> torch.Tensor:
        """Without ``feature_lengths`` every frame counts as valid: a padded row's outputs then
        depend on its padding."""
        return network(features, feature_lengths)
