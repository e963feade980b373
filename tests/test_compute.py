"""What a run computed: its training FLOPs by the family's cost model, padded and valid, the
padding fraction and hardware and useful MFU against the devices' dense peak, on record in
result.json, the log, the report and the live view, and re-derived by `check`; a peak benchbase
does not know is "not known", never a guess."""

from __future__ import annotations

import json

import numpy as np
import pytest
from test_plugins import LinearCTCBackend, stand_in_workload

import benchbase
from benchbase.cli.reporter import compute_line
from benchbase.compliance import keys
from benchbase.compliance.checker import check_log
from benchbase.families.batch_cost import batch_training_flops
from benchbase.families.parts import parts_of_family
from benchbase.harness import run_benchmark
from benchbase.harness.compute import compute_record
from benchbase.plugin_host.registry import collect_registry
from benchbase.report import load_groups
from benchbase.report.compute import compute_table
from benchbase.specs import HardwareProfile, RunConfig
from benchbase.specs.model import model_families
from benchbase.telemetry.peak_flops import NOT_KNOWN, DevicePeak, device_peak, known_gpu

DECLARED_TFLOPS = 0.05


class Backends:
    @benchbase.hookimpl
    def register_backends(self, register):
        register(LinearCTCBackend)


def with_devices(profile: HardwareProfile, **devices) -> HardwareProfile:
    data = profile.model_dump()
    return HardwareProfile.model_validate({**data, "devices": {**data["devices"], **devices}})


def profile_of(model: str, kind: str = "gpu", count: int = 1, **cpu) -> HardwareProfile:
    return HardwareProfile.model_validate({
        "name": "p", "devices": {"kind": kind, "count": count, "model": model},
        "cpu": {"model": "x", "cores": 4, "threads": 8, "ram_gb": 8, **cpu},
        "pipeline": {"global_batch": 8 * count, "batch_per_device": 8, "readers": 1, "buffer": 1}})


def test_a_run_records_its_flops_padding_and_mfu_and_check_re_derives_them(pm, tmp_path, small_store):
    pm.register(Backends())
    registry = collect_registry(pm)
    hardware = with_devices(registry.profile("cpu"), dense_peak_tflops={"fp32": DECLARED_TFLOPS})
    config = RunConfig(workload=stand_in_workload(registry.workload("ds2-mini"), max_epochs=1), backend="linear-ctc",
                       hardware=hardware, seed=1, out=tmp_path / "run", data=small_store)
    run_benchmark(config, pm, registry.backend("linear-ctc"))
    result = json.loads((tmp_path / "run" / "result.json").read_text())
    compute = result["compute"]
    padded, valid = compute["flops_padded"], compute["flops_valid"]
    assert 0 < valid < padded and compute["padding_fraction"] == pytest.approx(1 - valid / padded, abs=1e-6)
    peak = DECLARED_TFLOPS * 1e12
    assert compute["peak_flops"] == peak and "dense_peak_tflops.fp32" in compute["peak_source"]
    assert compute["mfu_hardware"] == pytest.approx(padded / (result["run_seconds"] * peak), rel=1e-5)
    assert compute["mfu_useful"] == pytest.approx(valid / (result["run_seconds"] * peak), rel=1e-5)
    batches = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert sum(line["flops_padded"] for line in batches if line["kind"] == "batch") == padded
    # The report and the live view's last lines show them.
    row = compute_table(load_groups([tmp_path])).rows[0]
    assert row[2] == pytest.approx(100 * compute["padding_fraction"])
    assert row[3] == pytest.approx(100 * compute["mfu_hardware"]) and row[4] < row[3]
    assert "hardware" in compute_line(compute) and "useful" in compute_line(compute)
    # `check` re-derives them from the log's per-epoch totals and run clock, and the profile's peak.
    log, workloads = tmp_path / "run" / "mllog.log", registry.workloads
    assert compute_finding(log, workloads).status == "pass" and f'"{keys.EPOCH_FLOPS}"' in log.read_text()
    # Beyond the clock's tolerance (1 s, which is a large share of so short a run) whatever the run took.
    planted = (3 + 2 / result["run_seconds"]) * compute["mfu_hardware"]
    (tmp_path / "run" / "result.json").write_text(json.dumps(
        {**result, "compute": {**compute, "mfu_hardware": planted}}))
    finding = compute_finding(log, workloads)
    assert finding.status == "fail" and [message.split(" ")[1] for message in finding.messages] == ["mfu_hardware"]


def compute_finding(log, workloads):
    """The compute rule's finding on ``log`` (the rule under test, whatever the other rules say)."""
    return next(finding for finding in check_log(log, workloads=workloads).findings if finding.rule == "compute")


