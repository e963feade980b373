"""What ``JaxBackend`` asks of a model family: the protocol each family folder's ``FAMILY`` meets.

The backend keeps everything that does not depend on the family: the device and its threads,
the training state's pytree and its checkpoints, the training step around the loss
(``benchbase_jax_ds2.training``), the optimizers and their schedule, the padded shapes and the
warm-up over them. A family supplies the rest as pure functions: its initial weights, its batch
loss, its jitted predict, the batch its step takes, and its weights' neutral layout. A family's
``FAMILY`` is the module that defines them (``ds2/family.py``): nothing forwards to them.
``benchbase.families.folders.discover`` finds the families (and checks each against this
protocol); a new one is one new folder.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any, Protocol

import jax
import numpy as np

from benchbase.backend import Batch, Inputs
from benchbase.specs import ModelSpec
from benchbase_jax_ds2.shapes import Buckets
from benchbase_jax_ds2.state import TrainState

__all__ = ["BatchLoss", "ModelFamily", "Predict", "StepBatch", "TrainStep"]

StepBatch = tuple
"""The NamedTuple of arrays a family's training step takes (DS2's ``PaddedBatch``, the transducer's
``TransducerBatch``): a batch padded to a compiled shape."""

TrainStep = Callable[[TrainState, Any, np.float32], tuple[TrainState, jax.Array]]
"""A jitted (state, padded batch, learning rate) -> (state, loss) that donates the state it is given."""

BatchLoss = Callable[[dict, dict, Any, jax.Array], tuple[jax.Array, dict]]
"""A family's traced (parameters, statistics, padded batch, dropout key) -> (the batch's mean loss
over the harness's rows, the statistics this training pass leaves: BatchNorm's running moments,
int8-emulated's ranges); ``benchbase_jax_ds2.training.make_train_step`` steps on it."""

Predict = Callable[[dict, dict, jax.Array, np.int32, np.int32 | np.ndarray], jax.Array]
"""A jitted (parameters, statistics, padded features, rows, frames) -> what ``Backend.predict()``
returns, before it is cut to the caller's rows and output frames; (rows, frames) are the
family's ``predict_extent``."""


class ModelFamily(Protocol):
    name: str
    """``ModelSpec.family``; also the name of the folder the family lives in."""

    summary: str
    """What the backend's description says of it, e.g. ``DS2 (optax CTC)``."""

    precisions: frozenset[str]
    """The precisions this backend implements for the family (``Capabilities.precisions_of``)."""

    layout: ModuleType
    """``benchbase.families.<name>.weight_layout``: the neutral names, shapes and ``validate_weights``."""

    def initial_weights(self, spec: ModelSpec, feature_dimension: int, seed: int) -> dict[str, np.ndarray]:
        """The weights before the first step by their neutral names (statistics included), from ``seed``."""
        ...

    def make_batch_loss(self, spec: ModelSpec, platform: str) -> BatchLoss:
        """The loss the training step differentiates, for a device of ``platform`` ("cpu", "gpu")."""
        ...

    def make_predict(self, spec: ModelSpec, platform: str) -> Predict:
        """predict() in inference mode, for a device of ``platform``."""
        ...

    def padded_batch(self, buckets: Buckets, batch: Batch, spec: ModelSpec) -> StepBatch:
        """``batch`` padded to its bucket's shape, as host arrays, in the form the training step takes."""
        ...

    def predict_extent(self, spec: ModelSpec, inputs: Inputs,
                       buckets: Buckets) -> tuple[np.int32, np.int32 | np.ndarray]:
        """(rows, frames): how much of the padded features (``buckets.features(inputs)``) is the
        caller's batch, in the units the family's ``Predict`` masks by (an untrained int8-emulated
        model takes its ranges from it); ``frames`` is one number, or one per padded row where the
        family masks each utterance by its own length (the Conformer's attention and BatchNorm)."""
        ...

    def warm_up_label_lengths(self, label_length: int) -> Sequence[int]:
        """The label lengths of the synthetic batches whose labels are padded to ``label_length``
        that together reach every program a real batch of that shape can compile."""
        ...
