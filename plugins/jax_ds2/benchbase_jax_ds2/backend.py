"""The JAX backend: the benchbase contract on top of a model family's pure functions.

The whole training state is one immutable pytree that each jitted step replaces (donating
the old one), so predict() can never disturb training, and a checkpoint is that pytree
written out.

A model family is a folder (``ds2/``, ``rnnt/``) whose ``FAMILY`` supplies what differs by
family (``family.ModelFamily``): the initial weights, the batch loss, the jitted predict, the
batch the step takes, what ``predict()`` returns and the neutral weight layout. build() picks the
run's family once; everything here serves every family the same way, over the same state, step
(``training``), optimizers, buckets and checkpoints.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

import benchbase_jax_ds2
from benchbase.backend import Backend, Batch, BatchShape, BuildContext, Capabilities, DevicePlan, Inputs
from benchbase.errors import BenchbaseError
from benchbase.families.folders import discover
from benchbase_jax_ds2.checkpoint import read_state, write_state
from benchbase_jax_ds2.family import ModelFamily, StepBatch
from benchbase_jax_ds2.optimizers import make_optimizer, next_learning_rate
from benchbase_jax_ds2.shapes import Buckets, synthetic_batches
from benchbase_jax_ds2.state import TrainState, split_weights
from benchbase_jax_ds2.threads import limit_cpu_threads
from benchbase_jax_ds2.training import initial_state, make_train_step

__all__ = ["JaxBackend"]

FAMILIES = discover(benchbase_jax_ds2, "JAX", ModelFamily)
"""The model families this package's folders hold: what the capabilities and the description name."""


