"""A CPU build keeps glibc's freed blocks: a large tensor made again faults in no page again."""

from __future__ import annotations

import ctypes.util
import platform
import subprocess
import sys

import pytest
from benchbase_torch_ds2 import backend
from test_torch_backend import build

from benchbase.plugin_host.builtins.workloads import builtin_workload

CHILD = """
import resource, sys
import torch
from benchbase_torch_ds2.host_memory import keep_freed_host_memory

if sys.argv[1] == "keep":
    assert keep_freed_host_memory()

def faults_of_a_fresh_tensor() -> int:
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    tensor = torch.ones(64 << 18)  # 64 MiB, beyond glibc's largest mmap threshold (32 MiB)
    del tensor
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before

faults_of_a_fresh_tensor()
print(faults_of_a_fresh_tensor())
"""

PAGES = (64 << 20) // 4096


def _faults_of_the_second_tensor(setting: str) -> int:
    done = subprocess.run([sys.executable, "-c", CHILD, setting], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return int(done.stdout.split()[-1])


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc" or not ctypes.util.find_library("c"),
                    reason="glibc's malloc settings only")
def test_a_tensor_made_again_reuses_the_pages_of_the_one_freed():
    # glibc's defaults map each 64 MiB tensor afresh (a fault per 4 KiB page, 16,384); kept, the
    # second lands on the first one's pages.
    assert _faults_of_the_second_tensor("defaults") > PAGES // 2
    assert _faults_of_the_second_tensor("keep") < PAGES // 20


def test_a_cpu_build_keeps_freed_memory(monkeypatch):
    called = []
    monkeypatch.setattr(backend, "keep_freed_host_memory", lambda: called.append(True) or True)
    build(builtin_workload("ds2-mini"))
    assert called == [True]
    monkeypatch.setattr(backend, "KEEP_FREED_HOST_MEMORY", False)
    build(builtin_workload("ds2-mini"))
    assert called == [True]  # the switch off: glibc's defaults
