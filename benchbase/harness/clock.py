"""The run clock: monotonic seconds since run_start (model creation)."""

from __future__ import annotations

import time

__all__ = ["RunClock"]


class RunClock:
    def __init__(self) -> None:
        self._started: float | None = None

    def start(self) -> None:
        self._started = time.perf_counter()

    def seconds(self) -> float:
        """Seconds since start; 0 before the clock starts (init is not timed)."""
        return 0.0 if self._started is None else time.perf_counter() - self._started
