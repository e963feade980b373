"""Speed of the RNN-T greedy search (benchbase.families.rnnt.greedy) on this CPU.

    OPENBLAS_NUM_THREADS=1 python benchmarks/rnnt_decode_speed.py [--batch 32] [--frames 200] [--repeats 3]

Decodes random encoder projections (what predict() returns) with Xavier-initialized weights,
for a tiny model (30 symbols, 64-wide) and MLPerf's size (1024 symbols, 512-wide prediction
network and joint). Untrained weights emit a label almost every step, so the blank's output
bias is raised until about a quarter of the frames emit a label: the rate of a trained model
on LibriSpeech (about 35 word pieces over 200 frames of 60 ms for 12 s of speech). MLPerf's
encoder frames are 60 ms (10 ms features, 3 stacked and subsampled, then time-stacked by 2), so
200 frames are 12 seconds. Prints a markdown table; ms/utt is wall time over the batch's utterances.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from benchbase.families.rnnt import RNNTModelSpec
from benchbase.families.rnnt.greedy import greedy_decode
from benchbase.families.rnnt.reference import initial_weights

MODELS = {
    "tiny": RNNTModelSpec(symbols=30, encoder_units=64, prediction_embedding=64, prediction_units=64,
                          joint_units=64, encoder_pre_layers=1, encoder_post_layers=1),
    "mlperf": RNNTModelSpec(symbols=1024),
}
TARGET_RATE = 0.25  # labels per frame


def main() -> None:
    arguments = _arguments()
    rng = np.random.default_rng(0)
    print(f"batch {arguments.batch}, {arguments.frames} frames per utterance, float32\n")
    print("| model | parameters | labels/frame | ms/utt | ms/frame |\n|---|---:|---:|---:|---:|")
    for name, model in MODELS.items():
        weights = initial_weights(model, 80, rng)
        encoded = rng.normal(0.0, 1.0, (arguments.batch, arguments.frames, model.joint_units)).astype(np.float32)
        lengths = np.full(arguments.batch, arguments.frames)
        _calibrate(weights, model, encoded)
        seconds, labels = min(_timed(weights, model, encoded, lengths) for _ in range(arguments.repeats))
        rate = labels / lengths.sum()
        per_utterance = 1000 * seconds / arguments.batch
        print(f"| {name} | {model.parameter_count(80):,} | {rate:.2f} | {per_utterance:.1f} | "
              f"{per_utterance / arguments.frames:.3f} |")


def _calibrate(weights, model, encoded) -> None:
    """Set the blank's output bias, by bisection on a few short utterances, to where about
    TARGET_RATE labels per frame are emitted."""
    sample = encoded[:8, :100]
    lengths = np.full(len(sample), sample.shape[1])
    low, high = 0.0, 64.0
    for _ in range(10):
        weights["joint.output.bias"][model.blank_index] = (low + high) / 2
        labels = sum(map(len, greedy_decode(weights, model, sample, lengths, model.max_symbols_per_frame)))
        low, high = ((low + high) / 2, high) if labels > TARGET_RATE * lengths.sum() else (low, (low + high) / 2)
    weights["joint.output.bias"][model.blank_index] = high


def _timed(weights, model, encoded, lengths) -> tuple[float, int]:
    """(seconds, labels emitted) of one search over the batch."""
    start = time.perf_counter()
    transcripts = greedy_decode(weights, model, encoded, lengths, model.max_symbols_per_frame)
    return time.perf_counter() - start, sum(map(len, transcripts))


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--frames", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3)
    return parser.parse_args()


if __name__ == "__main__":
    main()
