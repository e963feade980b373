"""Data pipeline speed: feature extraction, loader throughput, and data wait in a real run.

1. Extraction: read + 80 log-mel/13 MFCC features of corpus utterances in this one process,
   as x real time per core (audio seconds per compute second).
2. Loader: utterances/s the harness's pipeline delivers with the `cpu` and `sys1` profiles'
   readers, prefetch buffer and batch size (streamed shuffle buffer and length bucketing),
   against what ds2-mini training consumes on this machine (torch train steps on the same
   batches, measured in the same run).
3. Data wait: one ds2-mini epoch through the harness; the share of step time its training
   loop spent waiting for batches.

    python benchmarks/data_pipeline.py [--utterances 300] [--batches 40]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import tempfile
import time
from pathlib import Path

import soundfile
from threadpoolctl import threadpool_limits

from benchbase.data.features import extract_features
from benchbase.data.pipeline import BatchPipeline
from benchbase.data.store import FeatureStore
from benchbase.data.workload_data import default_cache, ensure_workload_data
from benchbase.harness import run_benchmark
from benchbase.harness.assembly import build_context
from benchbase.harness.devices import device_plan
from benchbase.plugin_host import get_plugin_manager
from benchbase.plugin_host.registry import collect_registry
from benchbase.specs import RunConfig


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--utterances", type=int, default=300, help="Utterances for the extraction timing.")
    parser.add_argument("--batches", type=int, default=40, help="Training batches for the consumption rate.")
    args = parser.parse_args()
    manager = get_plugin_manager()
    registry = collect_registry(manager)
    workload = registry.workload("ds2-mini").model_copy(update={"max_epochs": 1})
    store_path = ensure_workload_data(workload, None, default_cache())
    store = FeatureStore(store_path)
    report = {"machine": f"{platform.node()} {platform.machine()}", "date": time.strftime("%Y-%m-%d")}
    with threadpool_limits(1):  # per core: one thread, as in each of `data prepare`'s workers
        report["extraction"] = extraction_speed(Path(store.description["source"]), workload.features,
                                                args.utterances)
    report["loader_utt_per_s"] = {
        f"{profile}{' bucketed' if buckets else ''}": loader_speed(store, workload, registry.profile(profile), buckets)
        for profile in ("cpu", "sys1") for buckets in (0, 8)
    }
    consumption = training_consumption(registry, workload, store, args.batches)
    report["ds2_mini_training_consumes_utt_per_s"] = consumption
    report["loader_over_training"] = {name: round(rate / consumption, 1)
                                      for name, rate in report["loader_utt_per_s"].items()}
    report["ds2_mini_epoch_data_wait"] = harness_data_wait(manager, registry, workload, store_path)
    print(json.dumps(report, indent=2))


def extraction_speed(corpus: Path, features, count: int) -> dict:
    files = sorted(corpus.glob("train/*/*/*.flac"))[:count]
    audio_seconds, read_seconds, extract_seconds = 0.0, 0.0, 0.0
    extract_features(soundfile.read(files[0], dtype="float32")[0], features)  # warm librosa's caches
    for path in files:
        started = time.perf_counter()
        audio, rate = soundfile.read(path, dtype="float32")
        read = time.perf_counter()
        extract_features(audio, features)
        done = time.perf_counter()
        audio_seconds += len(audio) / rate
        read_seconds += read - started
        extract_seconds += done - read
    return {
        "utterances": len(files),
        "audio_seconds": round(audio_seconds, 1),
        "x_real_time_per_core_read_and_extract": round(audio_seconds / (read_seconds + extract_seconds), 1),
        "x_real_time_per_core_extract_only": round(audio_seconds / extract_seconds, 1),
    }


def loader_speed(store, workload, profile, buckets: int) -> float:
    pipeline = profile.pipeline
    loader = BatchPipeline(store, workload.data.train, pipeline.global_batch, model=workload.model,
                           readers=pipeline.readers, prefetch=pipeline.buffer, shuffle_buffer=pipeline.shuffle_buffer,
                           seed=0, length_buckets=buckets)
    rates = []
    for epoch in range(3):
        started = time.perf_counter()
        utterances = sum(batch.size for batch in loader.epoch(epoch))
        rates.append(utterances / (time.perf_counter() - started))
    return round(statistics.median(rates), 1)


def training_consumption(registry, workload, store, count: int) -> float:
    profile = registry.profile("cpu")
    batches = list(BatchPipeline(store, workload.data.train, profile.pipeline.global_batch, model=workload.model,
                                 seed=0).epoch(0))[:count]
    backend = registry.backend("torch")()
    config = RunConfig(workload=workload, backend="torch", hardware=profile, out=Path("unused"), data=store.root)
    backend.build(build_context(config, store, device_plan(profile)))
    backend.train_step(batches[0])
    started = time.perf_counter()
    for batch in batches:
        backend.train_step(batch)
    return round(sum(batch.size for batch in batches) / (time.perf_counter() - started), 1)


def harness_data_wait(manager, registry, workload, store_path) -> dict:
    with tempfile.TemporaryDirectory() as folder:
        config = RunConfig(workload=workload, backend="torch", hardware=registry.profile("cpu"),
                           out=Path(folder) / "run", data=store_path)
        result = run_benchmark(config, manager, registry.backend("torch"))
    return result.data_wait


if __name__ == "__main__":
    main()
