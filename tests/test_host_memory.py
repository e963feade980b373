"""A run on CPUs keeps glibc's freed blocks, for every backend: a large array made again faults in
no page again."""

from __future__ import annotations

import ctypes.util
import platform
import subprocess
import sys

import pytest
from test_time_breakdown import run_result

from benchbase.harness import host_memory

CHILD = """
import resource, sys
import torch
from benchbase.harness.host_memory import keep_freed_host_memory

if sys.argv[1] == "keep":
    assert keep_freed_host_memory()

def faults_of_a_step() -> int:
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    activation = torch.ones(64 << 18)  # 64 MiB, beyond glibc's largest mmap threshold (32 MiB)
    gradient = activation * 2
    del activation, gradient
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before

print(sorted(faults_of_a_step() for _ in range(8))[4])  # the median's upper half: past the heap's growth
"""

PAGES = (64 << 20) // 4096


def _faults_of_a_step(setting: str) -> int:
    done = subprocess.run([sys.executable, "-c", CHILD, setting], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return int(done.stdout.split()[-1])


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc" or not ctypes.util.find_library("c"),
                    reason="glibc's malloc settings only")
def test_arrays_made_again_reuse_the_pages_of_those_freed():
    # Steps that each make two 64 MiB PyTorch tensors (NumPy asks the kernel for huge pages, which
    # fault 512 times less). glibc's defaults map each afresh, a fault per 4 KiB page (32,768 a
    # step); kept, once the heap has grown to hold them, a step lands on the last one's pages.
    assert _faults_of_a_step("defaults") > PAGES
    assert _faults_of_a_step("keep") < PAGES // 20


def test_a_run_on_cpus_keeps_freed_memory_whatever_its_backend(pm, tmp_path, small_store, monkeypatch):
    called = []
    monkeypatch.setattr(host_memory, "keep_freed_host_memory", lambda: called.append(True) or True)
    run_result(pm, tmp_path, small_store, "linear-ctc")
    assert called == [True]
    monkeypatch.setattr(host_memory, "KEEP_FREED_HOST_MEMORY", False)
    run_result(pm, tmp_path / "off", small_store, "linear-ctc")
    assert called == [True]  # switched off: glibc's defaults
