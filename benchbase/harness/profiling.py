"""`benchbase run --profile-steps STEPS`: the framework's own profiler around a few training steps.

The trace covers steps ``FIRST_PROFILED_STEP`` to ``FIRST_PROFILED_STEP + STEPS - 1``: the
first steps build caches and compile kernels, which is not where a steady step spends its time.
Rank 0 traces; the trace goes to RUN_DIR/profile/ in the framework's format (a Chrome trace for
torch.profiler, a TensorBoard profile for tf.profiler). Profiling slows the steps it covers, and
they stay on the clock: a profiled run is for looking at, not for comparing.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from benchbase.backend import Backend

__all__ = ["FIRST_PROFILED_STEP", "StepProfiler"]

FIRST_PROFILED_STEP = 3


class StepProfiler:
    def __init__(self, backend: Backend, steps: int, directory: Path) -> None:
        self.backend = backend
        self.first, self.last = FIRST_PROFILED_STEP, FIRST_PROFILED_STEP + steps - 1
        self.directory = directory
        self.enabled = steps > 0

    @contextmanager
    def around(self, step: int) -> Iterator[None]:
        """Wrap the train_step numbered ``step`` (1-based over the run)."""
        if self.enabled and step == self.first:
            self.directory.mkdir(parents=True, exist_ok=True)
            self.backend.start_profiler(self.directory)
        try:
            yield
        finally:
            if self.enabled and step == self.last:
                self.backend.stop_profiler()
                self.enabled = False
