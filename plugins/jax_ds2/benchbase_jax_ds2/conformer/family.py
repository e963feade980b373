"""The Conformer as ``JaxBackend`` sees it (``benchbase_jax_ds2.family.ModelFamily``).

``predict()`` returns the per-frame log-probabilities (batch, output frames, symbols), float32,
which the harness decodes. Unlike DS2's, the network needs each utterance's length at prediction
too (``predict_extent``): its attention must not read the padded frames.
"""

from __future__ import annotations

import jax
import numpy as np
import optax

from benchbase.backend import Batch, Inputs
from benchbase.families.conformer import weight_layout
from benchbase.families.conformer.spec import ConformerModelSpec
from benchbase_jax_ds2.conformer import training
from benchbase_jax_ds2.family import Predict, TrainStep
from benchbase_jax_ds2.shapes import Buckets
from benchbase_jax_ds2.state import TrainState

__all__ = ["ConformerFamily"]


class ConformerFamily:
    name = "conformer"
    summary = "Conformer (optax CTC)"
    precisions = training.CONFORMER_PRECISIONS
    layout = weight_layout

    def initial_state(self, spec: ConformerModelSpec, feature_dimension: int,
                      optimizer: optax.GradientTransformation, seed: int, device: jax.Device) -> TrainState:
        return training.initial_state(spec, feature_dimension, optimizer, seed, device)

    def make_train_step(self, spec: ConformerModelSpec, optimizer: optax.GradientTransformationExtraArgs,
                        platform: str) -> TrainStep:
        return training.make_train_step(spec, optimizer, platform)

    def make_predict(self, spec: ConformerModelSpec, platform: str) -> Predict:
        return training.make_predict(spec, platform)

    def padded_batch(self, buckets: Buckets, batch: Batch, spec: ConformerModelSpec) -> training.ConformerBatch:
        return training.padded_batch(buckets, batch, spec)

    def predict_extent(self, spec: ConformerModelSpec, inputs: Inputs,
                       buckets: Buckets) -> tuple[np.int32, np.ndarray]:
        """The caller's rows and each padded row's feature length (0 for the rows the backend pads
        on): the attention's keys and the masks are per utterance. Padded to the bucket's rows, so
        that predict() compiles once per padded shape, as DS2's does, whatever the caller's rows."""
        return np.int32(inputs.size), training.padded_lengths(buckets, inputs)

    def warm_up_label_lengths(self, label_length: int) -> tuple[int, ...]:
        """Full-length labels: the label lengths change no program of the padded shape."""
        return (label_length,)
