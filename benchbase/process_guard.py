"""Child processes that end with their parent, however the parent ends.

A helper process (the telemetry sampler, a synthesis or feature-extraction worker) left
running after its parent was killed keeps writing files and holding cores. On Linux the
kernel can signal a child when its parent dies (prctl PR_SET_PDEATHSIG), which covers even
SIGKILL of the parent, where no Python cleanup runs. Elsewhere, and as a second line, a
child can notice that it has been re-parented.

A child must also run the parent's benchbase. `python -m benchbase` and `python -c` put the
current directory first on sys.path, so a child started in a folder holding another
``benchbase/`` would import that one (and record its commit, or none). ``child_python_environment``
is what a child that runs benchbase gets in its environment: PYTHONSAFEPATH=1, so that Python puts
neither the current directory nor a script's folder first on its path, which is then the
parent's less that first entry; and, where the parent's benchbase came from that entry (or from
no entry of its path at all), the folder it came from first on PYTHONPATH. Workers that
multiprocessing spawns need none of this: they take the parent's sys.path.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from collections.abc import Mapping
from pathlib import Path

__all__ = ["PACKAGE_ROOT", "child_python_environment", "end_with_parent", "parent_is_gone"]

PR_SET_PDEATHSIG = 1

PACKAGE_ROOT = Path(__file__).resolve().parents[1]
"""The folder this process's benchbase package was imported from."""


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


def child_python_environment(environment: Mapping[str, str] | None = None) -> dict[str, str]:
    """``environment`` (default: this process's) for a child Python that runs benchbase: it imports
    the benchbase this process imported, whatever the current directory (see the module text)."""
    child = dict(os.environ if environment is None else environment)
    child["PYTHONSAFEPATH"] = "1"
    # Without safe-path, Python put the script's folder or the current directory first on sys.path.
    searched = sys.path if sys.flags.safe_path else sys.path[1:]
    if str(PACKAGE_ROOT) not in {os.path.realpath(entry or os.curdir) for entry in searched}:
        others = [entry for entry in child.get("PYTHONPATH", "").split(os.pathsep)
                  if entry and os.path.realpath(entry) != str(PACKAGE_ROOT)]
        child["PYTHONPATH"] = os.pathsep.join([str(PACKAGE_ROOT), *others])
    return child
