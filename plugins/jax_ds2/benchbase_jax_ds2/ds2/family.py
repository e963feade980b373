"""DS2 as ``JaxBackend`` sees it (``benchbase_jax_ds2.family.ModelFamily``): CTC training, predict()
returning the log-probabilities, one program per padded shape."""

from __future__ import annotations

import jax
import numpy as np
import optax

from benchbase.backend import Batch, Inputs
from benchbase.families.ds2 import weight_layout
from benchbase.specs import ModelSpec
from benchbase_jax_ds2.ds2 import padding, training
from benchbase_jax_ds2.family import Predict, TrainStep
from benchbase_jax_ds2.shapes import Buckets
from benchbase_jax_ds2.state import TrainState

__all__ = ["DS2Family"]


class DS2Family:
    name = "ds2"
    summary = "DS2 (optax CTC)"
    precisions = frozenset({"fp32", "tf32", "bf16", "fp16", "int8-emulated"})
    layout = weight_layout

    def initial_state(self, spec: ModelSpec, feature_dimension: int, optimizer: optax.GradientTransformation,
                      seed: int, device: jax.Device) -> TrainState:
        return training.initial_state(spec, feature_dimension, optimizer, seed, device)

    def make_train_step(self, spec: ModelSpec, optimizer: optax.GradientTransformationExtraArgs,
                        platform: str) -> TrainStep:
        return training.make_train_step(spec, optimizer, platform)

    def make_predict(self, spec: ModelSpec, platform: str) -> Predict:
        return training.make_predict(spec, platform)

    def padded_batch(self, buckets: Buckets, batch: Batch, spec: ModelSpec) -> training.PaddedBatch:
        return padding.padded_batch(buckets, batch, spec)

    def predict_extent(self, spec: ModelSpec, inputs: Inputs, buckets: Buckets) -> tuple[np.int32, np.int32]:
        """The caller's rows and conv output frames: BatchNorm's and the ranges' frames."""
        return np.int32(inputs.size), np.int32(spec.output_frames(inputs.features.shape[1]))

    def warm_up_label_lengths(self, label_length: int) -> tuple[int, ...]:
        """Full-length labels: the label lengths change no program of the padded shape."""
        return (label_length,)
