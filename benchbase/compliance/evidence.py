"""What a check reads, and how it says it cannot run: the Evidence and Skip.

A check takes a rule's data and the Evidence (the parsed log and, for a run folder, its
result.json, config.json and the registered workload) and returns failure messages; an empty
list passes. A check that lacks the evidence it needs raises Skip with the reason. Every module
of checks imports these from here, and none imports another module of checks for them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from benchbase.compliance.keys import constants
from benchbase.compliance.parse import ParsedLog
from benchbase.run_folder import RunFolder
from benchbase.specs import RunResult
from benchbase.specs.numbers import is_number
from benchbase.specs.overrides import MISSING

__all__ = ["Evidence", "Skip", "same_value", "short"]


class Skip(Exception):
    """The check cannot run on this input (say, a bare log has no result.json)."""


@dataclass
class Evidence:
    source: str
    log: ParsedLog
    result: RunResult | None = None
    """result.json, when it is beside the log and holds a run result (else the run_files finding says why not)."""
    config: dict | None = None
    workload: dict | None = None
    """The registered workload the log names (model_dump in JSON mode), when known."""
    folder: RunFolder | None = None
    """The run folder the log sits in (result.json or config.json beside it); None for a bare log."""
    divisions: bool = False
    """The rule set knows MLPerf's divisions (it has a ``division`` rule): an open run is held to its own config."""

    def reference_workload(self) -> tuple[dict, str]:
        """The workload the run is held to: the registered one for a closed run, the run's own
        config.json for an open one (or where the workload is not registered here)."""
        configured = (self.config or {}).get("workload")
        if self.workload is not None and not (self.is_open() and isinstance(configured, dict)):
            return self.workload, "the registered workload"
        if isinstance(configured, dict):
            if self.workload is not None:
                return configured, "the run's own config.json (open division)"
            return configured, "config.json (workload not registered here)"
        raise Skip("no workload spec: the log names no registered workload and there is no config.json")

    def is_open(self) -> bool:
        """The log places the run in the open division (MLPerf's term: its workload departs from the
        registered one), under a rule set that knows divisions (1.3 and later: rule ``division``).
        Older rule sets hold every run to the registered workload, as they always did."""
        return self.divisions and self.value_of(constants.SUBMISSION_DIVISION) == constants.OPEN

    def value_of(self, key: str) -> Any:
        event = self.log.first(key)
        return MISSING if event is None else event.value


def same_value(left: Any, right: Any) -> bool:
    if is_number(left) and is_number(right):
        return math.isclose(left, right, rel_tol=1e-9, abs_tol=1e-12)
    return left == right


def short(value: Any) -> str:
    """A value as a failure message quotes it: ``missing`` for MISSING, else its repr cut to 120 characters."""
    text = "missing" if value is MISSING else repr(value)
    return text if len(text) <= 120 else text[:117] + "..."
