"""Registers the training strategies that ship with benchbase (benchbase.specs.strategy)."""

from __future__ import annotations

from benchbase import hookimpl
from benchbase.specs.strategy import BUILTIN_STRATEGIES


@hookimpl
def register_strategies(register):
    for definition in BUILTIN_STRATEGIES:
        register(definition)
