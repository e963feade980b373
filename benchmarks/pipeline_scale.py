"""The input pipeline at scale: can one host's cores feed eight fast GPUs full-length utterances?

The training pipeline alone (no model): ``BatchPipeline`` delivering padded batches of full-length
utterances, with reader threads or reader processes, the shuffle buffer or length buckets, and
SpecAugment (AlgoPerf's masks, ``training_batch`` on the consuming thread, as the training loop
applies it) or not; then each stage's cost per batch on one thread and how much of it holds the
GIL; then a model of what a 16- and a 64-core host can feed against 8 GPUs of 1,100 utterances a
second (the full ds2 in PyTorch on one H200).

The store. LibriSpeech's training utterances average 12.3 s (most 10-16.7 s, a tail of short
ones, about 1% longer, up to 35 s); the synthetic corpus's grammar speaks 5-12 words (2.7 s on
average), and its long corpus (`gpu_bundle.py`, 36 words a line) 9.4-16.4 s, a narrow band
without LibriSpeech's spread, after speaking hours of audio. So the store is built here, once, by
the project's store writer (``write_shard``) from real generated features: the cached
`conformer-mini` store's training utterances (80 log-mel bands, as the full `conformer`),
concatenated and cut to durations drawn from a LibriSpeech-like distribution (``seconds_drawn``)
less those over the `conformer` workload's max_duration (16.7 s, which `data prepare` drops: about
1%), their labels and transcripts concatenated alike, with that store's statistics. The pipeline's
cost depends on the utterances' lengths and bytes, not on what they say. It is cached under
BENCHBASE_CACHE (~/.cache/benchbase) as pipeline-scale-vV-N-...: 3,072 utterances are about 600 MB.

    python benchmarks/pipeline_scale.py [--utterances 3072] [--repeats 1] [--json PATH]

Prints one JSON object: the store (utterances, seconds: mean, median, p99, longest), ``stages``
(per batch of 32 and 256: milliseconds of wall, of thread CPU, of the interpreter's work that
holds the GIL, and the GIL a probe thread saw held, for reading, padding, SpecAugment and, for
reader processes, the copy out of shared memory), ``throughput`` (per
configuration: utterances and valid frames a second, the padded share, the run's process CPU per
utterance and, with reader processes, the workers'), and ``model``: its assumptions, the bounds
per stage, and what threads and processes deliver per rank on 16 and 64 cores. The lead runs it on
an idle machine; a loaded machine's numbers are rough. Reader processes start with each epoch (a pool
and its shared blocks per epoch): the timing leaves out each epoch's first WARM_BATCHES batches, which
covers the workers' start, but not the first touch of each shared block's pages, which a short epoch
here pays for and a 960 h epoch of 1,100 batches of 256 hardly does.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import resource
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import psutil

from benchbase.data.augmentation import spec_augment, training_batch
from benchbase.data.pipeline import BatchPipeline, pad_batch
from benchbase.data.store import (
    FORMAT_VERSION,
    SHARD_SIZE,
    STATS_FILE,
    STORE_FILE,
    FeatureStore,
    Utterance,
    read_shard,
    write_shard,
)
from benchbase.data.workload_data import default_cache, ensure_workload_data
from benchbase.plugin_host import get_plugin_manager
from benchbase.plugin_host.registry import collect_registry
from benchbase.specs import SpecAugmentSpec

FRAMES_PER_SECOND = 100
"""The features' rate (10 ms hop), for the store's description."""
BATCHES = (32, 256)
"""AlgoPerf's per-device batch and its global batch for the Conformer."""
GPU_UTTERANCES_PER_SECOND = 1100
"""What the full ds2 in PyTorch consumes on one H200 (full-length utterances)."""
GPUS = 8
HOST_CORES = (16, 64)
BUCKETS = 6
"""The full `conformer` workload's data.length_buckets."""
WARM_BATCHES = 2
"""Batches of each configuration left out of its timing: the readers' (or workers') start."""
STORE_VERSION = 2


# ---------------------------------------------------------------------------------------------- the store

