"""A run in worker processes that `benchbase run` starts through torch's launcher, and its outcome here."""

from __future__ import annotations

from pathlib import Path

from benchbase.errors import BenchbaseError, InputError, Terminated
from benchbase.harness.launch import launch_workers
from benchbase.run_folder import RunFolder
from benchbase.specs.result import ResultProblem, read_run_result

__all__ = ["COLLECTIVE_SLACK_S", "INTERRUPTED_EXIT_CODE", "finished_status", "launched_status"]

# A collective waits at most the run's time limit plus this: rank 0's untimed work (an evaluation
# finishing past the limit) must not time the others out, and a dead rank is noticed at once anyway.
COLLECTIVE_SLACK_S = 3600

INTERRUPTED_EXIT_CODE = 130
"""128 + SIGINT: what `benchbase run` exits with after Ctrl-C."""


def launched_status(processes: int, arguments: list[str], folder: Path, threads: int | None) -> str:
    """`benchbase ARGUMENTS` (a run, or its resume) in ``processes`` workers; the status rank 0
    wrote. A signal that stopped the workers ends this process as it would end a single-process
    run (Terminated: exit 143; KeyboardInterrupt: 130), in one line."""
    failures = launch_workers(processes, arguments, threads)
    codes = {failure.exit_code for failure in failures}
    if Terminated.exit_code in codes:
        raise Terminated()
    if INTERRUPTED_EXIT_CODE in codes:
        raise KeyboardInterrupt
    if failures:
        described = "; ".join(f"rank {failure.rank} exited with code {failure.exit_code}" for failure in failures)
        error = BenchbaseError(f"{described} (each rank's own error is above; run folder {folder})")
        if any(failure.rank == 0 and failure.exit_code == InputError.exit_code for failure in failures):
            error.exit_code = InputError.exit_code  # rank 0 refused its input: so does the run
        raise error
    return finished_status(folder)


def finished_status(folder: Path) -> str:
    """The status rank 0 wrote to result.json ("aborted" if it wrote none it could)."""
    try:
        return read_run_result(RunFolder(folder).result.read_text(encoding="utf-8")).status
    except (OSError, ResultProblem):
        return "aborted"
