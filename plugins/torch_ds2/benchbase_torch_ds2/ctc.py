"""What the torch backend's CTC families (ds2, the Conformer) share: their loss and their weights' exchange.

The counterpart of benchbase_tf_ds2.ctc and benchbase_jax_ds2.ctc: a CTC family's ``FAMILY``
subclasses ``CTCFamily`` and says only what differs, the network, what it takes besides the
features (``network_inputs``) and what ``predict()`` returns.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import ModuleType

import numpy as np
import torch

from benchbase.backend import Batch
from benchbase.specs import ModelSpec
from benchbase_torch_ds2.family import Autocast, ToDevice

__all__ = ["CTCFamily"]


class CTCFamily:
    """The ``training_loss``, ``export_weights`` and ``import_weights`` of ``family.ModelFamily`` for a
    network trained on CTC."""

    weights: ModuleType
    """The family's module with ``export_weights(network)`` and ``import_weights(network, neutral)``."""

    def network_inputs(self, batch: Batch, to_device: ToDevice) -> tuple[torch.Tensor, ...]:
        """The training forward's arguments, on the device: the features and whatever else the
        network needs (the Conformer's masks need the feature lengths)."""
        raise NotImplementedError

    def training_loss(self, model: torch.nn.Module, batch: Batch, spec: ModelSpec, to_device: ToDevice,
                      autocast: Autocast) -> torch.Tensor:
        inputs = self.network_inputs(batch, to_device)
        labels = to_device(batch.labels)
        output_lengths = to_device(batch.output_lengths).long()
        label_lengths = to_device(batch.label_lengths).long()
        with autocast():
            log_probs = model(*inputs)
        # mean_over_batch: each utterance's NLL summed over its frames, summed over the batch and
        # divided by its size; zero_infinity is the spec's "zero" for impossible alignments. In float32.
        return torch.nn.functional.ctc_loss(
            log_probs.float().transpose(0, 1), labels, output_lengths, label_lengths,
            blank=spec.blank_index, reduction="sum", zero_infinity=True,
        ) / batch.size

    def export_weights(self, network: torch.nn.Module) -> dict[str, np.ndarray]:
        return self.weights.export_weights(network)

    def import_weights(self, network: torch.nn.Module, neutral: Mapping[str, np.ndarray]) -> None:
        self.weights.import_weights(network, neutral)
