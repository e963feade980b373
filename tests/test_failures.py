"""Runs that must not measure garbage or leave anything behind: NaN features, an empty
training split, SIGTERM, and a parent killed outright."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import psutil
import pytest
from test_plugins import ThirdPartyPlugin

from benchbase.compliance.checker import check_log
from benchbase.data.integrity import shard_checksums
from benchbase.data.store import FeatureStore, features_path
from benchbase.errors import InputError, NonFiniteError
from benchbase.harness import run_benchmark
from benchbase.plugins import get_plugin_manager
from benchbase.registry import collect_registry
from benchbase.specs import RunConfig


def _linear_run(store: Path, out: Path, **hardware_pipeline):
    manager = get_plugin_manager(load_entrypoints=False)
    manager.register(ThirdPartyPlugin())
    registry = collect_registry(manager)
    profile = registry.profile("cpu")
    if hardware_pipeline:
        profile = profile.model_copy(update={"pipeline": profile.pipeline.model_copy(update=hardware_pipeline)})
    workload = registry.workload("ds2-mini").model_copy(update={"max_epochs": 2})
    config = RunConfig(workload=workload, backend="linear-ctc", hardware=profile, seed=1, out=out, data=store)
    return run_benchmark(config, manager, registry.backend("linear-ctc")), registry


def _events(run: Path) -> list[dict]:
    return [json.loads(line.split(" ", 1)[1]) for line in (run / "mllog.log").read_text().splitlines()]


def test_nan_features_stop_the_run_at_the_first_batch_and_fail_check(small_store, tmp_path):
    store = tmp_path / "store"
    shutil.copytree(small_store, store)
    description = json.loads((store / "store.json").read_text())
    for shard in FeatureStore(store).shards(["train"]):
        features = np.load(features_path(shard), mmap_mode="r+")
        features[:] = np.nan  # a broken extraction: every training frame is NaN
        features.flush()
        del features
        # ... recorded as prepared, so the checksums vouch for it: only the numbers are wrong.
        description["splits"]["train"]["checksums"][str(shard.relative_to(store))] = shard_checksums(shard)
    (store / "store.json").write_text(json.dumps(description))
    with pytest.raises(NonFiniteError, match=r"batch 1 \(epoch 1\): train_step returned a loss of nan on utterances"):
        _linear_run(store, tmp_path / "run")
    stop = [event for event in _events(tmp_path / "run") if event["key"] == "run_stop"]
    assert len(stop) == 1 and stop[0]["metadata"]["status"] == "aborted"
    assert stop[0]["metadata"]["stop_reason"] == "non_finite" and "batch 1" in stop[0]["metadata"]["error"]
    registry = collect_registry(get_plugin_manager(load_entrypoints=False))
    report = check_log(tmp_path / "run" / "mllog.log", workloads=registry.workloads)
    assert any(line.startswith("numeric_health: ") and "non-finite" in line for line in report.failures)


def test_a_training_split_smaller_than_one_batch_is_refused_before_the_clock(small_store, tmp_path):
    train = FeatureStore(small_store).utterance_count(["train"])
    batch = train + 1
    with pytest.raises(InputError, match=f"the training subsets hold {train} utterances, fewer than one global "
                                         f"batch of {batch}"):
        _linear_run(small_store, tmp_path / "run", global_batch=batch, batch_per_device=batch)
    assert "run_start" not in [event["key"] for event in _events(tmp_path / "run")]


def _start_run(store: Path, out: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "benchbase", "run", "--workload", "ds2-mini", "--backend", "torch",
                             "--hw", "cpu", "--data", str(store), "--out", str(out), "--max-epochs", "3"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_for_training(out: Path, process: subprocess.Popen, timeout: float = 180) -> psutil.Process:
    """Wait until batches are being trained; returns the run's telemetry sampler process."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert process.poll() is None, process.communicate()[1][-2000:]
        metrics = out / "metrics.jsonl"
        if metrics.exists() and metrics.stat().st_size > 0:
            # The sampler is the run's one spawned worker (multiprocessing's resource tracker aside).
            samplers = [child for child in psutil.Process(process.pid).children()
                        if "spawn_main" in " ".join(child.cmdline())]
            assert len(samplers) == 1, [child.cmdline() for child in psutil.Process(process.pid).children()]
            return samplers[0]
        time.sleep(0.2)
    raise AssertionError("the run never started training")


def test_sigterm_ends_the_log_stops_telemetry_and_exits_143(small_store, tmp_path):
    out = tmp_path / "run"
    process = _start_run(small_store, out)
    sampler = _wait_for_training(out, process)
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 143, stderr[-2000:]
    assert stderr.strip().splitlines()[-1] == "benchbase: error: terminated (SIGTERM)"
    stop = [event for event in _events(out) if event["key"] == "run_stop"]
    assert len(stop) == 1 and stop[0]["metadata"]["status"] == "aborted"
    assert stop[0]["metadata"]["stop_reason"] == "interrupted"
    assert not sampler.is_running() or sampler.status() == psutil.STATUS_ZOMBIE


def test_a_killed_run_leaves_no_sampler_writing(small_store, tmp_path):
    out = tmp_path / "run"
    process = _start_run(small_store, out)
    sampler = _wait_for_training(out, process)
    os.kill(process.pid, signal.SIGKILL)  # no Python cleanup runs in the parent
    process.communicate(timeout=30)
    sampler.wait(timeout=10)  # the kernel's parent-death signal ends it
    size = (out / "telemetry.jsonl").stat().st_size
    time.sleep(1.0)
    assert (out / "telemetry.jsonl").stat().st_size == size


def test_a_killed_synthesis_leaves_no_worker_and_its_leftovers_are_removed(tmp_path):
    out = tmp_path / "corpus"
    process = subprocess.Popen([sys.executable, "-m", "benchbase", "data", "synth", "--out", str(out),
                                "--utterances", "400", "--seed", "3"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    workers: list[psutil.Process] = []
    while time.monotonic() < deadline and len(workers) < 2:
        workers = [child for child in psutil.Process(process.pid).children()
                   if "spawn_main" in " ".join(child.cmdline())]
        time.sleep(0.2)
    assert workers, "the synthesis never started its workers"
    partial = tmp_path / f".corpus.partial-{process.pid}"
    os.kill(process.pid, signal.SIGKILL)
    process.wait(timeout=30)
    gone, alive = psutil.wait_procs(workers, timeout=10)
    assert not alive, [worker.cmdline() for worker in alive]
    assert partial.exists()  # SIGKILL runs no cleanup ...
    from benchbase.data.synth import synthesize_corpus

    synthesize_corpus(out, utterances=5, seed=3, workers=1)
    assert not partial.exists()  # ... the next synthesis into the same place removes it
