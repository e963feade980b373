"""benchbase's backend conformance kit: proves a backend against contract v2 (``benchbase.backend``).

    from benchbase.testing import run_conformance
    results = run_conformance(MyBackend)          # list of RuleResult(name, passed, message, seconds)

or, in a backend's own test suite (one pytest test per rule):

    from benchbase.testing import BackendConformance

    class TestMyBackend(BackendConformance):
        backend = "mine"                          # a registered name, or: backend_class = MyBackend

or `benchbase backend-test NAME` on the command line. The rules and their reasons are in
``benchbase.testing.model_rules`` and ``benchbase.testing.training_rules``.
"""

from __future__ import annotations

from benchbase.testing.conformance import RULES, RuleResult, run_conformance
from benchbase.testing.kit import ConformanceFailure
from benchbase.testing.reference_model import random_weights, reference_forward

__all__ = [
    "RULES",
    "BackendConformance",
    "ConformanceFailure",
    "RuleResult",
    "random_weights",
    "reference_forward",
    "run_conformance",
]


def __getattr__(name: str):
    # pytest is a test dependency, not a runtime one: only the pytest base class imports it.
    if name == "BackendConformance":
        from benchbase.testing.pytest_support import BackendConformance

        return BackendConformance
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
