"""The JAX backend: the benchbase contract on top of the pure functions of model and training.

The whole training state is one immutable pytree that each jitted step replaces (donating
the old one), so predict() can never disturb training, and a checkpoint is that pytree
written out.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import jax
import numpy as np

from benchbase.backend import Backend, Batch, BuildContext, Capabilities, DevicePlan, Inputs
from benchbase.errors import BenchbaseError
from benchbase.families.ds2.weight_layout import validate_weights, weight_layout
from benchbase_jax_ds2.checkpoint import read_state, write_state
from benchbase_jax_ds2.model import split_weights
from benchbase_jax_ds2.shapes import Buckets
from benchbase_jax_ds2.threads import limit_cpu_threads
from benchbase_jax_ds2.training import (
    PaddedBatch,
    TrainState,
    initial_state,
    make_optimizer,
    make_predict,
    make_train_step,
)

__all__ = ["JaxBackend"]


class JaxBackend(Backend):
    name = "jax"
    description = f"JAX {jax.__version__}: DS2 compiled with XLA, scanned LSTMs, optax CTC and AdaDelta"
    capabilities = Capabilities(devices=frozenset({"cpu", "cuda"}), max_devices=1,
                                precisions=frozenset({"fp32", "tf32", "bf16", "fp16", "int8-emulated"}),
                                process_model="single_process")

    def __init__(self) -> None:
        self._state: TrainState | None = None
        self._train_step = self._predict = None

    def build(self, context: BuildContext) -> None:
        limit_cpu_threads(context.plan.threads)  # before the first JAX call creates the CPU client
        self.device = _device(context.plan)
        self.context = context
        self.buckets = Buckets(rows=context.plan.batch_per_device * context.plan.count,
                               max_frames=context.max_frames, max_label_length=context.max_label_length)
        optimizer = make_optimizer(context.optimizer)
        self._state = initial_state(context.model, context.feature_dimension, optimizer, context.seed, self.device)
        self._train_step = make_train_step(context.model, optimizer, self.device.platform)
        self._predict = make_predict(context.model, self.device.platform)

    def train_step(self, batch: Batch) -> float:
        arrays = self.buckets.training_arrays(batch, self.context.model)
        self._state, loss = self._train_step(self._state, PaddedBatch(**jax.device_put(arrays, self.device)))
        jax.block_until_ready(self._state)
        return float(loss)

    def predict(self, inputs: Inputs) -> np.ndarray:
        features = jax.device_put(self.buckets.features(inputs), self.device)
        frames = self.context.model.output_frames(inputs.features.shape[1])
        log_probs = np.asarray(self._predict(self._state.parameters, self._state.statistics, features,
                                             np.int32(inputs.size), np.int32(frames)))
        return log_probs[: inputs.size, :frames].copy()

    def save_checkpoint(self, path: Path) -> None:
        write_state(path, self._state)

    def load_checkpoint(self, path: Path) -> None:
        self._state = jax.device_put(read_state(path, self._state), self.device)

    def parameter_count(self) -> int:
        return sum(int(value.size) for value in self._state.parameters.values())

    def export_weights(self) -> dict[str, np.ndarray]:
        weights = self._state.parameters | self._state.statistics
        layout = weight_layout(self.context.model, self.context.feature_dimension)
        return {name: np.array(weights[name], dtype=np.float32) for name in layout}

    def import_weights(self, weights: Mapping[str, np.ndarray]) -> None:
        validate_weights(weights, self.context.model, self.context.feature_dimension)
        parameters, statistics = split_weights({name: np.asarray(value, np.float32) for name, value in weights.items()})
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
    try:
        return jax.devices("cuda")[0]
    except RuntimeError:
        raise BenchbaseError("the hardware profile asks for CUDA, but JAX sees no GPU (install jax[cuda12]); "
                             "pass --device cpu") from None

