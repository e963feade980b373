"""Timing for the standalone scripts, framework code only: every framework on one compute thread,
and calls timed in rotating order with their page faults. No framework is imported until asked for.
"""

from __future__ import annotations

import os
import resource
import statistics
import time
from collections.abc import Callable

__all__ = ["one_thread", "summary", "time_rotating"]


def one_thread(frameworks: list[str]) -> None:
    """Every framework on one compute thread; before any of them computes anything."""
    if "jax" in frameworks:
        flags = [flag for flag in os.environ.get("XLA_FLAGS", "").split()
                 if not flag.startswith("--xla_cpu_multi_thread_eigen")]
        os.environ["XLA_FLAGS"] = " ".join([*flags, "--xla_cpu_multi_thread_eigen=false"])
        import jax

        if hasattr(os, "sched_setaffinity"):  # not on macOS: the Eigen flag is all there is
            everywhere = os.sched_getaffinity(0)
            os.sched_setaffinity(0, set(sorted(everywhere)[:1]))  # XLA's threads inherit the creator's CPUs
            try:
                jax.devices()
            finally:
                os.sched_setaffinity(0, everywhere)
    if "torch" in frameworks:
        import torch

        torch.set_num_threads(1)
        torch.set_num_interop_threads(1)
    if "tf" in frameworks:
        import tensorflow as tf

        tf.config.threading.set_intra_op_parallelism_threads(1)
        tf.config.threading.set_inter_op_parallelism_threads(1)


def time_rotating(runners: dict[str, Callable[[], object]], repeats: int, warmup: int) -> dict[str, dict]:
    """Each runner's seconds per call, after ``warmup`` calls each (the first one's seconds kept
    apart: tracing, compilation), the runners alternating in rotating order, so that none always
    runs right after another's cache misses and a noisy machine slows all alike."""
    first, times = {}, {name: [] for name in runners}
    for name, run in runners.items():
        started = time.perf_counter()
        for _ in range(max(warmup, 1)):
            run()
            first.setdefault(name, time.perf_counter() - started)
    names, faults = list(runners), {name: [] for name in runners}
    for index in range(repeats):
        shift = index % len(names)
        for name in names[shift:] + names[:shift]:
            faulted = _page_faults()
            started = time.perf_counter()
            runners[name]()
            times[name].append(time.perf_counter() - started)
            faults[name].append(_page_faults() - faulted)
    return summary(times, first, faults)


def _page_faults() -> int:
    """This process's minor page faults so far: the first touches of freshly mapped memory, which
    a framework that hands its freed buffers back to the system pays again every step."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def summary(times: dict[str, list[float]], first: dict[str, float],
            faults: dict[str, list[int]]) -> dict[str, dict]:
    """name -> median, p25 and p75 in ms, the ratio to the fastest median, the first call's
    seconds, the median page faults a call."""
    medians = {name: statistics.median(seconds) for name, seconds in times.items()}
    fastest = min(medians.values())
    cells = {}
    for name, seconds in times.items():
        p25, _, p75 = statistics.quantiles(seconds, n=4)
        cells[name] = {"median_ms": 1e3 * medians[name], "p25_ms": 1e3 * p25, "p75_ms": 1e3 * p75,
                       "ratio": medians[name] / fastest, "first_s": first[name],
                       "page_faults": int(statistics.median(faults[name]))}
    return cells


# -- the command ----------------------------------------------------------------------------------
