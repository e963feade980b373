"""The next epoch's batches are produced while the current epoch's last step trains (``RunEpochs``),
so that its first batch does not wait for its readers to start; starting early changes no batch."""

from __future__ import annotations

import threading

import numpy as np
from test_plugins import LinearCTCBackend, stand_in_workload

import benchbase
from benchbase.data.pipeline import BatchPipeline, RunEpochs
from benchbase.data.store import FeatureStore
from benchbase.harness import run_benchmark
from benchbase.plugin_host import get_plugin_manager
from benchbase.plugin_host.registry import collect_registry
from benchbase.specs import RunConfig


def _pipeline(store, workload) -> BatchPipeline:
    return BatchPipeline(FeatureStore(store), ("train",), 8, model=workload.model, seed=3)


def _producers() -> set[str]:
    return {thread.name for thread in threading.enumerate() if thread.name.startswith("benchbase-pipeline-")}


def test_an_epoch_started_early_yields_the_batches_of_one_started_when_taken(small_store, mini_workload):
    early = RunEpochs(_pipeline(small_store, mini_workload), last_epoch=2)
    early.start(2)
    first = list(early.take(1))
    started_early = list(early.take(2))
    taken_cold = list(RunEpochs(_pipeline(small_store, mini_workload), last_epoch=2).take(2))
    assert len(first) > 1 and len(started_early) == len(taken_cold)
    for a, b in zip(started_early, taken_cold):
        assert a.utterance_ids == b.utterance_ids
        np.testing.assert_array_equal(a.features, b.features)


def test_nothing_past_the_last_epoch_starts_and_close_stops_what_did(small_store, mini_workload):
    before = _producers()
    epochs = RunEpochs(_pipeline(small_store, mini_workload), last_epoch=2)
    epochs.start(3)
    assert _producers() == before
    epochs.start(2)
    epochs.start(2)  # once
    assert len(_producers() - before) == 1
    epochs.close()
    assert _producers() == before


class EpochWatchingBackend(LinearCTCBackend):
    """LinearCTCBackend that notes, at each training step, which epochs' producers had been started."""

    name = "epoch-watching"
    steps: list[tuple[int, frozenset[int]]] = []

    def train_step(self, batch):
        EpochWatchingBackend.steps.append((len(EpochWatchingBackend.steps) + 1, frozenset(STARTED)))
        return super().train_step(batch)


STARTED: list[int] = []


class EpochWatchingPlugin:
    @benchbase.hookimpl
    def register_backends(self, register):
        register(EpochWatchingBackend)


def test_the_next_epoch_starts_before_the_last_step_of_this_one(tmp_path, small_store, monkeypatch):
    """Without it the next epoch started after the last step (before the evaluation): its first batch
    waited for the readers to start, on the clock, in a run that evaluates seldom."""
    original = BatchPipeline.epoch

    def recording(pipeline, epoch, skip=0):
        if epoch > 0:  # the training pipeline's epochs; evaluation passes are epoch 0
            STARTED.append(epoch)
        return original(pipeline, epoch, skip=skip)

    monkeypatch.setattr(BatchPipeline, "epoch", recording)
    STARTED.clear()
    EpochWatchingBackend.steps = []
    manager = get_plugin_manager(load_entrypoints=False)
    manager.register(EpochWatchingPlugin())
    registry = collect_registry(manager)
    workload = stand_in_workload(registry.workload("ds2-mini"), max_epochs=3)
    config = RunConfig(workload=workload, backend=EpochWatchingBackend.name, hardware=registry.profile("cpu"), seed=0,
                       out=tmp_path / "run", data=small_store, final_evaluation=False)
    run_benchmark(config, manager, registry.backend(EpochWatchingBackend.name))
    steps = EpochWatchingBackend.steps
    per_epoch = len(steps) // 3
    assert per_epoch > 1 and len(steps) == 3 * per_epoch
    assert sorted(STARTED) == [1, 2, 3]  # each epoch once, and no fourth
    for epoch in (1, 2):
        last, before_last = steps[epoch * per_epoch - 1][1], steps[epoch * per_epoch - 2][1]
        assert epoch + 1 in last and epoch + 1 not in before_last, (epoch, before_last, last)
