"""benchbase: time-to-accuracy benchmarks for speech recognition training."""

from __future__ import annotations

import pluggy

__all__ = ["__version__", "hookimpl"]
__version__ = "0.3.0"

hookimpl = pluggy.HookimplMarker("benchbase")
"""Marker for plugin hook implementations: ``@benchbase.hookimpl``."""
