"""The RNN transducer as ``JaxBackend`` sees it (``benchbase_jax_ds2.family.ModelFamily``): the
transducer loss over a packed joint, predict() returning the joint's encoder projection (the
harness runs the search on exported weights), one program per capacity of the packed joint."""

from __future__ import annotations

import jax
import numpy as np
import optax

from benchbase.backend import Batch, Inputs
from benchbase.families.rnnt import weight_layout
from benchbase.families.rnnt.spec import RNNTModelSpec
from benchbase_jax_ds2.family import Predict, TrainStep
from benchbase_jax_ds2.rnnt import padding, training
from benchbase_jax_ds2.shapes import Buckets
from benchbase_jax_ds2.state import TrainState

__all__ = ["RNNTFamily"]


class RNNTFamily:
    name = "rnnt"
    summary = "RNN-T (transducer loss)"
    precisions = training.TRANSDUCER_PRECISIONS
    layout = weight_layout

    def initial_state(self, spec: RNNTModelSpec, feature_dimension: int, optimizer: optax.GradientTransformation,
                      seed: int, device: jax.Device) -> TrainState:
        return training.initial_state(spec, feature_dimension, optimizer, seed, device)

    def make_train_step(self, spec: RNNTModelSpec, optimizer: optax.GradientTransformationExtraArgs,
                        platform: str) -> TrainStep:
        return training.make_train_step(spec, optimizer, platform)

    def make_predict(self, spec: RNNTModelSpec, platform: str) -> Predict:
        return training.make_predict(spec, platform)

    def padded_batch(self, buckets: Buckets, batch: Batch, spec: RNNTModelSpec) -> training.TransducerBatch:
        return padding.padded_batch(buckets, batch, spec)

    def predict_extent(self, spec: RNNTModelSpec, inputs: Inputs, buckets: Buckets) -> tuple[np.int32, np.int32]:
        """The caller's rows and feature frames: the encoder's ranges are over its input's frames."""
        return np.int32(inputs.size), np.int32(inputs.features.shape[1])

    def warm_up_label_lengths(self, label_length: int) -> list[int]:
        return padding.warm_up_label_lengths(label_length)
