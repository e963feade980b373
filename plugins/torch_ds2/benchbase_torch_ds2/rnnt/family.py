"""The torch backend's RNN-T family: the transducer network, trained on the transducer loss.

``predict()`` returns the joint's encoder projection (batch, T', joint_units); the harness runs
the search on exported weights. The transducer has no BatchNorm, and its training pass is one
``forward`` call, so the training strategy's DistributedDataParallel wraps it as it wraps DS2.
Its network runs eagerly on a GPU (the packed joint's ``nonzero()``), but its loss, thousands of
tiny kernels, is replayed from CUDA graphs where the hardware profile allows them (``graphed_loss``).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import torch

from benchbase.backend import Batch, BuildContext
from benchbase.families.rnnt import weight_layout
from benchbase.specs import ModelSpec
from benchbase_torch_ds2.family import Autocast, ToDevice
from benchbase_torch_ds2.rnnt import model as transducer
from benchbase_torch_ds2.rnnt.graphed_loss import LossGraphs
from benchbase_torch_ds2.rnnt.loss import lattice_losses, mean_over_batch
from benchbase_torch_ds2.rnnt.model import RNNTransducer
from benchbase_torch_ds2.strategies import synchronizes_statistics

__all__ = ["RNNTFamily"]


class RNNTFamily:
    name = "rnnt"
    summary = "RNN-T (transducer loss)"
    precisions = frozenset({"fp32", "tf32", "bf16", "fp16", "int8-emulated"})
    """IEEE float32, TF32 matmuls on GPUs (the same code, with the matmul flag the backend sets),
    torch.autocast's bf16 and fp16 (the backend's, fp16 with its loss scaling; the LSTMs in
    bfloat16 under bf16, ``mixed_lstm``; the joint's log-softmax, and so the lattice and its loss,
    in float32), and int8-emulated (``model``)."""
    cuda_graphs = False  # the network's: its packed joint's nonzero() waits for the device (the loss's: graphed_loss)
    layout = weight_layout

    def build_network(self, context: BuildContext) -> RNNTransducer:
        network = RNNTransducer(context.model, context.feature_dimension, distributed=synchronizes_statistics(context))
        graphs = context.plan.kind == "cuda" and context.plan.cuda_graphs  # the hardware profile's switch
        network.loss_graphs = LossGraphs(context.max_label_length) if graphs else None
        return network

    def training_loss(self, model: torch.nn.Module, batch: Batch, spec: ModelSpec, to_device: ToDevice,
                      autocast: Autocast) -> torch.Tensor:
        """The batch's mean transducer loss (``loss_reduction``), float32; ``batch.output_lengths``
        (the harness's ``output_frames``) bound each utterance's frames. The network runs in the
        run's mixed precision (``autocast``); its lattice comes out float32."""
        labels = to_device(batch.labels).long()
        output_lengths, label_lengths = to_device(batch.output_lengths).long(), to_device(batch.label_lengths).long()
        with autocast():
            blank, emit = model(to_device(batch.features), labels, output_lengths, label_lengths)
        network = getattr(model, "module", model)  # DistributedDataParallel holds the network as .module
        losses = network.loss_graphs or lattice_losses  # graphs on a CUDA device only; eager elsewhere
        return mean_over_batch(losses(blank, emit, output_lengths, label_lengths))

    def predict(self, network: torch.nn.Module, features: torch.Tensor, feature_lengths: torch.Tensor) -> torch.Tensor:
        return network.encode(features)

    def export_weights(self, network: torch.nn.Module) -> dict[str, np.ndarray]:
        return transducer.export_weights(network)

    def import_weights(self, network: torch.nn.Module, weights: Mapping[str, np.ndarray]) -> None:
        transducer.import_weights(network, weights)
