"""Running the `benchbase` command as a user does: a subprocess, its exit code and output."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def run_benchbase(*args: str, timeout: float = 180, cwd: Path | None = None,
                  env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "benchbase", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=cwd, env={**os.environ, **(env or {})})


def run_ds2_mini(backend: str, store: Path, out: Path, seed: int, target: str,
                 max_epochs: int) -> subprocess.CompletedProcess:
    """`benchbase run` of ds2-mini on the cpu profile with a replaced target."""
    return run_benchbase("run", "--workload", "ds2-mini", "--backend", backend, "--hw", "cpu", "--data", str(store),
                         "--out", str(out), "--seed", str(seed), "--target", target, "--max-epochs", str(max_epochs),
                         timeout=900)