def seconds_drawn(count: int, rng: np.random.Generator) -> np.ndarray:
    """Durations shaped like LibriSpeech 960 h's training utterances: 16.7 s less a gamma-distributed
    shortfall (shape 1.5, scale 3 s: most between 10 and 16.7 s, a tail of short ones), 1% of them
    uniform between 16.7 and 35 s; at least 1 s. The mean comes out near LibriSpeech's 12.3 s."""
    body = 16.7 - rng.gamma(1.5, 3.0, count)
    longer = rng.uniform(16.7, 35.0, count)
    return np.clip(np.where(rng.random(count) < 0.01, longer, body), 1.0, 35.0)


def scale_store(utterances: int) -> Path:
    """The store of ``utterances`` LibriSpeech-length utterances, built once into the cache."""
    registry = collect_registry(get_plugin_manager(load_entrypoints=False))
    source = ensure_workload_data(registry.workload("conformer-mini"), None, default_cache())
    workload = registry.workload("conformer")
    store = default_cache() / f"pipeline-scale-v{STORE_VERSION}-{utterances}-{source.name}"
    if not FeatureStore.exists(store):
        partial = store.with_name(f".{store.name}.partial-{os.getpid()}")
        shutil.rmtree(partial, ignore_errors=True)
        try:
            _build_store(FeatureStore(source), partial, utterances, workload)
            partial.rename(store)
        finally:
            shutil.rmtree(partial, ignore_errors=True)
    return store


def _build_store(source: FeatureStore, out: Path, count: int, workload) -> None:
    rng = np.random.default_rng(0)
    pieces = [u for shard in source.shards(("train",)) for u in read_shard(shard)]  # raw: normalized when read
    seconds = seconds_drawn(2 * count, rng)
    seconds = seconds[seconds <= workload.data.max_duration][:count]
    features = workload.features  # frames as the front end counts them (benchbase.data.features)
    frames = (np.floor(seconds * features.sample_rate).astype(int) - features.window) // features.hop + 1
    out.mkdir(parents=True)
    shards = []
    for start in range(0, count, SHARD_SIZE):
        made = [_concatenated(pieces, int(length), rng, start + offset)
                for offset, length in enumerate(frames[start:start + SHARD_SIZE])]
        shards.append(f"train-{start // SHARD_SIZE:05d}.npz")
        write_shard(out / shards[-1], made)
    shutil.copy(source.root / STATS_FILE, out / STATS_FILE)
    description = {"version": FORMAT_VERSION, "source": str(source.root),
                   "built_by": "benchmarks/pipeline_scale.py: real features concatenated to LibriSpeech's lengths",
                   "splits": {"train": {"shards": shards, "utterances": count}}}
    (out / STORE_FILE).write_text(json.dumps(description, indent=2))


def _concatenated(pieces: list[Utterance], frames: int, rng: np.random.Generator, number: int) -> Utterance:
    """Randomly chosen utterances one after another, cut to ``frames``."""
    chosen: list[Utterance] = []
    while sum(len(u.features) for u in chosen) < frames:
        chosen.append(pieces[int(rng.integers(len(pieces)))])
    return Utterance(f"scale-{number:06d}", np.concatenate([u.features for u in chosen])[:frames],
                     np.concatenate([u.labels for u in chosen]), " ".join(u.transcript for u in chosen))


def describe_store(store: FeatureStore) -> dict:
    seconds = np.concatenate([store.index(shard).frames() for shard in store.shards(("train",))]) / FRAMES_PER_SECOND
    return {"root": str(store.root), "utterances": int(len(seconds)), "mean_s": round(float(seconds.mean()), 2),
            "median_s": round(float(np.median(seconds)), 2), "p99_s": round(float(np.percentile(seconds, 99)), 2),
            "longest_s": round(float(seconds.max()), 2), "hours": round(float(seconds.sum()) / 3600, 2)}


# ---------------------------------------------------------------------------------------------- stages

