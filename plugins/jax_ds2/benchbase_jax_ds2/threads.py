"""Holding XLA's CPU client to the plan's thread budget.

XLA has no flag for the size of its CPU thread pools, and turning Eigen's multithreading off
is not enough: its thunk executor runs independent operations of a program concurrently on
the client's pool, and its compiler compiles fusions and LLVM modules in parallel on pools
of its own, so steps and compilations (which happen inside train_step, on the run clock)
would use every core. XLA sizes those pools from, and its threads inherit, the CPUs the
creating thread may run on. So JAX's client is created while the calling thread is
restricted to ``threads`` CPUs: every thread XLA starts then and later, from its own
threads, stays on those CPUs, whatever it does. Only the calling (harness) thread gets its
CPUs back.

JAX creates the client lazily, on the first operation, so this must run before build()'s
first JAX call. A client that already exists (JAX used earlier in the process) keeps its
threads: right when an earlier backend created it with the same budget (``--runs N``, which
the contract allows: thread-pool sizes are process-wide), reported as a warning otherwise.
"""

from __future__ import annotations

import os
import warnings

import jax

__all__ = ["limit_cpu_threads"]

_EIGEN_FLAG = "--xla_cpu_multi_thread_eigen"
_configured: list[int | None] = []
"""The budget this module created the client with, once it did."""


def limit_cpu_threads(threads: int | None) -> None:
    """Create JAX's clients with XLA's threads on at most ``threads`` CPUs (None: XLA's default)."""
    if _client_exists():
        if threads is not None and _configured != [threads]:
            warnings.warn(f"JAX's CPU client existed before this backend set its thread budget ({threads}); "
                          "it keeps the threads it was created with", RuntimeWarning, stacklevel=2)
        return
    _configured[:] = [threads]
    if threads is None:
        return
    if threads == 1:  # no point in Eigen splitting a matmul across a pool that has one thread
        os.environ["XLA_FLAGS"] = " ".join(_kept_flags() + [f"{_EIGEN_FLAG}=false"])
    _create_clients_on(threads)


def _create_clients_on(threads: int) -> None:
    if not hasattr(os, "sched_setaffinity"):  # not Linux: Eigen's flag is all there is
        jax.devices()
        return
    everywhere = os.sched_getaffinity(0)
    os.sched_setaffinity(0, set(sorted(everywhere)[:threads]))  # 0: the calling thread only
    try:
        jax.devices()  # creates every platform's client, XLA's threads with this thread's CPUs
    finally:
        os.sched_setaffinity(0, everywhere)


def _kept_flags() -> list[str]:
    return [flag for flag in os.environ.get("XLA_FLAGS", "").split() if not flag.startswith(_EIGEN_FLAG)]


def _client_exists() -> bool:
    # JAX has no public query for this; without the private one, assume the client is not created yet.
    from jax._src import xla_bridge

    initialized = getattr(xla_bridge, "backends_are_initialized", None)
    return bool(initialized and initialized())
