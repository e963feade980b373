"""The timed phase of a run, from run_start to run_stop, closed in one place.

Whatever raises inside it (the backend, a lifecycle hook of any plugin, the harness itself,
Ctrl-C), leaving it writes run_stop with a status and a reason from the closed set and stops
the telemetry sampler process, each step attempted even when the other failed, so the log
stays well-formed and no process is left running. The backend outlives it: the untimed final
evaluation after run_stop still needs the model, and the harness closes the backend after.
"""

from __future__ import annotations

from collections.abc import Callable
from types import TracebackType

from benchbase.compliance import ComplianceLog
from benchbase.compliance.keys import ERROR, STOP_REASON, StopReason, constants
from benchbase.errors import NonFiniteError, PredictionMismatch, Terminated
from benchbase.harness.termination import deferred_termination
from benchbase.telemetry import TelemetrySampler

__all__ = ["TimedRun"]


class TimedRun:
    def __init__(self, log: ComplianceLog, sampler: TelemetrySampler,
                 explain_failure: Callable[[], str | None] = lambda: None) -> None:
        """``explain_failure``: in a run of several processes, another rank's account of an error
        that reached this one as a broken collective (rank 0's coordinator asks the others)."""
        self.log = log
        self.explain_failure = explain_failure
        self.sampler = sampler
        self.reason: StopReason | None = None
        self.error: str | None = None
        self.telemetry: dict = {}

    def __enter__(self) -> TimedRun:
        self.sampler.start()
        return self

    def finish(self, reason: StopReason) -> None:
        """The body ended normally, for this reason."""
        self.reason = reason

    @property
    def status(self) -> str:
        return constants.SUCCESS if self.reason is not None and self.reason.succeeded else constants.ABORTED

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        if error is not None:
            self.reason = _reason_for(error)
            self.error = f"{type(error).__name__}: {error}"
            # A signal stops every rank at the same verdict: no peer failed, and none is waited for.
            peer = None if self.reason == StopReason.INTERRUPTED else self.explain_failure()
            if peer:
                self.reason, self.error = StopReason.ERROR, f"{peer} (rank 0 saw {self.error[:300]})"
        elif self.reason is None:
            self.reason, self.error = StopReason.ERROR, "the run ended without a stop reason"
        with deferred_termination():  # a SIGTERM now must not tear run_stop in half
            failures = _attempt_each(self._log_run_stop, self._stop_sampler)
        if failures and error is None:
            raise failures[0]

    def _log_run_stop(self) -> None:
        metadata = {constants.STATUS: self.status, STOP_REASON: str(self.reason)}
        if self.error:
            metadata[ERROR] = self.error
        self.log.end(constants.RUN_STOP, metadata=metadata)

    def _stop_sampler(self) -> None:
        self.telemetry = self.sampler.stop()


def _reason_for(error: BaseException) -> StopReason:
    if isinstance(error, KeyboardInterrupt | SystemExit | Terminated):
        return StopReason.INTERRUPTED
    if isinstance(error, NonFiniteError):
        return StopReason.NON_FINITE
    if isinstance(error, PredictionMismatch):
        return StopReason.PREDICTION_MISMATCH
    return StopReason.ERROR


def _attempt_each(*steps) -> list[BaseException]:
    """Run every step; return the exceptions of those that raised."""
    failures = []
    for step in steps:
        try:
            step()
        except BaseException as failure:  # noqa: BLE001 - one failing step must not skip the others
            failures.append(failure)
    return failures