def stage_costs(store: FeatureStore, model, batch: int, count: int) -> dict:
    """Per batch of randomly chosen utterances (no bucketing), one thread: each stage's milliseconds of
    wall and of this thread's CPU; ``gil_probe_ms``, the GIL held by the probe's measure
    (``gil_held_seconds``); and ``interpreter_ms``, the thread's CPU for the same stage on the same
    utterances cut to TINY_FRAMES frames, the work that does not scale with the bytes: NumPy releases
    the GIL in its casts, arithmetic and copies of large arrays, so this is the time that holds it."""
    picks = _random_picks(store, batch, count)
    real, padded = _stage_work(store, model, picks)
    with tempfile.TemporaryDirectory() as folder:
        tiny, _ = _stage_work(_tiny_copy(store, Path(folder)), model, picks, Path(folder))
        frames = [int(b.feature_lengths.sum()) for b in padded]
        costs = {"batch": batch, "batches": count, "valid_frames_per_batch": round(statistics.mean(frames)),
                 "padded_share": round(1 - sum(frames) / sum(b.features.shape[0] * b.features.shape[1]
                                                             for b in padded), 3)}
        for name, stage in real.items():
            wall, cpu = _timed(stage, count)
            costs[name] = {"wall_ms": round(wall * 1e3 / count, 2), "cpu_ms": round(cpu * 1e3 / count, 2),
                           "interpreter_ms": round(_timed(tiny[name], count)[1] * 1e3 / count, 2),
                           "gil_probe_ms": round(gil_held_seconds(stage, count) * 1e3 / count, 2)}
    return costs


TINY_FRAMES = 8


def _random_picks(store: FeatureStore, batch: int, count: int) -> list[list[tuple[Path, int]]]:
    rng = np.random.default_rng(batch)
    positions = [(shard, i) for shard in store.shards(("train",)) for i in range(len(store.index(shard)))]
    return [[positions[i] for i in rng.choice(len(positions), batch, replace=False)] for _ in range(count)]


def _stage_work(store: FeatureStore, model, picks: list, moved_to: Path | None = None) -> tuple[dict, list]:
    """Each stage as a function of the batch's number, and the padded batches; ``moved_to``: the
    picks' shards are this store's, of the same names in that folder."""
    if moved_to is not None:
        picks = [[(moved_to / shard.name, i) for shard, i in batch] for batch in picks]
    read = [store.read_utterances(p) for p in picks]  # warms the page cache: reads below are from memory
    padded = [pad_batch(u, model) for u in read]
    spec = SpecAugmentSpec()
    work: dict[str, Callable[[int], object]] = {
        "read": lambda i: store.read_utterances(picks[i]),
        "pad": lambda i: pad_batch(read[i], model),
        "spec_augment": lambda i: spec_augment(padded[i], spec, 0, 1, i),
        "copy_out": lambda i: np.copyto(np.empty_like(padded[i].features), padded[i].features),
    }
    return work, padded


def _tiny_copy(store: FeatureStore, folder: Path) -> FeatureStore:
    """``store`` with every utterance cut to its first TINY_FRAMES frames, in ``folder``."""
    for shard in store.shards(("train",)):
        write_shard(folder / shard.name, [dataclasses.replace(u, features=u.features[:TINY_FRAMES])
                                          for u in read_shard(shard)])
    shutil.copy(store.root / STATS_FILE, folder / STATS_FILE)
    shutil.copy(store.root / STORE_FILE, folder / STORE_FILE)
    return FeatureStore(folder)


def _timed(stage: Callable[[int], object], count: int) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), time.thread_time()
    for i in range(count):
        stage(i)
    return time.perf_counter() - wall, time.thread_time() - cpu


def gil_held_seconds(stage: Callable[[int], object], count: int, tries: int = 3) -> float:
    """Seconds ``stage`` held the GIL over ``count`` calls: a probe thread spins in Python beside it,
    and the GIL time it lost is what the stage held (the median of ``tries``, each against the probe's
    rate alone just before). An upper bound: GIL hand-overs and a probe that the OS descheduled count too."""
    held = []
    switch = sys.getswitchinterval()
    sys.setswitchinterval(0.0005)  # hand-overs every 0.5 ms, not 5: less of the wait is a convoy's
    try:
        for _ in range(tries):
            alone_rate, _ = _probed(lambda: time.sleep(0.2))
            rate, seconds = _probed(lambda: [stage(i) for i in range(count)])
            held.append(max(0.0, 1.0 - rate / alone_rate) * seconds)
    finally:
        sys.setswitchinterval(switch)
    return statistics.median(held)