def test_a_profile_without_a_known_peak_says_not_known_rather_than_inventing_one():
    peak = device_peak(profile_of("host CPU", kind="cpu"), "fp32")  # the cpu profile: no clock, no extensions
    assert peak.flops_per_second is None and peak.source.startswith(NOT_KNOWN)
    assert device_peak(profile_of("Some Future GPU"), "fp32").flops_per_second is None
    record = compute_record(300, 200, 10.0, peak)
    assert record["mfu_hardware"] is None and record["mfu_useful"] is None and record["peak_flops"] is None
    assert record["padding_fraction"] == pytest.approx(1 / 3, abs=1e-6)
    assert f"MFU {NOT_KNOWN}" in compute_line(record)
    assert compute_record(0, 0, 10.0, peak) == {}  # a family without a cost model counts nothing


def test_mfu_is_the_flops_over_the_run_time_times_the_peak():
    record = compute_record(6_000, 4_500, 2.0, DevicePeak(1_000.0, "declared"))
    assert record["mfu_hardware"] == pytest.approx(3.0) and record["mfu_useful"] == pytest.approx(2.25)
    assert record["padding_fraction"] == pytest.approx(0.25)


@pytest.mark.parametrize(("name", "precision", "tflops"), [
    ("NVIDIA H200", "bf16", 989.4), ("NVIDIA H200", "fp32", 67.0), ("NVIDIA H100 80GB HBM3", "tf32", 494.7),
    ("NVIDIA H100 PCIe", "fp16", 756.0), ("NVIDIA A100-SXM4-80GB", "bf16", 312.0),
    ("NVIDIA A100-SXM4-40GB", "tf32", 156.0),
    ("Tesla V100-SXM2-32GB", "fp16", 125.0), ("NVIDIA Tesla V100", "fp32", 14.0),
    ("NVIDIA GeForce RTX 2070", "fp32", 7.5), ("NVIDIA GeForce GTX 1080 Ti", "fp32", 11.3),
    ("NVIDIA H200", "int8-emulated", 67.0),  # float32 arithmetic on fake-quantized values
])
def test_the_table_of_known_gpus_gives_their_published_dense_peaks(name, precision, tflops):
    assert device_peak(profile_of(name), precision).flops_per_second == pytest.approx(tflops * 1e12)


def test_the_table_is_not_stretched_to_variants_or_precisions_it_lacks():
    assert known_gpu("NVIDIA H100 NVL") is None and known_gpu("NVIDIA GeForce RTX 2070 SUPER") is None
    assert device_peak(profile_of("NVIDIA GeForce RTX 2070"), "bf16").flops_per_second is None
    assert device_peak(profile_of("Tesla V100-SXM2-32GB"), "tf32").source.startswith(NOT_KNOWN)


def test_a_declared_peak_wins_and_every_device_counts():
    four = profile_of("NVIDIA H200", count=4)
    assert device_peak(four, "bf16").flops_per_second == pytest.approx(4 * 989.4e12)
    declared = with_devices(four, dense_peak_tflops={"bf16": 900.0})
    peak = device_peak(declared, "bf16")
    assert peak.flops_per_second == pytest.approx(4 * 900e12) and "dense_peak_tflops" in peak.source


def test_a_cpus_peak_is_an_estimate_from_its_cores_clock_and_vector_width():
    avx2 = profile_of("cpu", kind="cpu", ghz=3.0, vector_extensions=("AVX2", "FMA"))
    peak = device_peak(avx2, "fp32")
    assert peak.flops_per_second == pytest.approx(4 * 3.0e9 * 2 * 8 * 2) and peak.source.startswith("estimate")
    avx512 = profile_of("cpu", kind="cpu", ghz=2.0, vector_extensions=("AVX2", "AVX-512", "AVX-512 BF16"))
    assert device_peak(avx512, "fp32").flops_per_second == pytest.approx(4 * 2.0e9 * 2 * 16 * 2)
    assert device_peak(avx512, "bf16").flops_per_second == pytest.approx(4 * 2.0e9 * 2 * 32 * 2)
    amx = profile_of("cpu", kind="cpu", ghz=2.0, vector_extensions=("AVX-512", "AVX-512 BF16", "AMX"))
    assert device_peak(amx, "bf16").flops_per_second is None
    budget = HardwareProfile.model_validate({**avx2.model_dump(), "pipeline": {**avx2.pipeline.model_dump(),
                                                                                "threads": 1}})
    assert device_peak(budget, "fp32").flops_per_second == pytest.approx(3.0e9 * 2 * 8 * 2)


def test_a_batch_costs_every_row_at_its_padded_length_and_each_at_its_own():
    def cost(frames, labels):
        return 10 * frames + labels

    assert batch_training_flops(cost, 100, [100, 60, 40], [5, 3, 9]) == (3 * (1000 + 9), 1005 + 603 + 409)


@pytest.mark.parametrize("family", model_families())
def test_every_familys_batch_flops_is_its_cost_model_per_utterance(family):
    parts = parts_of_family(family)
    model = parts.kit_model().model
    lengths, labels = np.array([400, 250, 120]), np.array([20, 12, 5])
    padded, valid = parts.batch_flops(model, 93, 400, lengths, labels)
    assert 0 < valid < padded
    full, _ = parts.batch_flops(model, 93, 400, np.array([400, 400, 400]), np.array([20, 20, 20]))
    assert full == padded == _  # no padding: valid is padded
