"""What ``TensorFlowBackend`` asks of a model family: the protocol each family folder's ``FAMILY`` meets.

The backend keeps everything that does not depend on the family (devices, threads, the seed,
tf.distribute and its replica step, the optimizer and its schedule, fp16's loss scaling,
gradient clipping, checkpoints, the profiler). A family supplies the rest: its Keras model,
each utterance's loss inside the training step, what ``predict()`` returns, and which variables
hold its weights in benchbase's neutral layout. ``benchbase.families.folders.discover``
finds the families (and checks each against this protocol); a new one is one new folder.
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Protocol

import keras
import numpy as np
import tensorflow as tf

from benchbase.backend import BuildContext, Inputs
from benchbase.specs import ModelSpec

__all__ = ["MIXED_POLICIES", "Infer", "ModelFamily", "keras_policy"]

MIXED_POLICIES = {"bf16": "mixed_bfloat16", "fp16": "mixed_float16"}
"""Keras's mixed precision for the spec's bf16 and fp16: float32 variables, the layers' arithmetic
in the half type (BatchNormalization upcasts to float32 itself)."""


def keras_policy(spec: ModelSpec) -> str:
    """The Keras dtype policy of a family's layers in ``spec.precision``: MIXED_POLICIES' for bf16
    and fp16, float32 for every other precision (tf32 is float32 with the TF32 matmuls the backend
    enables)."""
    return MIXED_POLICIES.get(spec.precision, "float32")

Infer = Callable[[np.ndarray, np.ndarray], tf.Tensor]
"""The backend's compiled inference pass: the family's ``forward`` on features (batch, frames,
features) and their lengths (batch,), int32."""


class ModelFamily(Protocol):
    name: str
    """``ModelSpec.family``; also the name of the folder the family lives in."""

    summary: str
    """What the backend's description says of it, e.g. ``DS2 (CTC)``."""

    precisions: frozenset[str]
    """The precisions in which this backend trains the family (``Capabilities.precisions_of``)."""

    layout: ModuleType
    """``benchbase.families.<name>.weight_layout``: the neutral names, shapes and ``validate_weights``."""

    def build_model(self, context: BuildContext, fused_lstm: bool | None) -> keras.Model:
        """The model of ``context.model``, every variable created (from Keras's generator, which the
        backend has seeded), under the backend's tf.distribute scope.

        ``fused_lstm`` is ``TensorFlowBackend``'s: True or False forces the LSTM kernel
        (``benchbase_tf_ds2.lstm.SequenceLSTM``), None leaves the choice to the family.
        """
        ...

    def utterance_losses(self, model: keras.Model, features: tf.Tensor, feature_lengths: tf.Tensor,
                         output_lengths: tf.Tensor, labels: tf.Tensor, label_lengths: tf.Tensor) -> tf.Tensor:
        """Each utterance's loss (batch,), float32, from the training pass (dropout on), 0 for one
        that admits no alignment; traced inside one replica's step on its slice of the batch. The
        backend sums them and divides by the global batch. A family whose outputs at valid frames
        cannot see the padding may ignore ``feature_lengths``."""
        ...

    def forward(self, model: keras.Model, features: tf.Tensor, feature_lengths: tf.Tensor) -> tf.Tensor:
        """The model's outputs with training off (what the backend compiles, once, as ``Infer``);
        ``feature_lengths`` as ``utterance_losses``' (the Conformer's masks need them)."""
        ...

    def predict(self, infer: Infer, spec: ModelSpec, inputs: Inputs) -> np.ndarray:
        """What ``Backend.predict()`` returns for ``inputs``, float32; ``infer`` runs the model."""
        ...

    def neutral_variables(self, model: keras.Model) -> dict[str, tf.Variable]:
        """Each name of ``layout``'s, in its order -> the Keras variable that holds it (the neutral
        layout is Keras's orientation: no array is transposed). The backend exports and imports
        the weights through these."""
        ...