def _probed(body: Callable[[], object]) -> tuple[float, float]:
    """(the probe's spins a second while ``body`` ran, body's seconds)."""
    done = threading.Event()
    spins = [0]

    def probe() -> None:
        count = 0
        while not done.is_set():
            count += 1
        spins[0] = count

    thread = threading.Thread(target=probe)
    thread.start()
    started = time.perf_counter()
    body()
    seconds = time.perf_counter() - started
    done.set()
    thread.join()
    return spins[0] / seconds, seconds


# ---------------------------------------------------------------------------------------------- throughput

def throughput(store: FeatureStore, model, batch: int, buckets: int, augment: bool, readers: int,
               processes: int) -> dict:
    """One epoch through BatchPipeline, consumed (and masked) on this thread as the training loop does."""
    pipeline = BatchPipeline(store, ("train",), batch, model=model, readers=readers, prefetch=4,
                             shuffle_buffer=2048, seed=0, length_buckets=buckets, reader_processes=processes)
    spec = SpecAugmentSpec() if augment else None
    children_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    epoch = pipeline.epoch(1)
    utterances = frames = padded = 0
    try:
        for index, delivered in enumerate(epoch, start=1):
            trained = training_batch(delivered, spec, 0, 1, index)
            if index == WARM_BATCHES:
                started, cpu, workers_at_start = time.perf_counter(), time.process_time(), _workers_cpu()
            elif index > WARM_BATCHES:
                utterances += trained.size
                frames += int(trained.feature_lengths.sum())
                padded += trained.features.shape[0] * trained.features.shape[1]
        wall, cpu = time.perf_counter() - started, time.process_time() - cpu
    finally:
        epoch.close()
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    workers = children.ru_utime + children.ru_stime - children_before.ru_utime - children_before.ru_stime
    row = {"batch": batch, "buckets": buckets, "spec_augment": augment,
           "readers": f"{processes} processes" if processes else f"{readers} threads",
           "utt_per_s": round(utterances / wall, 1), "frames_per_s": round(frames / wall),
           "padded_share": round(1 - frames / padded, 3),
           "process_cpu_ms_per_utt": round(cpu * 1e3 / utterances, 3),
           "process_cores_busy": round(cpu / wall, 2)}
    if processes:
        row["workers_cpu_ms_per_utt"] = round((workers - workers_at_start) * 1e3 / utterances, 3)
    return row


def _workers_cpu() -> float:
    total = 0.0
    for child in psutil.Process().children(recursive=True):
        try:
            times = child.cpu_times()
            total += times.user + times.system
        except psutil.NoSuchProcess:
            pass
    return total


# ---------------------------------------------------------------------------------------------- the model

