"""Threads that keep cores busy beside a step, for the kit's thread_budget rule and its tests."""

from __future__ import annotations

import hashlib
import threading
import time
from contextlib import contextmanager

__all__ = ["busy_threads", "spare_cores"]


@contextmanager
def busy_threads(count: int):
    """``count`` threads hashing (which releases the GIL, so they run beside the caller) until the block ends."""
    done = threading.Event()

    def spin():
        block = bytes(1 << 20)
        while not done.is_set():
            hashlib.sha256(block).digest()

    helpers = [threading.Thread(target=spin, daemon=True) for _ in range(count)]
    for helper in helpers:
        helper.start()
    try:
        yield
    finally:
        done.set()
        for helper in helpers:
            helper.join()


def spare_cores() -> float:
    """CPU seconds per wall second this process gets from two busy threads right now."""
    wall, cpu = time.perf_counter(), time.process_time()
    with busy_threads(2):
        time.sleep(0.3)
    return (time.process_time() - cpu) / (time.perf_counter() - wall)
