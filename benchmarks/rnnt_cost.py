"""What an utterance costs the RNN-T workloads: FLOPs by part and the joint's memory.

    python benchmarks/rnnt_cost.py [--run RUN_DIR]

From ``benchbase.families.rnnt.cost`` (analytic, its matmul share checked against PyTorch's
FlopCounterMode by tests/test_rnnt_cost.py):

1. rnnt-mini on its synthetic store: the training FLOPs of the train subset's utterances as they
   are (their own frames and characters), the mean per utterance; with ``--run``, a finished
   rnnt-mini run's median step time turns that into the FLOP rate the machine achieved.
2. rnnt (MLPerf's architecture and its 1023 pieces) at stated utterance sizes: seconds of speech
   (100 feature frames a second) and labels per second are inputs here, not measurements of
   LibriSpeech (4 pieces a second is about 1.5 pieces a word at 2.7 words a second; 15 a second
   is characters'); the joint's memory for a padded batch at the longest utterance the workload keeps.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from benchbase.data.store import FeatureStore
from benchbase.families.rnnt.cost import (
    TRAINING_FACTOR,
    forward_flops,
    joint_bytes,
    lattice_frames,
    total_forward_flops,
)
from benchbase.harness.replay import load_run_config
from benchbase.plugin_host import get_plugin_manager
from benchbase.plugin_host.registry import collect_registry

FRAMES_PER_SECOND = 100  # a 10 ms hop (160 samples at 16 kHz), both workloads
PER_DEVICE_BATCH = 64  # MLPerf's reference global batch of 512 over 8 GPUs
LABEL_RATES = (4.0, 15.0)  # pieces a second (an input: see above), and characters'


def main() -> None:
    arguments = _arguments()
    registry = collect_registry(get_plugin_manager())
    mini, full = registry.workload("rnnt-mini"), registry.workload("rnnt")
    _mini_on_its_store(mini, arguments.run)
    _full_at_sizes(full, mini)


def _mini_on_its_store(workload, run_dir: Path | None) -> None:
    config = load_run_config(run_dir) if run_dir else None
    store = FeatureStore(config.data) if config else None
    if store is None:
        print("rnnt-mini: pass --run RUN_DIR (a finished rnnt-mini run) for its store and step time\n")
        return
    model, dimension = workload.model, store.feature_dimension
    shards = store.shards(list(workload.data.train))
    indices = [store.index(shard) for shard in shards]
    frames = np.concatenate([index.frames() for index in indices])
    labels = np.concatenate([np.diff(index.label_offsets) for index in indices])
    training = np.array([TRAINING_FACTOR * total_forward_flops(forward_flops(model, dimension, int(t), int(u)))
                         for t, u in zip(frames, labels)])
    parts = {name: np.mean([forward_flops(model, dimension, int(t), int(u))[name] for t, u in zip(frames, labels)])
             for name in forward_flops(model, dimension, 100, 10)}
    print(f"rnnt-mini, {len(frames)} training utterances: mean {frames.mean():.0f} frames "
          f"({frames.mean() / FRAMES_PER_SECOND:.2f} s), {labels.mean():.1f} characters "
          f"({labels.mean() / (frames.mean() / FRAMES_PER_SECOND):.1f} per second)")
    print(f"training FLOPs per utterance: mean {training.mean() / 1e6:.1f} M (forward x {TRAINING_FACTOR})")
    print("forward share by part: " + ", ".join(
        f"{name} {100 * value / total_forward_flops(parts):.1f}%" for name, value in parts.items()
        if not name.endswith("_matmul")))
    steps = [json.loads(line)["step_s"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()
             if '"kind": "batch"' in line]
    batch = config.hardware.pipeline.batch_per_device
    rate = batch * training.mean() / float(np.median(steps))
    print(f"{run_dir}: median step {np.median(steps):.3f} s at batch {batch}: {rate / 1e9:.2f} GFLOP/s achieved\n")


def _full_at_sizes(workload, mini) -> None:
    model = workload.model
    dimension = workload.features.mel_bands if workload.features.mfcc == 0 else workload.features.mfcc
    print(f"rnnt ({model.parameter_count(dimension):,} parameters, {model.symbols} symbols), "
          f"{dimension} features a frame; per utterance:\n")
    print("| speech s | labels/s | T' | U | forward GFLOP | training GFLOP | encoder | prediction | "
          "joint projections | joint output | joint elementwise |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for seconds in (5.0, 12.3, workload.data.max_duration):
        for rate in LABEL_RATES:
            frames, labels = int(seconds * FRAMES_PER_SECOND), int(round(seconds * rate))
            parts = forward_flops(model, dimension, frames, labels)
            total = total_forward_flops(parts)
            shares = [100 * parts[name] / total for name in ("encoder", "prediction", "joint_projections",
                                                             "joint_output", "joint_elementwise")]
            print(f"| {seconds:g} | {rate:g} | {lattice_frames(model, frames)[1]} | {labels} | {total / 1e9:.2f} | "
                  f"{TRAINING_FACTOR * total / 1e9:.2f} | " + " | ".join(f"{share:.1f}%" for share in shares) + " |")
    frames = int(workload.data.max_duration * FRAMES_PER_SECOND)
    print(f"\njoint memory of a batch of {PER_DEVICE_BATCH} padded to {workload.data.max_duration:g} s "
          f"(T' = {lattice_frames(model, frames)[1]}), float32, each kept for the backward pass:\n")
    print("| labels/s | U | hidden (batch, T', U+1, joint) GiB | log-probs (batch, T', U+1, symbols) GiB |")
    print("|---:|---:|---:|---:|")
    for rate in LABEL_RATES:
        labels = int(round(workload.data.max_duration * rate))
        sizes = joint_bytes(model, PER_DEVICE_BATCH, lattice_frames(model, frames)[1], labels)
        print(f"| {rate:g} | {labels} | {sizes['hidden'] / 2**30:.2f} | {sizes['log_probs'] / 2**30:.2f} |")


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", type=Path, help="a finished rnnt-mini run folder (its store and step times)")
    return parser.parse_args()


if __name__ == "__main__":
    main()
