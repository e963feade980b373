"""A test that needs a missing real part skips, unless CI requires the part (tests/real_parts.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from real_parts import PARTS, REQUIRED, skip_unless_required

ROOT = Path(__file__).resolve().parent.parent


def test_a_missing_part_skips_where_nothing_requires_it(monkeypatch):
    monkeypatch.setenv(REQUIRED, "chromium")
    with pytest.raises(pytest.skip.Exception, match="no slurmd"):
        skip_unless_required("slurm", "no slurmd")


def test_a_missing_part_fails_where_ci_requires_it(monkeypatch):
    monkeypatch.setenv(REQUIRED, "chromium slurm")
    with pytest.raises(pytest.fail.Exception, match="no slurmd .*requires slurm"):
        skip_unless_required("slurm", "no slurmd")


def test_ci_requires_every_part_a_test_needs_and_every_such_test_asks_for_it():
    ci = (ROOT / ".ci" / "run").read_text()
    asked = {match for path in (ROOT / "tests").glob("test_*.py")
             for match in re.findall(r'skip_unless_required\(\s*"(\w+)"', path.read_text())}
    for part in PARTS:
        assert f"required+=({part})" in ci, f".ci/run does not require {part} where it is installed"
        assert part in asked, f"no test fails rather than skips without {part} where CI requires it"
