"""A run's compliance log: ':::MLLOG {json}' lines written by mlperf-logging's MLLogger.

Each run gets its own logging.Logger with a file handler, not mllog's process-wide default
that prints to stdout: the terminal belongs to the reporter, and two runs in one process
(tests, --runs N) must not write into each other's logs.
"""

from __future__ import annotations

import itertools
import logging
import sys
from pathlib import Path

from mlperf_logging.mllog import constants, mllog

from benchbase.atomic import naming_the_file

__all__ = ["ComplianceLog", "constants"]

_instances = itertools.count()
_SOURCE_ROOT = str(Path(__file__).resolve().parents[2])


class _FileHandler(logging.FileHandler):
    """A file handler whose failed write (a full disk) raises, naming the log, instead of
    printing logging's "--- Logging error ---" traceback and going on without the line."""

    def handleError(self, record: logging.LogRecord) -> None:
        error = sys.exc_info()[1]
        if isinstance(error, OSError):
            raise naming_the_file(error, self.baseFilename) from error
        super().handleError(record)

    def flush(self) -> None:
        try:
            super().flush()
        except OSError as error:
            raise naming_the_file(error, self.baseFilename) from error


class ComplianceLog:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._logger = logging.getLogger(f"benchbase.mllog.{next(_instances)}")
        self._logger.propagate = False
        self._logger.setLevel(logging.INFO)
        self._handler = _FileHandler(path, mode="a", encoding="utf-8")
        self._handler.setFormatter(logging.Formatter("%(message)s"))
        self._logger.addHandler(self._handler)
        # stack offset 2: the call site reported in each line is the harness, not this wrapper.
        self._mllog = mllog.MLLogger(logger=self._logger, default_stack_offset=2, root_dir=_SOURCE_ROOT)

    def event(self, key: str, value=None, metadata: dict | None = None) -> None:
        self._mllog.event(key=key, value=value, metadata=metadata)
        self._handler.flush()

    def start(self, key: str, value=None, metadata: dict | None = None) -> None:
        self._mllog.start(key=key, value=value, metadata=metadata)
        self._handler.flush()

    def end(self, key: str, value=None, metadata: dict | None = None) -> None:
        self._mllog.end(key=key, value=value, metadata=metadata)
        self._handler.flush()

    def close(self) -> None:
        self._handler.close()
        self._logger.removeHandler(self._handler)