class JaxBackend(Backend):
    name = "jax"
    description = f"JAX {jax.__version__}: {FAMILIES.summaries()}, compiled with XLA"
    capabilities = Capabilities(families=frozenset(FAMILIES), optimizers=frozenset({"adadelta", "adamw"}),
                                devices=frozenset({"cpu", "cuda"}), max_devices=1,
                                precisions=FAMILIES.all_precisions(), family_precisions=FAMILIES.narrower_precisions(),
                                process_model="single_process")

    @classmethod
    def visible_devices(cls, kind: str) -> int | None:
        """JAX's GPUs (its CUDA plugin honours CUDA_VISIBLE_DEVICES); None for the CPU, which
        one process uses whole. Listing them creates JAX's clients, so a CUDA plan's CPU client
        keeps XLA's default threads: its CPU work is the host side of a GPU run."""
        if kind == "cpu":
            return None
        return len(_cuda_devices())

    def __init__(self) -> None:
        self._state: TrainState | None = None
        self._family: ModelFamily | None = None
        self._train_step = self._predict = None

    def build(self, context: BuildContext) -> None:
        limit_cpu_threads(context.plan.threads)  # before the first JAX call creates the CPU client
        self.device = _device(context.plan)
        self.context = context
        self.buckets = Buckets(rows=context.plan.batch_per_device * context.plan.count,
                               max_frames=context.max_frames, max_label_length=context.max_label_length)
        optimizer = make_optimizer(context.optimizer)
        self._family = family = FAMILIES.for_model(context.model)
        self._state = initial_state(family.initial_weights(context.model, context.feature_dimension, context.seed),
                                    context.model, optimizer, context.seed, self.device)
        self._train_step = make_train_step(context.model, optimizer,
                                           family.make_batch_loss(context.model, self.device.platform))
        self._predict = family.make_predict(context.model, self.device.platform)

    def train_step(self, batch: Batch) -> float:
        learning_rate = next_learning_rate(self.context.optimizer, self._state.optimizer)
        self._state, loss = self._train_step(self._state, self._padded(batch), learning_rate)
        jax.block_until_ready(self._state)
        return float(loss)

    def warm_up(self, shapes: Sequence[BatchShape]) -> None:
        """Compile the training step and predict() for every program these shapes need: each
        distinct padded shape once, on zeros (``synthetic_batches``), the step on a copy of the
        state (it donates the state it is given), whose result is dropped."""
        learning_rate = next_learning_rate(self.context.optimizer, self._state.optimizer)
        seen: set[tuple] = set()
        for shape in shapes:
            batches = synthetic_batches(shape, self.context.model, self.context.feature_dimension,
                                        self._family.warm_up_label_lengths(shape.label_length))
            for batch in batches:
                padded = self._padded(batch)
                signature = tuple(np.shape(leaf) for leaf in jax.tree_util.tree_leaves(padded))
                if signature not in seen:
                    seen.add(signature)
                    scratch = jax.tree_util.tree_map(jnp.copy, self._state)
                    jax.block_until_ready(self._train_step(scratch, padded, learning_rate))
            inputs = batches[0].inputs()
            predicted = ("predict", self.buckets.features(inputs).shape)
            if predicted not in seen:
                seen.add(predicted)
                self.predict(inputs)

    def _padded(self, batch: Batch) -> StepBatch:
        """The batch padded to its bucket's shape, on the device."""
        return jax.device_put(self._family.padded_batch(self.buckets, batch, self.context.model), self.device)

    def predict(self, inputs: Inputs) -> np.ndarray:
        """The family's predict() output (DS2's log-probabilities, the transducer's encoder projection)
        cut to the caller's rows and output frames."""
        model = self.context.model
        features = jax.device_put(self.buckets.features(inputs), self.device)
        outputs = np.asarray(self._predict(self._state.parameters, self._state.statistics, features,
                                           *self._family.predict_extent(model, inputs, self.buckets)))
        return outputs[: inputs.size, : model.output_frames(inputs.features.shape[1])].copy()

    def save_checkpoint(self, path: Path) -> None:
        write_state(path, self._state)

    def load_checkpoint(self, path: Path) -> None:
        self._state = jax.device_put(read_state(path, self._state), self.device)

    def parameter_count(self) -> int:
        return sum(int(value.size) for value in self._state.parameters.values())

    def export_weights(self) -> dict[str, np.ndarray]:
        weights = self._state.parameters | self._state.statistics
        layout = self._family.layout.weight_layout(self.context.model, self.context.feature_dimension)
        return {name: np.array(weights[name], dtype=np.float32) for name in layout}

    def import_weights(self, weights: Mapping[str, np.ndarray]) -> None:
        self._family.layout.validate_weights(weights, self.context.model, self.context.feature_dimension)
        neutral = {name: np.asarray(value, np.float32) for name, value in weights.items()}
        # Running statistics (BatchNorm's, int8-emulated's ranges; the transducer has only ranges) are not parameters.
        parameters, statistics = split_weights(neutral)
        placed = jax.device_put((parameters, statistics), self.device)
        self._state = self._state._replace(parameters=placed[0], statistics=placed[1])

    def devices_in_use(self) -> tuple[str, ...]:
        if self._state is None:
            return ()
        if self.device.platform == "cpu":
            return (f"cpu:{self.device.id} (XLA, threads: {self.context.plan.threads or 'all'})",)
        return (f"cuda:{self.device.id} {self.device.device_kind}",)

    def close(self) -> None:
        self._state = None
        self._train_step = self._predict = None
        jax.clear_caches()


def _device(plan: DevicePlan) -> jax.Device:
    if plan.count != 1:
        raise BenchbaseError(f"the JAX backend trains on one device; the hardware profile names {plan.count}")
    if plan.kind == "cpu":
        return jax.devices("cpu")[0]
    devices = _cuda_devices()
    if not devices:
        raise BenchbaseError("the hardware profile asks for CUDA, but JAX sees no GPU (install a CUDA build "
                             "of JAX, e.g. jax[cuda13]); pass --device cpu")
    return devices[0]


def _cuda_devices() -> list[jax.Device]:
    """JAX's CUDA devices; none where its CUDA plugin is missing or finds no GPU (JAX then raises)."""
    try:
        return list(jax.devices("cuda"))
    except RuntimeError:
        return []

