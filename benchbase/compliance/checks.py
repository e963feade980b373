"""The named Python functions that enforce rules, every one, by rule name (CHECKS).

Each check registers itself with ``@check`` (check_registry.py) in the module of its kind:

- log_checks: the log on its own (its lines, lifecycle, required events, threads, devices);
- workload_checks: the log against the workload it is held to (cadence, pinned
  hyperparameters, subsets, division);
- result_checks: result.json and a resumed run's account against the log;
- cross_examination: the log against the other evidence in its run folder;
- independence_checks: the score re-checked without trusting the backend;
- compute_check: result.json's FLOPs and MFU against the log's totals, run clock and the profile's peak.

Importing this module imports them all, so CHECKS is whole; the checker reads it from here.
"""

from __future__ import annotations

# Imported for their @check registrations.
from benchbase.compliance import (  # noqa: F401
    compute_check,
    cross_examination,
    independence_checks,
    log_checks,
    result_checks,
    workload_checks,
)
from benchbase.compliance.check_registry import CHECKS
from benchbase.compliance.rules import RULE_KINDS

__all__ = ["CHECKS"]

_unenforced = [name for name in RULE_KINDS if name not in CHECKS]
if _unenforced:  # found at import, not when a rule set that names the kind meets a user's log
    raise ImportError(f"rules without a check: {', '.join(_unenforced)}")
