"""A script under benchmarks/ as a module, for the tests that use its functions (it is no package)."""

from __future__ import annotations

import importlib.util
import types
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


def load_benchmark(name: str) -> types.ModuleType:
    """benchmarks/NAME.py, imported afresh."""
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
