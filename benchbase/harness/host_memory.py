"""Large CPU arrays without a page fault per step: glibc's heap keeps the memory it frees.

PyTorch's CPU allocator takes its memory from malloc. glibc serves a block larger than its mmap
threshold (at most 32 MiB on 64-bit) with a mapping of its own and unmaps it when freed, so a
tensor of that size made afresh every step (conformer-mini's subsampling output and its
gradient, about 51 MB each at batch 32) faults in every 4 KiB page again each time: 50,000 page
faults a Conformer step, a fifth of it (docs/BENCHMARKS.md, "Framework parity: the matrix").
TensorFlow's allocator keeps its memory and faults none; XLA's CPU runtime (JAX) faults as many
pages either way. PyTorch's tuning guide answers this with another malloc (jemalloc, tcmalloc)
preloaded before the process starts; the same effect from inside a running process is glibc's own
settings: no mappings for large blocks (M_MMAP_MAX 0), and the heap's free top never returned to
the system (M_TRIM_THRESHOLD at its largest), so a freed block is reused by the next allocation
of its size with its pages in place.

The harness sets it in every process of a run on CPUs, whatever the backend, before the backend
is built, so that no framework is measured with an allocator the others lack. It changes no value
a step computes, only where its memory comes from; the price is a process that keeps its
high-water mark of host memory. Not undone, and not set for a GPU plan (its batches live in
device memory and page-locked host buffers, not in malloc's).
"""

from __future__ import annotations

import ctypes
import ctypes.util

from benchbase.backend import DevicePlan

__all__ = ["KEEP_FREED_HOST_MEMORY", "keep_freed_host_memory", "keep_host_memory_on_cpus"]

KEEP_FREED_HOST_MEMORY = True
"""Whether a run on CPUs keeps freed host memory (True) or leaves glibc's defaults (False: a page
fault per page of each large array, every step). Read when a run starts."""

M_TRIM_THRESHOLD = -1
M_MMAP_MAX = -4
"""mallopt's parameter numbers (glibc's malloc.h)."""
LARGEST_TRIM_THRESHOLD = (1 << 31) - 1
"""mallopt takes an int: the largest one, 2 GiB, never trims the heap of a run on one CPU host."""


def keep_freed_host_memory() -> bool:
    """Set glibc's malloc to keep what it frees (the module docstring); False where the C library is
    not glibc (musl, macOS), which has no such settings and is left as it is."""
    name = ctypes.util.find_library("c")
    try:
        mallopt = ctypes.CDLL(name).mallopt if name else None
    except (OSError, AttributeError):
        mallopt = None
    if mallopt is None:
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    return bool(mallopt(M_MMAP_MAX, 0)) and bool(mallopt(M_TRIM_THRESHOLD, LARGEST_TRIM_THRESHOLD))


def keep_host_memory_on_cpus(plan: DevicePlan) -> None:
    """What a run's processes do before the backend is built: keep freed host memory where the
    plan trains on CPUs and the switch is on."""
    if plan.kind == "cpu" and KEEP_FREED_HOST_MEMORY:
        keep_freed_host_memory()
