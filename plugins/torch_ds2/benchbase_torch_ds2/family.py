"""What ``TorchBackend`` asks of a model family: the protocol each family folder's ``FAMILY`` meets.

The backend keeps everything that does not depend on the family (devices, threads, the seed,
the training strategy and its all-reduce, the optimizer and its schedule, mixed precision and
loss scaling, checkpoints, the profiler). A family supplies the rest: its network, the loss of
a training batch, what ``predict()`` returns, and its weights in benchbase's neutral layout.
``benchbase.families.folders.discover`` finds the families (and checks each against this protocol);
a new one is one new folder.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from types import ModuleType
from typing import Protocol

import numpy as np
import torch

from benchbase.backend import Batch, BuildContext
from benchbase.specs import ModelSpec

__all__ = ["Autocast", "ModelFamily", "ToDevice"]

ToDevice = Callable[[np.ndarray], torch.Tensor]
"""Moves a host array to the backend's device (through page-locked memory where that pays)."""

Autocast = Callable[[], AbstractContextManager]
"""Enters the run's mixed precision (torch.autocast under bf16 and fp16; nothing otherwise)."""


class ModelFamily(Protocol):
    name: str
    """``ModelSpec.family``; also the name of the folder the family lives in."""

    summary: str
    """What the backend's description says of it, e.g. ``DS2 (CTC)``."""

    precisions: frozenset[str]
    """The precisions this backend implements for the family (``Capabilities.precisions_of``)."""

    layout: ModuleType
    """``benchbase.families.<name>.weight_layout``: the neutral names, shapes and ``validate_weights``."""

    cuda_graphs: bool
    """Whether the training forward ``training_loss`` runs through ``model`` can be captured in a CUDA
    graph (``cuda_graphs``): tensors in, tensors out, shapes fixed by the inputs' and no host
    synchronization (``.item()``, a length read on the host) inside."""

    def build_network(self, context: BuildContext) -> torch.nn.Module:
        """The network of ``context.model``, on the CPU, initialized from torch's generator (which
        the backend has seeded); ``synchronizes_statistics(context)`` says whether its statistics
        are the global batch's."""
        ...

    def training_loss(self, model: torch.nn.Module, batch: Batch, spec: ModelSpec, to_device: ToDevice,
                      autocast: Autocast) -> torch.Tensor:
        """The batch's mean loss, float32, with its graph; ``model`` is the network or the training
        strategy's wrapper around it (DistributedDataParallel), which training runs forward through."""
        ...

    def predict(self, network: torch.nn.Module, features: torch.Tensor, feature_lengths: torch.Tensor) -> torch.Tensor:
        """What ``Backend.predict()`` returns for these features and their lengths (int32, on the
        device; a family whose outputs at valid frames cannot see the padding may ignore them). The
        backend has put the network in eval mode, under inference mode and the run's autocast."""
        ...

    def export_weights(self, network: torch.nn.Module) -> dict[str, np.ndarray]:
        """The network's weights by their neutral names, float32, in the neutral layout."""
        ...

    def import_weights(self, network: torch.nn.Module, weights: Mapping[str, np.ndarray]) -> None:
        """Overwrites the network's weights with ``weights``, which ``layout.validate_weights`` has passed."""
        ...
