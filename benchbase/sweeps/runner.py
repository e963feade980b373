"""One run of a sweep as a child process, and the signals that stop a sweep.

Each run is its own `python -m benchbase run`: every framework starts in a fresh process, and a
backend of several processes launches its own workers. The run uses the sweep's interpreter and
imports the sweep's benchbase, whatever the current directory holds (``child_python_environment``).
The child leads its own process group, so a signal meant for the sweep (Ctrl-C in the terminal,
`kill` of the sweep's group) reaches the run exactly once, forwarded by the sweep as SIGTERM: the
run finishes its step, checkpoints, logs run_stop and exits 143, and the next sweep resumes it. A
second signal kills the run's group at once. The kernel ends the run when the sweep itself dies
(even by SIGKILL), so no run trains on with no sweep to record it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import FrameType

from benchbase.process_guard import child_python_environment

__all__ = ["RunProcess", "StopSignals"]

STOP_GRACE_S = 600.0
"""How long a run may take to finish its step and checkpoint after SIGTERM before it is killed."""

# Arms the parent-death signal in the child, then runs the command exactly as `python -m benchbase`.
_CHILD_BOOTSTRAP = ("import runpy, sys\n"
                    "from benchbase.process_guard import end_with_parent\n"
                    "end_with_parent(int(sys.argv[1]))\n"
                    "sys.argv = ['benchbase', *sys.argv[2:]]\n"
                    "runpy.run_module('benchbase', run_name='__main__', alter_sys=True)\n")


class RunProcess:
    """`benchbase run ARGUMENTS` with its output appended to ``log``."""

    def __init__(self, arguments: list[str], log: Path, heading: str):
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "a", encoding="utf-8") as handle:
            handle.write(f"\n=== {time.strftime('%Y-%m-%d %H:%M:%S')} {heading}\n"
                         f"=== benchbase {' '.join(arguments)}\n")
            handle.flush()
            self.process = subprocess.Popen(
                [sys.executable, "-c", _CHILD_BOOTSTRAP, str(os.getpid()), *arguments],
                stdin=subprocess.DEVNULL, stdout=handle, stderr=subprocess.STDOUT, process_group=0,
                env=child_python_environment())
        self.started = time.monotonic()
        self._terminated_at: float | None = None

    @property
    def seconds(self) -> float:
        return time.monotonic() - self.started

    def poll(self) -> int | None:
        code = self.process.poll()
        if code is None and self._terminated_at is not None and time.monotonic() - self._terminated_at > STOP_GRACE_S:
            self.kill()
        return code

    def terminate(self) -> None:
        """Ask the run to checkpoint and stop (what a preemption does)."""
        if self._terminated_at is None:
            self._terminated_at = time.monotonic()
            self._signal(signal.SIGTERM, group=False)  # the run stops its own helpers in order
        else:
            self.kill()

    def kill(self) -> None:
        self._signal(signal.SIGKILL, group=True)

    def reap(self) -> None:
        """After the run exited: end whatever of its process group is still there (nothing, normally)."""
        self._signal(signal.SIGKILL, group=True)

    def _signal(self, number: int, group: bool) -> None:
        try:
            if group:
                os.killpg(self.process.pid, number)
            elif self.process.returncode is None:
                os.kill(self.process.pid, number)
        except (ProcessLookupError, PermissionError):
            pass  # already gone


class StopSignals:
    """SIGINT and SIGTERM while the sweep runs: remembered, and passed on to the current run."""

    def __init__(self) -> None:
        self.received: int | None = None
        self.current: RunProcess | None = None
        self._previous: dict[int, object] = {}

    def __enter__(self) -> StopSignals:
        for number in (signal.SIGINT, signal.SIGTERM):
            self._previous[number] = signal.signal(number, self._on_signal)
        return self

    def __exit__(self, *exc_info: object) -> None:
        for number, handler in self._previous.items():
            signal.signal(number, handler)  # type: ignore[arg-type]

    def _on_signal(self, number: int, frame: FrameType | None) -> None:
        # Only flags and kill(2) here: the main loop sees the flag at its next poll.
        self.received = self.received or number
        if self.current is not None:
            self.current.terminate()
