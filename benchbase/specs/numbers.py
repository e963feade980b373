"""The one test for a number read back from JSON (a log line, result.json, telemetry): the
checker and the report both judge values a file states, and must judge them alike."""

from __future__ import annotations

import math
from typing import Any

__all__ = ["is_number"]


def is_number(value: Any) -> bool:
    """A finite int or float (JSON allows NaN and Infinity; bools are ints to Python), within a
    float's range (an integer of 400 digits is no time or rate, and no check could compute with it)."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:
        return False
