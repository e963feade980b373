"""A backend's host arrays: the pipeline pads each batch's features where the backend asks
(``Backend.host_array``; the torch backend's page-locked memory on a GPU)."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from test_plugins import LinearCTCBackend, stand_in_workload

import benchbase
from benchbase.data.pipeline import BatchPipeline, pad_batch
from benchbase.data.store import FeatureStore
from benchbase.errors import BenchbaseError
from benchbase.harness import run_benchmark
from benchbase.plugin_host import get_plugin_manager
from benchbase.plugin_host.registry import collect_registry
from benchbase.specs import RunConfig


class Arrays:
    """Hands out arrays full of garbage (the pipeline must zero the padding) and remembers them."""

    def __init__(self) -> None:
        self.given: list[np.ndarray] = []
        self.lock = threading.Lock()

    def __call__(self, shape, dtype):
        array = np.full(shape, 7.0, dtype=dtype)
        with self.lock:  # the pipeline's producer threads ask
            self.given.append(array)
        return array


def test_a_batch_is_padded_into_the_backends_array(small_store, mini_workload):
    pipeline = BatchPipeline(FeatureStore(small_store), ("train",), 8, model=mini_workload.model, seed=0)
    plain = next(iter(pipeline.epoch(0)))
    pipeline.host_arrays = arrays = Arrays()
    padded = next(iter(pipeline.epoch(0)))
    assert any(padded.features is given for given in arrays.given)
    np.testing.assert_array_equal(padded.features, plain.features)  # padding zeroed, not 7


@pytest.mark.parametrize("bad", [np.zeros((1, 2, 3), np.float32), np.zeros((2, 2, 3), np.float64)])
def test_a_wrong_host_array_is_one_clear_error(small_store, mini_workload, bad):
    store = FeatureStore(small_store)
    utterances = store.read(store.shards(("train",))[0])[:2]
    shape = (2, max(u.features.shape[0] for u in utterances), utterances[0].features.shape[1])
    bad = np.resize(bad, (2, 2, 3)) if bad.dtype == np.float64 else bad
    with pytest.raises(BenchbaseError, match=rf"host_array\({shape[0]}, {shape[1]}, {shape[2]}\) gave a"):
        pad_batch(utterances, mini_workload.model, host_arrays=lambda s, d: bad)
    assert pad_batch(utterances, mini_workload.model, host_arrays=lambda s, d: None).features.shape == shape


class HostArrayBackend(LinearCTCBackend):
    """LinearCTCBackend with host arrays of its own; remembers which batches arrived in them."""

    name = "host-arrays"

    def build(self, context):
        super().build(context)
        self.arrays = Arrays()
        self.in_own_arrays: list[bool] = []
        self.predicted_from_own_arrays = False

    def host_array(self, shape, dtype):
        return self.arrays(shape, dtype)

    def train_step(self, batch):
        self.in_own_arrays.append(any(batch.features is given for given in self.arrays.given))
        return super().train_step(batch)

    def predict(self, inputs):
        self.predicted_from_own_arrays |= any(inputs.features is given for given in self.arrays.given)
        return super().predict(inputs)

    def close(self):
        HostArrayBackend.seen = list(self.in_own_arrays)
        HostArrayBackend.predicted_from_own = self.predicted_from_own_arrays
        super().close()


class HostArrayPlugin:
    @benchbase.hookimpl
    def register_backends(self, register):
        register(HostArrayBackend)


def test_the_harness_pads_into_the_backends_arrays_after_build(tmp_path, small_store):
    """After the first epoch (whose batches the pipeline may have padded before build()), every
    training batch arrives in an array the backend handed out; no evaluation batch does (independent
    scoring reads their features again, and the backend could rewrite memory it holds)."""
    manager = get_plugin_manager(load_entrypoints=False)
    manager.register(HostArrayPlugin())
    registry = collect_registry(manager)
    workload = stand_in_workload(registry.workload("ds2-mini"), max_epochs=2)
    config = RunConfig(workload=workload, backend=HostArrayBackend.name, hardware=registry.profile("cpu"), seed=0,
                       out=tmp_path / "run", data=small_store, final_evaluation=False)
    run_benchmark(config, manager, registry.backend(HostArrayBackend.name))
    seen = HostArrayBackend.seen
    per_epoch = len(seen) // 2
    assert per_epoch and all(seen[per_epoch:]), seen
    assert HostArrayBackend.predicted_from_own is False
