"""The CPU's vector extensions on record, and the ISA caps that let one machine check two kernel paths."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest

from benchbase.telemetry.cpu_features import best_isa, cpu_flags, cpu_record, vector_extensions
from benchbase.testing.isa import ISA_CAPS, isa_environment, lower_isa

EPYC_FLAGS = "fpu vme sse4_1 sse4_2 avx avx2 fma avx512f avx512dq avx512_vnni avx512_bf16 hypervisor"


def test_the_flags_name_the_extensions_that_decide_ml_kernels(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(f"processor\t: 0\nmodel name\t: AMD EPYC\nflags\t\t: {EPYC_FLAGS}\n\nprocessor\t: 1\n")
    flags = cpu_flags(cpuinfo)
    assert vector_extensions(flags) == ["SSE4.1", "SSE4.2", "AVX", "AVX2", "FMA", "AVX-512", "AVX-512 VNNI",
                                        "AVX-512 BF16"]
    assert best_isa(flags) == "avx512" and lower_isa("avx512") == "avx2"
    assert best_isa({"sse4_1", "sse4_2", "avx", "avx2", "fma"}) == "avx2" and lower_isa("avx2") == "sse4.1"
    assert lower_isa("sse4.1") is None  # nothing below the portable path
    arm = tmp_path / "arm"
    arm.write_text("processor\t: 0\nFeatures\t: fp asimd sve\n")
    assert vector_extensions(cpu_flags(arm)) == ["NEON", "SVE"]
    assert cpu_flags(tmp_path / "missing") == set()


def test_a_record_names_the_caps_in_force(monkeypatch):
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    monkeypatch.delenv("ATEN_CPU_CAPABILITY", raising=False)
    record = cpu_record()
    assert record["isa_caps"]["ONEDNN_MAX_CPU_ISA"] == "AVX2" and "ATEN_CPU_CAPABILITY" not in record["isa_caps"]
    assert record["vector_extensions"] == vector_extensions()


def test_a_cap_keeps_xla_flags_already_set():
    environment = isa_environment("avx2", {"XLA_FLAGS": "--xla_force_host_platform_device_count=2"})
    assert environment["XLA_FLAGS"] == "--xla_force_host_platform_device_count=2 --xla_cpu_max_isa=AVX2"
    assert environment["ONEDNN_MAX_CPU_ISA"] == "AVX2" and environment["BENCHBASE_ISA_CAP"] == "avx2"
    with pytest.raises(ValueError, match="unknown ISA cap 'avx9'"):
        isa_environment("avx9")


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs PyTorch")
@pytest.mark.parametrize("cap", ["avx2", "sse4.1"])
def test_pytorch_runs_the_capped_kernels(cap):
    order = ["sse4.1", "avx2", "avx512"]
    if best_isa() not in order or order.index(best_isa()) <= order.index(cap):
        pytest.skip(f"this CPU's best ISA is {best_isa()}: nothing above {cap} to cap")
    chosen = subprocess.run([sys.executable, "-c", "import torch; print(torch.backends.cpu.get_cpu_capability())"],
                            env=isa_environment(cap), capture_output=True, text=True, check=True).stdout.strip()
    assert chosen == {"avx2": "AVX2", "sse4.1": "DEFAULT"}[cap]


@pytest.mark.skipif(importlib.util.find_spec("tensorflow") is None, reason="needs TensorFlow")
def test_onednn_in_tensorflow_runs_the_capped_kernels():
    if best_isa() != "avx512":
        pytest.skip(f"this CPU's best ISA is {best_isa()}: the AVX2 cap changes nothing")
    script = "import tensorflow as tf; tf.matmul(tf.ones((64, 64)), tf.ones((64, 64)))"
    finished = subprocess.run([sys.executable, "-c", script], env={**isa_environment("avx2"), "ONEDNN_VERBOSE": "1"},
                              capture_output=True, text=True, check=True)
    isa_lines = [line for line in finished.stdout.splitlines() if ",isa:" in line]
    assert isa_lines and "AVX2" in isa_lines[0] and "512" not in isa_lines[0], isa_lines


def test_the_runner_refuses_an_unknown_cap_in_one_line():
    finished = subprocess.run([sys.executable, "-m", "benchbase.testing.isa", "--cap", "avx9", "--", "true"],
                              capture_output=True, text=True)
    assert finished.returncode == 2 and "unknown cap 'avx9'" in finished.stderr
    assert "Traceback" not in finished.stderr
    assert set(ISA_CAPS) == {"native", "avx2", "sse4.1"}


def test_the_runner_runs_the_command_under_the_cap():
    finished = subprocess.run([sys.executable, "-m", "benchbase.testing.isa", "--cap", "avx2", "--", sys.executable,
                               "-c", "import os; print(os.environ['ONEDNN_MAX_CPU_ISA'])"],
                              capture_output=True, text=True, check=True)
    assert finished.stdout.strip() == "AVX2"
