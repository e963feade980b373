"""benchbase's backend conformance kit: proves a backend against the backend contract (``benchbase.backend``).

    from benchbase.kit import run_conformance
    results = run_conformance(MyBackend)                  # list of RuleResult(name, passed, message, seconds)
    results = run_conformance(MyBackend, family="rnnt")   # the rules on another family the backend declares

or `benchbase backend-test NAME` on the command line, or, in a backend's own test suite, the
pytest base class ``benchbase.testing.BackendConformance``. Every rule is written once against
the model family's parts (``benchbase.families.parts``), so it proves a backend of any family,
a plugin's included; the rules and their reasons are in ``model_rules``, ``training_rules``,
``optimizer_rules`` and ``precision_rules``.

Nothing that decides a score imports this package: the harness and the families use
``benchbase.numerics`` and the families' own references, and the kit builds on them.
"""

from __future__ import annotations

from benchbase.kit.conformance import RULES, RuleResult, run_conformance
from benchbase.kit.core import ConformanceFailure

__all__ = ["RULES", "ConformanceFailure", "RuleResult", "run_conformance"]
