"""Time the ds2-mini training step of the PyTorch and TensorFlow backends side by side.

Both backends are built in this one process with the cpu profile's device plan and trained on
the very same batches from the harness's pipeline, step by step in alternating order, so that
a noisy, shared machine slows both alike. Prints the median step time of each and the ratio.

    python benchmarks/backend_parity.py                      # the cached synthetic store
    python benchmarks/backend_parity.py --store DIR --batches 40 --keras-lstm
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from benchbase.backend import Backend, Batch, DevicePlan
from benchbase.data.pipeline import BatchPipeline
from benchbase.data.store import FeatureStore
from benchbase.data.workload_data import default_cache, ensure_workload_data
from benchbase.default_plugins.workloads import builtin_workload
from benchbase.plugins import get_plugin_manager
from benchbase.registry import collect_registry

WORKLOAD = "ds2-mini"
PROFILE = "cpu"
MINI_MODEL = builtin_workload(WORKLOAD).model


def main() -> None:
    arguments = _parser().parse_args()
    registry = collect_registry(get_plugin_manager())
    workload, profile = registry.workload(WORKLOAD), registry.profile(PROFILE)
    store = arguments.store or ensure_workload_data(workload, None, default_cache())
    batches = _batches(store, profile.pipeline.global_batch, arguments.warmup + arguments.batches, arguments.seed)
    plan = DevicePlan(kind="cpu", count=1, batch_per_device=profile.pipeline.batch_per_device,
                      threads=arguments.threads or profile.pipeline.threads)
    backends = _backends(registry, arguments.keras_lstm)
    for backend in backends.values():
        backend.build(workload.model, workload.optimizer, workload.features.dimension, plan, arguments.seed)
    times = _time_steps(backends, batches, arguments.warmup)
    _print_table(times, store, plan, len(batches) - arguments.warmup, batches)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--store", type=Path, help="prepared feature store (default: the cached synthetic one)")
    parser.add_argument("--batches", type=int, default=30, help="timed training steps per backend")
    parser.add_argument("--warmup", type=int, default=3, help="untimed first steps (tracing, allocation)")
    parser.add_argument("--threads", type=int, help="compute threads (default: the cpu profile's)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--keras-lstm", action="store_true",
                        help="also time TF with Keras's own LSTM (a tf.while_loop) instead of the fused kernel")
    return parser


def _batches(store: Path, batch_size: int, count: int, seed: int) -> list[Batch]:
    pipeline = BatchPipeline(FeatureStore(store), ("train",), batch_size, model=MINI_MODEL, seed=seed)
    batches: list[Batch] = []
    epoch = 1
    while len(batches) < count:
        batches += list(pipeline.epoch(epoch))[: count - len(batches)]
        epoch += 1
    return batches


def _backends(registry, keras_lstm: bool) -> dict[str, Backend]:
    backends = {"torch": registry.backend("torch")(), "tf": registry.backend("tf")()}
    if keras_lstm:
        backends["tf (Keras LSTM loop)"] = registry.backend("tf")(fused_lstm=False)
    return backends


def _time_steps(backends: dict[str, Backend], batches: list[Batch], warmup: int) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {name: [] for name in backends}
    names = list(backends)
    for index, batch in enumerate(batches):
        # Alternate who goes first, so neither always runs right after the other's cache misses.
        for name in names if index % 2 == 0 else reversed(names):
            started = time.perf_counter()
            backends[name].train_step(batch)
            if index >= warmup:
                times[name].append(time.perf_counter() - started)
    return times


def _print_table(times: dict[str, list[float]], store: Path, plan: DevicePlan, steps: int,
                 batches: list[Batch]) -> None:
    frames = statistics.median(batch.features.shape[1] for batch in batches)
    print(f"{WORKLOAD} training step, {steps} batches of {batches[0].size} (median {frames:.0f} frames), "
          f"{plan.threads} thread(s), store {store}")
    reference = statistics.median(times["torch"])
    print(f"{'backend':<24}{'median ms':>12}{'p25 ms':>10}{'p75 ms':>10}{'/ torch':>10}")
    for name, seconds in times.items():
        p25, _, p75 = statistics.quantiles(seconds, n=4)
        median = statistics.median(seconds)
        print(f"{name:<24}{median * 1e3:>12.1f}{p25 * 1e3:>10.1f}{p75 * 1e3:>10.1f}{median / reference:>10.2f}")


if __name__ == "__main__":
    main()
