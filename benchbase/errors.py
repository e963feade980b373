"""User-facing errors: each renders as one line on the CLI, with exit code 2 for bad input."""

from __future__ import annotations

import os

from pydantic import ValidationError

__all__ = ["BenchbaseError", "InputError", "NonFiniteError", "OptimizerMismatch", "PredictionMismatch", "Terminated",
           "UnreadableFile", "describe_validation_error", "why_unreadable"]


class BenchbaseError(Exception):
    """An error the CLI shows as a single line, without a traceback."""

    exit_code = 1


class InputError(BenchbaseError):
    """Bad input (an unknown name, a malformed file): the user must change what they passed."""

    exit_code = 2


class UnreadableFile(InputError):
    """A file a command must read and cannot (no permission, a folder where the file belongs, bytes
    that are not text): "PATH: cannot read: WHY" and exit code 2, whichever command reads it."""

    def __init__(self, path: str | os.PathLike[str], error: OSError | UnicodeDecodeError) -> None:
        self.path = path
        super().__init__(f"{path}: cannot read: {why_unreadable(error)}")


def why_unreadable(error: OSError | UnicodeDecodeError) -> str:
    """The cause in a few words, without Python's "[Errno 13]" and the path the message already names."""
    if isinstance(error, UnicodeDecodeError):
        return "not UTF-8 text"
    return error.strerror or type(error).__name__


class NonFiniteError(BenchbaseError):
    """A loss or log-probability that is NaN or infinite: the run stops at once, status aborted."""


class OptimizerMismatch(BenchbaseError):
    """The run's first step did not update the weights as the workload's optimizer does (the
    harness's replay of it): the run stops at once, status aborted, before its first evaluation."""


class PredictionMismatch(BenchbaseError):
    """predict() gave what the backend's exported weights do not predict (independent scoring):
    the run stops at once, status aborted, and no target counts from that evaluation."""


class Terminated(BaseException):
    """SIGTERM arrived (a preempted job, `kill`): unwinds like Ctrl-C, so every cleanup runs.

    A BaseException, as KeyboardInterrupt is, so that no ``except Exception`` swallows it.
    """

    exit_code = 143  # 128 + SIGTERM, what a shell reports for a process SIGTERM ended


def describe_validation_error(source: str, error: ValidationError) -> str:
    """A pydantic error as one line: 'SOURCE: field.path: message; other.field: message'."""
    problems = []
    for item in error.errors():
        where = ".".join(str(part) for part in item["loc"]) or "(top level)"
        problems.append(f"{where}: {item['msg']}")
    return f"{source}: " + "; ".join(problems)