def model(stages: dict) -> dict:
    """What one rank's pipeline can deliver, stage by stage, from the per-utterance costs of the
    batch-256 stages, and what a host can feed against GPUS x GPU_UTTERANCES_PER_SECOND."""
    per_utt = {name: {kind: value / stages["batch"] / 1e3 for kind, value in cost.items()}
               for name, cost in stages.items() if isinstance(cost, dict)}
    c, g = ({name: cost[kind] for name, cost in per_utt.items()} for kind in ("cpu_ms", "interpreter_ms"))
    demand = GPUS * GPU_UTTERANCES_PER_SECOND
    result = {
        "assumptions": [
            "per-utterance costs of a batch-256 stage measured on one thread of this machine hold on the host",
            "a process-per-device run (torchrun): each of the 8 ranks builds the whole global batch "
            "(8,800 utterances a second) and slices its own, so the host does 8 times the pipeline's work",
            "the shards are in the page cache (reads cost CPU, not disk)",
            "threads: the producer thread pads every batch alone and the training thread masks it alone; "
            "everything that holds the GIL in one process is serial, and what holds it is a stage's "
            "interpreter_ms (its CPU on 8-frame utterances; gil_probe_ms, an upper bound, cross-checks it "
            "on an idle machine)",
            "processes: reading and padding spread over the workers; the copy out of shared memory "
            "(producer thread) and SpecAugment (training thread) stay serial in the rank's process",
            "the training step itself leaves the host's cores to the pipeline (a GPU step)",
            "each host row is the utterances a second one rank's pipeline delivers, the least of its "
            "serial stages' bounds, the GIL's, and its share of the cores (cores / 8) over the CPU an "
            "utterance costs; a rank that read, padded and masked only its own slice (not built) would "
            "need 1,100",
        ],
        "demand_utt_per_s": {"per_rank_process": demand, "host_work_8_ranks": GPUS * demand},
        "demand_frames_per_s_per_rank": round(demand * stages["valid_frames_per_batch"] / stages["batch"]),
        "bounds_utt_per_s": {
            "threads: producer pads (one thread)": _rate(c["pad"]),
            "threads: GIL of read + pad + SpecAugment": _rate(g["read"] + g["pad"] + g["spec_augment"]),
            "threads: GIL of read + pad": _rate(g["read"] + g["pad"]),
            "training thread: SpecAugment": _rate(c["spec_augment"]),
            "processes: producer copies out (one thread)": _rate(c["copy_out"]),
        },
        "hosts": {},
    }
    for cores in HOST_CORES:
        per_rank = cores / GPUS
        result["hosts"][f"{cores} cores"] = {
            "threads, no SpecAugment": min(_rate(c["pad"]), _rate(g["read"] + g["pad"]),
                                           _rate((c["read"] + c["pad"]) / per_rank)),
            "threads, SpecAugment": min(_rate(c["pad"]), _rate(c["spec_augment"]),
                                        _rate(g["read"] + g["pad"] + g["spec_augment"]),
                                        _rate((c["read"] + c["pad"] + c["spec_augment"]) / per_rank)),
            "processes, no SpecAugment": min(_rate(c["copy_out"]),
                                             _rate((c["read"] + c["pad"] + c["copy_out"]) / per_rank)),
            "processes, SpecAugment": min(_rate(c["copy_out"]), _rate(c["spec_augment"]),
                                          _rate((c["read"] + c["pad"] + c["copy_out"] + c["spec_augment"]) / per_rank)),
            "needed per rank": demand,
            "needed per rank reading only its own slice (not built)": GPU_UTTERANCES_PER_SECOND,
        }
    return result


def _rate(seconds_per_utterance: float) -> float:
    return round(1 / seconds_per_utterance) if seconds_per_utterance > 0 else float("inf")


# ---------------------------------------------------------------------------------------------- main

def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--utterances", type=int, default=3072, help="Utterances in the store (built once).")
    parser.add_argument("--stage-batches", type=int, default=6, help="Batches per stage timing.")
    parser.add_argument("--repeats", type=int, default=1, help="Passes over the configurations (median kept).")
    parser.add_argument("--json", type=Path, help="Also write the report here.")
    args = parser.parse_args()
    store = FeatureStore(scale_store(args.utterances))
    workload = collect_registry(get_plugin_manager(load_entrypoints=False)).workload("conformer")
    report: dict = {"machine": f"{platform.node()} {platform.machine()}, {os.cpu_count()} CPUs",
                    "date": time.strftime("%Y-%m-%d %H:%M"), "store": describe_store(store)}
    report["stages"] = {str(batch): stage_costs(store, workload.model, batch, args.stage_batches) for batch in BATCHES}
    configurations = [(batch, buckets, augment, readers, processes) for batch in BATCHES for buckets in (0, BUCKETS)
                      for augment in (False, True) for readers, processes in ((1, 0), (2, 0), (2, 1), (2, 2))]
    passes = [[throughput(store, workload.model, *configuration) for configuration in configurations]
              for _ in range(args.repeats)]
    report["throughput"] = [_median_row(rows) for rows in zip(*passes, strict=True)]
    report["model"] = model(report["stages"]["256"])
    text = json.dumps(report, indent=2)
    print(text)
    if args.json is not None:
        args.json.write_text(text + "\n")


def _median_row(rows: tuple[dict, ...]) -> dict:
    def numeric(value) -> bool:
        return isinstance(value, int | float) and not isinstance(value, bool)

    return {key: statistics.median(row[key] for row in rows) if numeric(rows[0][key]) else rows[0][key]
            for key in rows[0]}


if __name__ == "__main__":
    main()
