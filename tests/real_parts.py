"""Skipping a test that needs a real part (Slurm, Chromium, PostgreSQL) unless CI requires it.

Where such a part is missing the test skips and says why. CI installs the parts and then names
them in BENCHBASE_REQUIRED_PARTS (.ci/run): there a test that would skip fails instead, so that a
passing CI proves the Slurm job ran and the browser rendered, not that they were skipped.
"""

from __future__ import annotations

import os

import pytest

REQUIRED = "BENCHBASE_REQUIRED_PARTS"
PARTS = ("chromium", "postgresql", "slurm")
"""Every real part a test may need; .ci/run requires each one it finds installed."""


def required(part: str) -> bool:
    return part in os.environ.get(REQUIRED, "").split()


def skip_unless_required(part: str, reason: str) -> None:
    """pytest.skip(reason), or pytest.fail where CI requires ``part`` (slurm, chromium, postgresql)."""
    if required(part):
        pytest.fail(f"{reason} ({REQUIRED} requires {part} here)")
    pytest.skip(reason)
