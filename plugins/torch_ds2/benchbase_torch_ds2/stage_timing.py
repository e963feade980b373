"""The phases of an eager training step, timed without changing it (``Backend.step_timings``).

On a CPU, an eager step's operations finish before the next line runs, so plain timers around
each phase measure it. On a GPU the operations are queued: CUDA events recorded between the
phases mark where each phase ends on the stream, and are read only after the step's own
``float(loss)`` has waited for the stream, so timing adds no synchronization. Copies of the batch
to the device sit inside the forward pass (a family's loss copies what it needs, when it needs
it): each copy is bracketed on its own and the forward is what remains.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch

__all__ = ["StageClock"]


class StageClock:
    """Marks of one step: ``start()``, a ``copy()`` bracket per host-to-device copy, then
    ``mark(stage)`` at the end of each phase, in order; ``seconds()`` after the step returned."""

    def __init__(self, device: torch.device) -> None:
        self._now: Callable[[], object] = _cuda_event if device.type == "cuda" else time.perf_counter
        self._elapsed = _event_seconds if device.type == "cuda" else _timer_seconds
        self._marks: list[tuple[str, object]] = []
        self._copies: list[tuple[object, object]] = []

    def start(self) -> None:
        self._marks, self._copies = [("start", self._now())], []

    def mark(self, stage: str) -> None:
        self._marks.append((stage, self._now()))

    @contextmanager
    def copy(self) -> Iterator[None]:
        begin = self._now()
        yield
        self._copies.append((begin, self._now()))

    def seconds(self) -> dict[str, float]:
        """Each marked phase's seconds, the copies' as "host_to_device" and taken out of the
        "forward" they happened in; empty before a step."""
        phases = {stage: self._elapsed(begin, end)
                  for (_, begin), (stage, end) in zip(self._marks, self._marks[1:])}
        if not phases:
            return {}
        copying = sum(self._elapsed(begin, end) for begin, end in self._copies)
        if "forward" in phases:
            phases["forward"] = max(phases["forward"] - copying, 0.0)
        return {"host_to_device": copying, **phases}


def _cuda_event() -> torch.cuda.Event:
    event = torch.cuda.Event(enable_timing=True)
    event.record()
    return event


def _event_seconds(begin: torch.cuda.Event, end: torch.cuda.Event) -> float:
    return begin.elapsed_time(end) / 1000.0  # completed by the step's own wait: no synchronization here


def _timer_seconds(begin: float, end: float) -> float:
    return end - begin
