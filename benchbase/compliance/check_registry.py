"""How a check is declared: ``@check(SomeRule)`` registers the function that enforces a kind of
rule under that kind's name, the ``check`` literal its model in rules.py spells.

    @check(r.InitDurationRule)
    def init_duration(rule: r.InitDurationRule, evidence: Evidence) -> list[str]: ...

CHECKS fills as the modules of checks are imported; checks.py imports them all, so the checker
reads CHECKS through it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from benchbase.compliance.evidence import Evidence
from benchbase.compliance.rules import RULE_KINDS

__all__ = ["CHECKS", "MESSAGES_PER_RULE", "CheckFunction", "check"]

MESSAGES_PER_RULE = 8
"""The failure messages of one rule a report lists; the rest are counted (checker.capped)."""

CheckFunction = Callable[[Any, Evidence], list[str]]
"""A rule's data and the evidence -> failure messages (none: it passes); raises Skip when it cannot run."""

CHECKS: dict[str, CheckFunction] = {}
"""Rule name -> the function that enforces it."""

_Function = TypeVar("_Function", bound=CheckFunction)


def check(kind: type[Any]) -> Callable[[_Function], _Function]:
    """Register the decorated function as the check of rules of model ``kind``; a kind has one check."""
    name = kind.rule_name()
    if RULE_KINDS.get(name) is not kind:
        raise TypeError(f"{kind.__name__} is not a kind of rule declared in rules.py")

    def register(function: _Function) -> _Function:
        if name in CHECKS:
            raise TypeError(f"rule {name!r} has two checks: {CHECKS[name].__qualname__} and {function.__qualname__}")
        CHECKS[name] = function
        return function

    return register
