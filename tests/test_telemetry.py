from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import matplotlib.pyplot as plt
import psutil
import pytest

from benchbase.report.figures import draw_utilization
from benchbase.report.runs import Run, RunGroup
from benchbase.telemetry import TelemetrySampler, select_gpus
from benchbase.telemetry.gpu_selection import ordering_caveat
from benchbase.telemetry.nvml import Gpu, PcieReader, open_nvml
from benchbase.telemetry.process_tree import ProcessTree
from benchbase.telemetry.sampler import _sample
from benchbase.telemetry.summary import Totals

# Burns one core for argv[1] seconds, holding 64 MB it has written to (so resident), then prints
# the CPU seconds it burned. argv[2]: "wait" (for a line on stdin first) or seconds to pause first.
BURNER = """
import sys, time
if sys.argv[2] == "wait":
    sys.stdin.readline()
else:
    time.sleep(float(sys.argv[2]))
started, end = time.process_time(), time.monotonic() + float(sys.argv[1])
ballast = bytearray(b"x") * (64 * 2**20)
while time.monotonic() < end:
    pass
print(time.process_time() - started)
"""
BALLAST_MB = 64


def _samples(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _wait_for_first_sample(path: Path, timeout: float = 60.0) -> None:
    """The sampler process takes a while to start; its baselines are set once it writes."""
    deadline = time.monotonic() + timeout
    while not (path.exists() and path.stat().st_size > 0):
        assert time.monotonic() < deadline, "the sampler never wrote a sample"
        time.sleep(0.02)


def _cpu_seconds(samples: list[dict]) -> float:
    """The CPU seconds that the samples' proc_cpu (% of the whole machine) add up to."""
    seconds, previous = 0.0, None
    for sample in samples:
        interval = sample["t"] - previous if previous is not None else 0.03
        seconds += sample["proc_cpu"] / 100 * psutil.cpu_count() * interval
        previous = sample["t"]
    return seconds


def test_the_sampler_writes_cpu_samples_every_30_ms_and_measures_itself(tmp_path):
    sink = tmp_path / "telemetry.jsonl"
    origin = time.perf_counter()
    sampler = TelemetrySampler(sink, origin)
    sampler.start()
    time.sleep(1.5)
    summary = sampler.stop()
    samples = _samples(sink)
    assert summary["samples"] == len(samples) > 10
    times = [sample["t"] for sample in samples]
    assert times == sorted(times) and 0 < times[0] < times[-1] < time.perf_counter() - origin
    assert all(0 <= sample["cpu"] <= 100 and len(sample["cores"]) >= 1 for sample in samples)
    assert all(0 <= sample["proc_cpu"] <= 100 and sample["rss_mb"] > 0 for sample in samples)  # this process
    assert summary["sampler_cpu_seconds"] >= 0 and summary["interval_ms"] == 30
    assert 0 < summary["sampler_wall_seconds"] < 30 and summary["processes_followed_max"] >= 1
    assert not list(tmp_path.glob("*.summary.json"))  # the hand-over file is cleaned up


def test_the_sampler_follows_a_named_process_and_its_cpu_adds_up(tmp_path):
    sink = tmp_path / "t.jsonl"
    burner = subprocess.Popen([sys.executable, "-c", BURNER, "1.0", "wait"], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    sampler = TelemetrySampler(sink, time.perf_counter(), processes=[burner.pid])
    sampler.start()
    try:
        _wait_for_first_sample(sink)
        burned = float(burner.communicate("go\n", timeout=60)[0])
        time.sleep(0.2)
    finally:
        summary = sampler.stop()
    samples = _samples(sink)
    # proc_cpu is a share of the whole machine, as "cpu" is: summed over time it gives back the
    # burner's CPU seconds (less the last few ms before it ended, which no sample saw).
    assert 0.7 * burned <= _cpu_seconds(samples) <= 1.15 * burned + 0.1
    assert max(sample["proc_cpu"] for sample in samples) > 0.5 * 100 / psutil.cpu_count()
    assert summary["proc_cpu_percent_mean"] > 0
    assert max(sample["rss_mb"] for sample in samples) >= BALLAST_MB
    assert summary["peak_rss_mb"] == max(sample["rss_mb"] for sample in samples)


def test_the_sampler_follows_descendants_of_this_process_by_default(tmp_path):
    sink = tmp_path / "t.jsonl"
    sampler = TelemetrySampler(sink, time.perf_counter())
    sampler.start()
    try:
        _wait_for_first_sample(sink)
        # Started after the sampler and discovered by its look-up for new descendants (every 0.5 s),
        # which the burner's 0.7 s pause leaves time for before it burns.
        output = subprocess.run([sys.executable, "-c", BURNER, "1.0", "0.7"], capture_output=True, text=True,
                                timeout=60, check=True).stdout
    finally:
        summary = sampler.stop()
    burned = float(output)
    assert _cpu_seconds(_samples(sink)) >= 0.7 * burned
    assert summary["peak_rss_mb"] >= BALLAST_MB and summary["processes_followed_max"] >= 2


def test_a_followed_process_that_ends_mid_run_does_not_stop_the_sampling(tmp_path):
    sink = tmp_path / "t.jsonl"
    waiter = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    sampler = TelemetrySampler(sink, time.perf_counter(), processes=[waiter.pid, os.getpid()])
    sampler.start()
    try:
        _wait_for_first_sample(sink)
        time.sleep(0.2)
        waiter.communicate(timeout=60)  # it ends (and is reaped) while the sampler follows it
        ended = time.perf_counter() - sampler.clock_origin
        time.sleep(0.6)
    finally:
        summary = sampler.stop()
    samples = _samples(sink)
    later = [sample for sample in samples if sample["t"] > ended + 0.1]
    assert len(later) >= 5 and all(sample["rss_mb"] > 0 for sample in later)  # this process, still followed
    assert summary["samples"] == len(samples) and summary["processes_followed_max"] >= 2


def test_a_process_that_has_ended_reads_as_nothing():
    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    ended.wait()
    tree = ProcessTree([ended.pid])
    assert tree.read() == (0.0, 0.0) and tree.read() == (0.0, 0.0) and tree.most_followed == 0


def test_without_a_gpu_the_gpu_part_is_skipped_and_says_why(tmp_path):
    nvml, gpus, status = open_nvml(os.environ.get("CUDA_VISIBLE_DEVICES"))
    if nvml is not None:
        pytest.skip("this machine has a GPU")
    sampler = TelemetrySampler(tmp_path / "t.jsonl", time.perf_counter())
    sampler.start()
    time.sleep(0.3)
    summary = sampler.stop()
    assert gpus == [] and summary["gpu_percent_mean"] is None and summary["gpu_status"] == status
    assert "gpus" not in summary and summary["peak_gpu_mem_mb"] is None
    assert all("gpus" not in json.loads(line) for line in (tmp_path / "t.jsonl").read_text().splitlines())


@pytest.mark.gpu
def test_with_nvml_every_sample_reads_each_gpu_the_run_uses(tmp_path):
    nvml, gpus, status = open_nvml(os.environ.get("CUDA_VISIBLE_DEVICES"))
    if nvml is None:
        pytest.skip(f"no GPU: {status}")
    sampler = TelemetrySampler(tmp_path / "t.jsonl", time.perf_counter())
    sampler.start()
    time.sleep(1.0)
    summary = sampler.stop()
    samples = _samples(tmp_path / "t.jsonl")
    assert all(len(sample["gpus"]) == len(gpus) for sample in samples) and summary["gpu_percent_mean"] is not None
    assert [gpu["uuid"] for gpu in summary["gpus"]] == [gpu.uuid for gpu in gpus]
    assert summary["peak_gpu_mem_mb"] == max(gpu["peak_mem_used_mb"] for gpu in summary["gpus"])
    assert any("pcie_tx_mb_s" in gpu for sample in samples for gpu in sample["gpus"])  # about every 10th sample


@pytest.mark.gpu
def test_with_nvml_a_gpu_selected_by_uuid_is_the_one_sampled(tmp_path):
    nvml, gpus, status = open_nvml(None)
    if nvml is None:
        pytest.skip(f"no GPU: {status}")
    chosen = gpus[-1]
    sampler = TelemetrySampler(tmp_path / "t.jsonl", time.perf_counter(), gpus=[chosen.uuid[:12]])
    sampler.start()
    time.sleep(0.3)
    summary = sampler.stop()
    assert [gpu["index"] for gpu in summary["gpus"]] == [chosen.index]


# GPU selection: CUDA_VISIBLE_DEVICES strings against NVML's (index, UUID) pairs --------------

DEVICES = [(0, "GPU-8932f937-d72c-4106-c12f-20bd9faed9f6"), (1, "GPU-89aa1c2e-0000-4000-8000-000000000001"),
           (2, "GPU-1234abcd-0000-4000-8000-000000000002")]


@pytest.mark.parametrize(("visible", "selected", "problem"), [
    (None, [0, 1, 2], None),
    ("0,2", [0, 2], None),
    ("2,0", [2, 0], None),  # the selection's order is CUDA's numbering of the run's GPUs
    (" 1 , 2 ", [1, 2], None),
    ("GPU-1234abcd-0000-4000-8000-000000000002", [2], None),
    ("gpu-1234", [2], None),  # an abbreviated UUID, as CUDA accepts, in either case
    ("GPU-8932f937,1", [0, 1], None),
    ("0,0", [0], "repeats a GPU"),
    ("0,7,1", [0], "entry '7' is not a GPU index (NVML sees 3 GPU(s)); it and the 1 after it are ignored"),
    ("-1", [], "entry '-1' is not a GPU index"),
    ("GPU-89", [], "is ambiguous: it begins the UUIDs of 2 GPUs"),
    ("GPU-ffff", [], "matches no GPU's UUID"),
    ("1,cuda:0", [1], "entry 'cuda:0' is neither a GPU index nor a GPU UUID"),
    ("MIG-GPU-8932f937/1/0,2", [2], "is a MIG instance, which is not sampled"),
    ("", [], "the selection is empty"),
])
def test_a_cuda_visible_devices_selection_maps_to_nvml_devices(visible, selected, problem):
    selection = select_gpus(visible, DEVICES)
    assert [index for index, _ in selection.devices] == selected
    assert [uuid for _, uuid in selection.devices] == [DEVICES[index][1] for index in selected]
    if problem is None:
        assert selection.problems == []
    else:
        assert len(selection.problems) == 1 and problem in selection.problems[0]


def test_index_entries_warn_only_where_cuda_may_number_the_gpus_differently():
    by_index, by_uuid = select_gpus("0,1", DEVICES), select_gpus("GPU-8932,GPU-89aa", DEVICES)
    mixed = ["NVIDIA H100", "NVIDIA A10"]
    assert "select by UUID" in ordering_caveat(by_index, mixed, None)
    assert ordering_caveat(by_index, mixed, "PCI_BUS_ID") is None
    assert ordering_caveat(by_index, ["NVIDIA H100"] * 2, None) is None
    assert ordering_caveat(by_uuid, mixed, None) is None


# The GPU code paths against a stand-in for pynvml (this machine has no NVIDIA driver) ---------

class FakeNvmlError(Exception):
    pass


class FakeNotSupported(FakeNvmlError):
    pass


def fake_nvml(uuids: list[str], pcie_supported: bool = True) -> SimpleNamespace:
    """The few pynvml calls the sampler makes; GPU i is i*10 % busy and uses i GB."""
    def pcie(handle, counter):
        if not pcie_supported:
            raise FakeNotSupported("Not Supported")
        return 2048 * (handle + 1) if counter == "tx" else 1024 * (handle + 1)
    return SimpleNamespace(
        NVMLError=FakeNvmlError, NVMLError_NotSupported=FakeNotSupported,
        NVML_PCIE_UTIL_TX_BYTES="tx", NVML_PCIE_UTIL_RX_BYTES="rx",
        nvmlInit=lambda: None, nvmlDeviceGetCount=lambda: len(uuids),
        nvmlDeviceGetHandleByIndex=lambda index: index,
        nvmlDeviceGetUUID=lambda handle: uuids[handle].encode(),
        nvmlDeviceGetName=lambda handle: "NVIDIA H100" if handle else "NVIDIA A10",
        nvmlDeviceGetUtilizationRates=lambda handle: SimpleNamespace(gpu=10 * handle, memory=5),
        nvmlDeviceGetMemoryInfo=lambda handle: SimpleNamespace(used=handle * 2**30),
        nvmlDeviceGetPowerUsage=lambda handle: 100_000 + handle * 1000,
        nvmlDeviceGetPcieThroughput=pcie,
    )


def test_open_nvml_keeps_the_selected_gpus_and_says_what_was_wrong(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml([uuid for _, uuid in DEVICES]))
    nvml, gpus, status = open_nvml("2,0,9")
    assert [(gpu.index, gpu.name) for gpu in gpus] == [(2, "NVIDIA H100"), (0, "NVIDIA A10")]
    assert gpus[0].uuid == DEVICES[2][1]  # decoded from the bytes older pynvml releases return
    assert status.startswith("2 of 3 GPU(s) via NVML, selected by CUDA_VISIBLE_DEVICES='2,0,9'")
    assert "entry '9' is not a GPU index" in status and "select by UUID" in status  # the models differ
    nvml, gpus, status = open_nvml("GPU-ffff")
    assert nvml is None and gpus == [] and "0 of 3 GPU(s)" in status and "matches no GPU's UUID" in status


@pytest.mark.parametrize("supported", [True, False], ids=["pcie", "no-pcie"])
def test_gpu_samples_and_the_summary_per_gpu(supported):
    nvml = fake_nvml([uuid for _, uuid in DEVICES], pcie_supported=supported)
    gpus = [Gpu(index, uuid, "NVIDIA H100", index) for index, uuid in DEVICES[1:]]
    pcie = PcieReader(nvml, gpus, period=0.01)
    pcie.start()
    time.sleep(0.1)  # at least one reading of each GPU
    pcie.stop()
    sink, totals = io.StringIO(), Totals(len(gpus))
    for _ in range(2):
        _sample(sink, time.perf_counter(), ProcessTree([]), nvml, gpus, pcie, totals)
    first, second = (json.loads(line) for line in sink.getvalue().splitlines())
    assert first["gpus"][1] == {"util": 20, "mem_util": 5, "mem_used_mb": 2048.0, "power_w": 102.0,
                                "pcie_tx_mb_s": 6.0 if supported else None, "pcie_rx_mb_s": 3.0 if supported else None}
    assert "pcie_tx_mb_s" not in second["gpus"][1]  # a reading is reported once, in the next sample
    summary = totals.summary(interval=0.03, gpus=gpus, gpu_status="2 of 3 GPU(s) via NVML", sampler_cpu_seconds=0.1,
                             sampler_wall_seconds=1.0, processes_followed=1)
    assert summary["gpus"][0] == {"index": 1, "uuid": DEVICES[1][1], "name": "NVIDIA H100", "util_mean": 10.0,
                                  "peak_mem_used_mb": 1024.0, "power_w_mean": 101.0,
                                  "pcie_tx_mb_s_mean": 4.0 if supported else None,
                                  "pcie_rx_mb_s_mean": 2.0 if supported else None}
    assert summary["gpu_percent_mean"] == 15.0 and summary["peak_gpu_mem_mb"] == 2048.0
    assert summary["samples"] == 2


# The utilization figure ------------------------------------------------------------------------

def test_the_utilization_figure_draws_the_run_processes_cpu_where_the_samples_have_it(tmp_path):
    samples = [{"t": step / 10, "cpu": 50.0, "cores": [50.0], "proc_cpu": 30.0, "rss_mb": 100.0}
               for step in range(100)]
    samples[5].pop("proc_cpu")  # a sample without it is left out of the line, not drawn as zero
    (tmp_path / "telemetry.jsonl").write_text("".join(json.dumps(sample) + "\n" for sample in samples))
    run = Run(tmp_path, result={}, config={"workload": {"name": "ds2-mini"}})  # a result.json is not read here
    try:
        axis = draw_utilization([RunGroup("run", [run])], (0.0, 10.0)).axes[0]
        lines = {line.get_label(): line for line in axis.lines}
        assert list(lines) == ["CPU", "CPU, run's processes"]
        assert lines["CPU, run's processes"].get_linestyle() == ":"
        assert list(lines["CPU, run's processes"].get_ydata()) == [30.0] * 99
        assert "NVML unavailable" in axis.get_legend().get_title().get_text()
    finally:
        plt.close("all")


def test_environment_changes_name_each_field_but_the_machines_identity():
    """What `run --resume` refuses: any recorded field that changed, as a dotted path, except the
    host, the kernel's build and the frameworks' CUDA builds (another node of the same kind)."""
    from benchbase.telemetry.environment import environment_changes, run_environment

    recorded = run_environment("torch", "benchbase_torch_ds2.backend")
    assert environment_changes(recorded, run_environment("torch", "benchbase_torch_ds2.backend")) == []
    moved = json.loads(json.dumps(recorded))  # a copy, as config.json holds it
    moved["host"], moved["os"] = "sha256:another", "Linux-another-kernel"
    moved["accelerator"]["torch_cuda"] = "13.0"
    assert environment_changes(recorded, moved) == []
    moved["packages"]["numpy"] = "1.0.0"
    moved["benchbase"]["dirty"] = not recorded["benchbase"]["dirty"]
    moved["cpu"]["best_isa"] = "avx2-only"
    del moved["python"]
    assert environment_changes(recorded, moved) == [
        f"benchbase.dirty: {recorded['benchbase']['dirty']} -> {moved['benchbase']['dirty']}",
        f"cpu.best_isa: {recorded['cpu']['best_isa']} -> avx2-only",
        f"packages.numpy: {recorded['packages']['numpy']} -> 1.0.0",
        f"python: {recorded['python']} -> None"]
