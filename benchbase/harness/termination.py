"""SIGTERM, the way a preempted job receives it: stop soon, but never in the middle of an update.

The command line turns SIGTERM into a ``Terminated`` exception, which unwinds like Ctrl-C. While
a backend's ``train_step`` runs, the exception would tear the update in half (parameters
stepped, optimizer state not), so the harness defers it there: the signal is remembered, the
step completes, and the harness raises it at the next safe point, after writing a checkpoint of
a consistent model.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from benchbase.errors import Terminated

__all__ = ["deferred_termination", "install_sigterm_handler", "termination_requested"]


class _State(threading.local):
    deferring = 0
    requested = False
    always_defer = False


_state = _State()


def install_sigterm_handler(always_defer: bool = False) -> None:
    """``always_defer``: one rank of a run of several processes, where every rank must stop at the
    same point (the verdict after a batch), so SIGTERM is only ever remembered; so is SIGINT, which
    torch's launcher passes on to its workers when it gets Ctrl-C (the workers lead their own
    sessions, so the terminal's Ctrl-C reaches only the launcher): a run of several processes
    stops at a checkpoint whichever of the two stopped it."""
    _state.always_defer = always_defer
    signal.signal(signal.SIGTERM, _on_sigterm)
    if always_defer:
        signal.signal(signal.SIGINT, _on_sigterm)


def _on_sigterm(signal_number, frame) -> None:
    if _state.deferring or _state.always_defer:
        _state.requested = True
        return
    raise Terminated()


@contextmanager
def deferred_termination() -> Iterator[None]:
    """SIGTERM inside the block is remembered instead of raised (see termination_requested)."""
    _state.deferring += 1
    try:
        yield
    finally:
        _state.deferring -= 1


def termination_requested() -> bool:
    """True once a deferred SIGTERM arrived; the caller then stops at its next safe point."""
    return _state.requested


def reset() -> None:
    """Forget a deferred SIGTERM (tests, and a second run in the same process)."""
    _state.requested = False
