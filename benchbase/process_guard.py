"""Child processes that end with their parent, however the parent ends.

A helper process (the telemetry sampler, a synthesis or feature-extraction worker) left
running after its parent was killed keeps writing files and holding cores. On Linux the
kernel can signal a child when its parent dies (prctl PR_SET_PDEATHSIG), which covers even
SIGKILL of the parent, where no Python cleanup runs. Elsewhere, and as a second line, a
child can notice that it has been re-parented.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

__all__ = ["end_with_parent", "parent_is_gone"]

PR_SET_PDEATHSIG = 1


def end_with_parent(parent_pid: int | None = None) -> None:
    """Ask the kernel to SIGTERM this process when its parent ends; exit at once if it already has.

    ``parent_pid``: the pid of the process that started this one, read by the parent (a child
    spawned after its parent died would otherwise see its new parent and never notice).
    """
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        except (OSError, AttributeError):
            pass  # no prctl: parent_is_gone() is the remaining guard
    if parent_pid is not None and parent_is_gone(parent_pid):
        os._exit(0)  # the parent died before the signal was armed: nobody is left to serve


def parent_is_gone(parent_pid: int) -> bool:
    """True once this process has been re-parented (its parent ended)."""
    return os.getppid() != parent_pid
