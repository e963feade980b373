"""Whether a log is of a finished run. A compliant log is not always a result: a run that crashed,
was interrupted or stopped on an error wrote a log every rule may pass, yet it measured nothing to
report. `benchbase check` tells the two apart (verdict UNFINISHED, exit code 4).

A run is finished when its run_stop's stop reason is one of StopReason.finished's (every target, or
the workload's epoch or time limit: status aborted, but a result whose unreached targets count as
such) and, in a run folder, the harness wrote result.json, its last act: without it the process
died after run_stop (a full disk at the final checkpoint, a kill).
"""

from __future__ import annotations

from benchbase.compliance.evidence import Evidence
from benchbase.compliance.keys import ERROR, STOP_REASON, StopReason, constants
from benchbase.run_folder import RESULT_NAME

__all__ = ["limit_note", "why_unfinished"]

LONGEST_ERROR = 200
"""Characters of run_stop's error that the reason quotes."""


def why_unfinished(evidence: Evidence) -> str | None:
    """Why the log is of a run that did not finish, in a few words; None for a finished run, or a
    log that does not say (no run_stop, or a stop reason of another tool: the rules judge those)."""
    reason = _stop_reason(evidence)
    if reason is not None and not reason.finished:
        stop = evidence.log.keyed(constants.RUN_STOP)[-1]
        error = _first_line(stop.metadata.get(ERROR))
        return f"the run stopped: {reason}" + (f" ({error})" if error else "")
    if evidence.folder is not None and not evidence.folder.result.exists():
        return f"no {RESULT_NAME} beside the log: the run ended before it wrote its result (it crashed or was killed)"
    return None


def limit_note(evidence: Evidence) -> str | None:
    """For a run stopped at the workload's limit: that its status aborted still makes a result."""
    reason = _stop_reason(evidence)
    if reason not in (StopReason.MAX_EPOCHS, StopReason.MAX_MINUTES):
        return None
    return (f"stopped at its limit ({reason}) with status {constants.ABORTED}: a finished run and a result, "
            "with not every target reached")


def _first_line(error: object) -> str:
    """The error's first line, without the colon an empty message leaves ("Terminated: ")."""
    lines = str(error or "").strip().splitlines()
    return lines[0][:LONGEST_ERROR].rstrip().rstrip(":").rstrip() if lines else ""


def _stop_reason(evidence: Evidence) -> StopReason | None:
    stops = evidence.log.keyed(constants.RUN_STOP)
    reason = stops[-1].metadata.get(STOP_REASON) if stops else None
    try:
        return StopReason(reason) if isinstance(reason, str) else None
    except ValueError:
        return None
