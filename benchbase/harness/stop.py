"""Why a run stopped: a closed set, written into run_stop's metadata and result.json."""

from __future__ import annotations

from enum import StrEnum

__all__ = ["StopReason"]


class StopReason(StrEnum):
    TARGETS_REACHED = "targets_reached"
    """Every target reached: status success."""
    MAX_EPOCHS = "max_epochs"
    MAX_MINUTES = "max_minutes"
    ERROR = "error"
    """The backend, a plugin or the harness raised; the error is in run_stop's metadata."""
    INTERRUPTED = "interrupted"
    """Ctrl-C, SIGTERM (or another KeyboardInterrupt / SystemExit) stopped the run."""
    NON_FINITE = "non_finite"
    """A loss or log-probability was NaN or infinite; the batch is named in run_stop's error."""

    @property
    def succeeded(self) -> bool:
        return self is StopReason.TARGETS_REACHED
