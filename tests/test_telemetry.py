from __future__ import annotations

import json
import time

import pytest

from benchbase.telemetry import TelemetrySampler
from benchbase.telemetry.sampler import open_nvml


def test_the_sampler_writes_cpu_samples_every_30_ms_and_measures_itself(tmp_path):
    sink = tmp_path / "telemetry.jsonl"
    origin = time.perf_counter()
    sampler = TelemetrySampler(sink, origin)
    sampler.start()
    time.sleep(1.5)
    summary = sampler.stop()
    samples = [json.loads(line) for line in sink.read_text().splitlines()]
    assert summary["samples"] == len(samples) > 10
    times = [sample["t"] for sample in samples]
    assert times == sorted(times) and 0 < times[0] < times[-1] < time.perf_counter() - origin
    assert all(0 <= sample["cpu"] <= 100 and len(sample["cores"]) >= 1 for sample in samples)
    assert summary["sampler_cpu_seconds"] >= 0 and summary["interval_ms"] == 30
    assert not list(tmp_path.glob("*.summary.json"))  # the hand-over file is cleaned up


def test_without_a_gpu_the_gpu_part_is_skipped_and_says_why(tmp_path):
    nvml, handles = open_nvml()
    if nvml is not None:
        pytest.skip("this machine has a GPU")
    sampler = TelemetrySampler(tmp_path / "t.jsonl", time.perf_counter())
    sampler.start()
    time.sleep(0.3)
    summary = sampler.stop()
    assert summary["gpu_percent_mean"] is None and summary["gpu_status"] == handles
    assert all("gpus" not in json.loads(line) for line in (tmp_path / "t.jsonl").read_text().splitlines())


@pytest.mark.gpu
def test_with_nvml_every_sample_reads_each_gpu(tmp_path):
    nvml, handles = open_nvml()
    if nvml is None:
        pytest.skip(f"no GPU: {handles}")
    sampler = TelemetrySampler(tmp_path / "t.jsonl", time.perf_counter())
    sampler.start()
    time.sleep(0.5)
    summary = sampler.stop()
    sample = json.loads((tmp_path / "t.jsonl").read_text().splitlines()[-1])
    assert len(sample["gpus"]) == len(handles) and summary["gpu_percent_mean"] is not None
