"""The torch backend's RNN-T family: what ``TorchBackend`` does differently for ``family: rnnt``.

``TorchBackend`` keeps everything that does not depend on the family (devices, threads, the
seed, DistributedDataParallel and its timed all-reduce, the optimizer, checkpoints, the
profiler) and asks this module for the four things that do: the network, the training loss,
what ``predict()`` returns and the neutral weight layout. The transducer model has no
BatchNorm, and its training pass is one ``forward`` call, so DDP wraps it as it wraps DS2.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np
import torch

from benchbase.backend import Batch, BuildContext
from benchbase.errors import BenchbaseError
from benchbase.families.rnnt.spec import RNNTModelSpec
from benchbase.families.rnnt.weight_layout import validate_weights
from benchbase_torch_ds2.rnnt import model as transducer
from benchbase_torch_ds2.rnnt.loss import lattice_losses, mean_over_batch
from benchbase_torch_ds2.rnnt.model import RNNTransducer
from benchbase_torch_ds2.strategies import synchronizes_statistics

__all__ = ["TRANSDUCER_PRECISIONS", "build_network", "encoder_outputs", "export_weights", "import_weights",
           "training_loss"]

TRANSDUCER_PRECISIONS = frozenset({"fp32", "tf32", "int8-emulated"})
"""What the torch backend implements for rnnt: IEEE float32, TF32 matmuls on GPUs (the same code,
with the matmul flag the backend sets) and int8-emulated (``model``). Mixed precision is DS2's only."""


def build_network(context: BuildContext) -> RNNTransducer:
    """The transducer of ``context.model``, initialized from torch's generator (seeded by the caller)."""
    spec, precision = context.model, context.model.precision
    if not isinstance(spec, RNNTModelSpec):
        raise TypeError(f"an rnnt network needs an RNNTModelSpec, not {type(spec).__name__}")
    if precision not in TRANSDUCER_PRECISIONS:
        raise BenchbaseError(f"the torch backend trains rnnt in {' or '.join(sorted(TRANSDUCER_PRECISIONS))} only, "
                             f"not {precision}")
    network = RNNTransducer(spec, context.feature_dimension, distributed=synchronizes_statistics(context))
    network.train()
    return network


def training_loss(model: torch.nn.Module, batch: Batch, tensor: Callable[[np.ndarray], torch.Tensor]) -> torch.Tensor:
    """The batch's mean transducer loss (``loss_reduction``), float32, with its graph.

    ``model`` is the network or its DDP wrapper; ``tensor`` moves a numpy array to the device.
    ``batch.output_lengths`` (the harness's ``output_frames``) bound each utterance's frames.
    """
    labels = tensor(batch.labels).long()
    output_lengths, label_lengths = tensor(batch.output_lengths).long(), tensor(batch.label_lengths).long()
    blank, emit = model(tensor(batch.features), labels, output_lengths, label_lengths)
    return mean_over_batch(lattice_losses(blank, emit, output_lengths, label_lengths))


def encoder_outputs(network: RNNTransducer, features: torch.Tensor) -> torch.Tensor:
    """What ``predict()`` returns: the joint's encoder projection (batch, T', joint_units)."""
    return network.encode(features)


def export_weights(network: RNNTransducer) -> dict[str, np.ndarray]:
    return transducer.export_weights(network)


def import_weights(network: RNNTransducer, weights: Mapping[str, np.ndarray], feature_dimension: int) -> None:
    validate_weights(weights, network.spec, feature_dimension)
    transducer.import_weights(network, weights)
