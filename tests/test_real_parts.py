"""A test that needs a missing real part skips, unless CI requires the part (tests/real_parts.py)."""

from __future__ import annotations

import pytest
from real_parts import REQUIRED, skip_unless_required


def test_a_missing_part_skips_where_nothing_requires_it(monkeypatch):
    monkeypatch.setenv(REQUIRED, "chromium")
    with pytest.raises(pytest.skip.Exception, match="no slurmd"):
        skip_unless_required("slurm", "no slurmd")


def test_a_missing_part_fails_where_ci_requires_it(monkeypatch):
    monkeypatch.setenv(REQUIRED, "chromium slurm")
    with pytest.raises(pytest.fail.Exception, match="no slurmd .*requires slurm"):
        skip_unless_required("slurm", "no slurmd")
