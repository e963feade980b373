"""Harness overhead: ds2-mini training throughput through the harness vs. a bare PyTorch loop.

Both train the same model (the torch backend's) on the same batches, and both are timed in
the same steady state: each first trains epoch 1 untimed (the warm-up: first-step allocations,
oneDNN's kernel choices, a model that has left its initial weights), then is timed over
epoch 2, in the order the harness's seeded pipeline yields it. The bare loop gets its batches
pre-loaded in memory and does nothing but train steps; the harness run reads them through its
pipeline and does everything it does in a real run (metrics, hooks, telemetry sampler,
sentence logging every 50 batches). Runs alternate (bare, harness, bare, harness, ...) so that
drift on a shared machine hits both alike. The harness does strictly more work, so a ratio
above 1.0 (beyond the pairs' spread) is a measurement error, and the script says so.

    python benchmarks/harness_overhead.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import tempfile
import time
from pathlib import Path

from benchbase.data.pipeline import BatchPipeline
from benchbase.data.store import FeatureStore
from benchbase.data.workload_data import default_cache, ensure_workload_data
from benchbase.harness import run_benchmark
from benchbase.harness.assembly import build_context
from benchbase.harness.devices import device_plan
from benchbase.plugin_host import get_plugin_manager
from benchbase.plugin_host.registry import collect_registry
from benchbase.run_folder import RunFolder
from benchbase.specs import RunConfig

MEASURED_EPOCH = 2


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    manager = get_plugin_manager()
    registry = collect_registry(manager)
    # Two epochs; the comparison covers the second one only (epoch_start to epoch_stop).
    workload = registry.workload("ds2-mini").model_copy(update={"max_epochs": 2})
    profile = registry.profile("cpu")
    store_path = ensure_workload_data(workload, None, default_cache())
    store = FeatureStore(store_path)
    pipeline = profile.pipeline
    ordered = BatchPipeline(store, workload.data.train, pipeline.global_batch, model=workload.model,
                            readers=pipeline.readers, prefetch=pipeline.buffer,
                            shuffle_buffer=pipeline.shuffle_buffer, seed=args.seed)
    warm_up, batches = list(ordered.epoch(MEASURED_EPOCH - 1)), list(ordered.epoch(MEASURED_EPOCH))
    utterances = sum(batch.size for batch in batches)
    bare, harnessed, sampler_share = [], [], []
    for repeat in range(args.repeats):
        bare.append(utterances / bare_loop(registry, workload, profile, store_path, warm_up, batches, args.seed))
        seconds, result = harness_epoch(manager, registry, workload, profile, store_path, args.seed)
        harnessed.append(utterances / seconds)
        # The sampler's whole-run CPU time (its process's start included) over the run's length.
        sampler_share.append(result.telemetry["sampler_cpu_seconds"] / result.run_seconds)
        print(f"repeat {repeat + 1}: bare {bare[-1]:.1f} utt/s, harness {harnessed[-1]:.1f} utt/s", flush=True)
    report = {
        "machine": f"{platform.node()} {platform.processor() or platform.machine()}",
        "date": time.strftime("%Y-%m-%d"),
        "batches": len(batches),
        "utterances": utterances,
        "bare_utt_per_s_median": round(statistics.median(bare), 2),
        "harness_utt_per_s_median": round(statistics.median(harnessed), 2),
        "ratio_of_medians": round(statistics.median(harnessed) / statistics.median(bare), 4),
        "ratios_per_pair": [round(h / b, 4) for h, b in zip(harnessed, bare)],
        "sampler_process_cpu_share_of_one_core_median": round(statistics.median(sampler_share), 5),
    }
    print(json.dumps(report, indent=2))
    ratios = report["ratios_per_pair"]
    if min(ratios) > 1.0:
        print("warning: the harness measured faster than the bare loop in every pair, though it does strictly more "
              "work: a measurement error (a noisy machine?), not a result", flush=True)


def bare_loop(registry, workload, profile, store_path, warm_up, batches, seed) -> float:
    """Seconds for the batches through nothing but train_step, after the warm-up batches (untimed)."""
    backend = registry.backend("torch")()
    config = _config(workload, profile, Path("unused"), store_path, seed)
    backend.build(build_context(config, FeatureStore(store_path), device_plan(profile)))
    try:
        for batch in warm_up:  # epoch 1, as the harness trains it before its measured epoch
            backend.train_step(batch)
        started = time.perf_counter()
        for batch in batches:
            backend.train_step(batch)
        return time.perf_counter() - started
    finally:
        backend.close()


def harness_epoch(manager, registry, workload, profile, store_path, seed):
    """Seconds of the harness's measured epoch (epoch_start to epoch_stop in its compliance log)."""
    with tempfile.TemporaryDirectory() as folder:
        config = _config(workload, profile, Path(folder) / "run", store_path, seed)
        result = run_benchmark(config, manager, registry.backend("torch"))
        events = [json.loads(line.split(" ", 1)[1])
                  for line in RunFolder(config.out).compliance_log.read_text().splitlines()]
    times = {event["key"]: event["time_ms"] for event in events
             if event["key"] in ("epoch_start", "epoch_stop") and event["metadata"]["epoch_num"] == MEASURED_EPOCH}
    return (times["epoch_stop"] - times["epoch_start"]) / 1000, result


def _config(workload, profile, out, data, seed) -> RunConfig:
    return RunConfig(workload=workload, backend="torch", hardware=profile, seed=seed, out=out, data=data)


if __name__ == "__main__":
    main()
