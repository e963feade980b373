"""Whether a run folder can go on where it stopped, and the command that continues it."""

from __future__ import annotations

import shlex

from benchbase.errors import BenchbaseError
from benchbase.harness.resume import find_resume_point
from benchbase.run_folder import RunFolder

__all__ = ["resume_command"]


def resume_command(folder: RunFolder) -> str | None:
    """`benchbase run --resume DIR` where ``folder`` holds a run that started, did not finish and left
    a complete checkpoint; else None. `run --resume` itself says what stops a run of several processes."""
    if not folder.config.is_file() or folder.result.exists():
        return None
    try:
        find_resume_point(folder)
    except (BenchbaseError, OSError, ValueError, KeyError, TypeError):
        return None
    return f"benchbase run --resume {shlex.quote(str(folder.root))}"
