"""The run clock: monotonic seconds since run_start (model creation), plus the time before an interruption."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["RunClock"]


class RunClock:
    def __init__(self) -> None:
        self._started: float | None = None

    def start(self, offset: float = 0.0) -> None:
        """``offset``: seconds already on the clock (a resumed run goes on from its interruption)."""
        self._started = time.perf_counter() - offset

    @property
    def origin(self) -> float:
        """time.perf_counter() at start: CLOCK_MONOTONIC, so other processes can use it too."""
        if self._started is None:
            raise RuntimeError("the run clock has not started")
        return self._started

    @contextmanager
    def paused(self) -> Iterator[None]:
        """Work the run clock leaves out (independent scoring): the clock stands still meanwhile.

        Its origin moves on by the pause, so ``origin`` read before and after differ; the
        telemetry sampler, which took the origin at start, keeps wall time since run_start."""
        if self._started is None:
            raise RuntimeError("the run clock has not started")
        paused_at = time.perf_counter()
        try:
            yield
        finally:
            self._started += time.perf_counter() - paused_at

    def seconds(self) -> float:
        """Seconds since start; 0 before the clock starts (init is not timed)."""
        return 0.0 if self._started is None else time.perf_counter() - self._started
