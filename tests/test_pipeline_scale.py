"""benchmarks/pipeline_scale.py's store has LibriSpeech's lengths and real features, and its model
bounds each way of reading by the stage that binds it."""

from __future__ import annotations

import numpy as np
from benchmark_scripts import load_benchmark

from benchbase.data.pipeline import BatchPipeline
from benchbase.data.store import FeatureStore

scale = load_benchmark("pipeline_scale")


def test_the_durations_are_librispeechs():
    seconds = scale.seconds_drawn(200_000, np.random.default_rng(1))
    assert 12.0 < seconds.mean() < 12.6  # LibriSpeech 960 h's training utterances: 12.3 s
    assert 12.5 < np.median(seconds) < 14.5  # most of them long, a tail of short ones
    assert 0.005 < (seconds > 16.7).mean() < 0.015 and seconds.max() <= 35.0 and seconds.min() >= 1.0


def test_the_store_is_real_features_cut_to_the_workloads_lengths(small_store, registry, tmp_path):
    workload = registry.workload("conformer")
    source = FeatureStore(small_store)
    scale._build_store(source, tmp_path / "scale", 70, workload)
    store = FeatureStore(tmp_path / "scale")
    assert store.utterance_count(("train",)) == 70 and len(store.shards(("train",))) == 2
    frames = np.concatenate([store.index(shard).frames() for shard in store.shards(("train",))])
    longest = (int(workload.data.max_duration * 16_000) - 400) // 160 + 1
    assert frames.max() <= longest and 1000 < frames.mean() < 1400
    first = store.read(store.shards(("train",))[0])[0]
    pieces = [u for shard in source.shards(("train",)) for u in source.read(shard)]
    def begins_with(piece) -> bool:
        shared = min(len(first.features), len(piece.features))
        return np.array_equal(first.features[:shared], piece.features[:shared])

    assert any(begins_with(piece) for piece in pieces)  # spoken, not noise
    batches = list(BatchPipeline(store, ("train",), 16, model=workload.model, seed=0).epoch(1))
    assert len(batches) == 4


def _stages(**per_batch_ms) -> dict:
    stages = {"batch": 100, "batches": 3, "valid_frames_per_batch": 120_000, "padded_share": 0.1}
    for name in ("read", "pad", "spec_augment", "copy_out"):
        cpu, gil = per_batch_ms.get(name, (1.0, 0.1))
        stages[name] = {"wall_ms": cpu, "cpu_ms": cpu, "interpreter_ms": gil, "gil_probe_ms": cpu}
    return stages


def test_the_gil_bounds_threads_and_not_processes():
    modelled = scale.model(_stages(read=(20.0, 10.0)))  # read: 0.2 ms an utterance, half of it holding the GIL
    host = modelled["hosts"]["64 cores"]
    assert host["threads, no SpecAugment"] == round(1 / (0.1e-3 + 0.001e-3))  # the GIL's bound
    assert host["processes, no SpecAugment"] == round(8 / (0.2e-3 + 0.01e-3 + 0.01e-3))  # 8 cores a rank
    assert modelled["demand_utt_per_s"]["per_rank_process"] == 8 * 1100
    assert modelled["demand_frames_per_s_per_rank"] == 8 * 1100 * 1200


def test_one_thread_bounds_padding_and_spec_augment():
    host = scale.model(_stages(pad=(50.0, 0.1), spec_augment=(80.0, 0.1)))["hosts"]["16 cores"]
    assert host["threads, no SpecAugment"] == round(1 / 0.5e-3)  # the producer thread pads alone
    assert host["processes, SpecAugment"] == round(1 / 0.8e-3)  # the training thread masks alone
