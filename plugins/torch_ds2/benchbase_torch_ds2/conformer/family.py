"""The torch backend's Conformer family: AlgoPerf's LibriSpeech Conformer, trained on CTC.

``predict()`` returns its per-frame log-probabilities (batch, output frames, symbols), float32;
the harness decodes them. Unlike DS2's, the network needs each utterance's length: its
attention must not read the padded frames, nor its BatchNorm average over them.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping

import numpy as np
import torch

from benchbase.backend import Batch, BuildContext
from benchbase.errors import BenchbaseError
from benchbase.families.conformer import weight_layout
from benchbase.families.conformer.spec import ConformerModelSpec
from benchbase.specs import ModelSpec
from benchbase_torch_ds2.conformer import weights
from benchbase_torch_ds2.conformer.model import Conformer
from benchbase_torch_ds2.family import Autocast, ToDevice
from benchbase_torch_ds2.strategies import synchronizes_statistics

__all__ = ["ConformerFamily"]


class ConformerFamily:
    name = "conformer"
    summary = "Conformer (CTC)"
    # bf16 and fp16 are torch.autocast's mixed precision (the backend's); the spec has no int8 tensors.
    precisions = frozenset({"fp32", "tf32", "bf16", "fp16"})
    cuda_graphs = True  # the padding mask is computed on the device from the lengths; no host reads
    layout = weight_layout

    def build_network(self, context: BuildContext) -> Conformer:
        spec, precision = context.model, context.model.precision
        if not isinstance(spec, ConformerModelSpec):
            raise TypeError(f"a conformer network needs a ConformerModelSpec, not {type(spec).__name__}")
        if precision not in self.precisions:
            raise BenchbaseError(f"the torch backend trains conformer in {' or '.join(sorted(self.precisions))} "
                                 f"only, not {precision}")
        if context.plan.distributed:
            # As DS2's: the synchronized BatchNorm's differentiable all_reduce (torch.distributed.nn)
            # is marked deprecated in favour of a private module; the public one works on gloo too.
            warnings.filterwarnings("ignore", message="torch.distributed.nn.functional.all_reduce is deprecated")
        return Conformer(spec, context.feature_dimension, synchronized=synchronizes_statistics(context))

    def training_loss(self, model: torch.nn.Module, batch: Batch, spec: ModelSpec, to_device: ToDevice,
                      autocast: Autocast) -> torch.Tensor:
        features, feature_lengths = to_device(batch.features), to_device(batch.feature_lengths)
        labels = to_device(batch.labels)
        output_lengths = to_device(batch.output_lengths).long()
        label_lengths = to_device(batch.label_lengths).long()
        with autocast():
            log_probs = model(features, feature_lengths)
        # As DS2's: each utterance's NLL summed over its frames, summed over the batch and divided
        # by its size; zero_infinity is the spec's "zero" for impossible alignments. In float32.
        return torch.nn.functional.ctc_loss(
            log_probs.float().transpose(0, 1), labels, output_lengths, label_lengths,
            blank=spec.blank_index, reduction="sum", zero_infinity=True,
        ) / batch.size

    def predict(self, network: torch.nn.Module, features: torch.Tensor,
                feature_lengths: torch.Tensor | None = None) -> torch.Tensor:
        """Without ``feature_lengths`` every frame counts as valid: a padded row's outputs then
        depend on its padding."""
        return network(features, feature_lengths)

    def export_weights(self, network: torch.nn.Module) -> dict[str, np.ndarray]:
        return weights.export_weights(network)

    def import_weights(self, network: torch.nn.Module, neutral: Mapping[str, np.ndarray]) -> None:
        weights.import_weights(network, neutral)
