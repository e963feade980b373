"""Running the `benchbase` command as a user does: a subprocess, its exit code and output."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path


def benchbase_in_process(capsys, *arguments: str) -> tuple[int, str, str]:
    """`benchbase ARGUMENTS` in this process (a subprocess spends seconds importing): its exit code,
    its output and its errors, read from pytest's ``capsys``."""
    from benchbase.cli import main

    try:
        main(list(arguments))
        code = 0
    except SystemExit as exit_:
        code = int(exit_.code or 0)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


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


def two_torchrun_nodes(run_arguments: list[str], timeout: float = 600) -> list[tuple[int, str, str]]:
    """`benchbase run RUN_ARGUMENTS` under two torchrun invocations ("machines") of one process each,
    meeting at a static rendezvous on 127.0.0.1; every node's (exit code, stdout, stderr).

    Static, with explicit node ranks: two c10d rendezvous agents started at the same instant on
    one host race to host its store, and the loser can wait minutes before it retries as a client.
    """
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    nodes = [subprocess.Popen(
        [sys.executable, "-m", "torch.distributed.run", "--nnodes=2", "--nproc-per-node=1", f"--node-rank={node}",
         "--rdzv-backend=static", "--master-addr=127.0.0.1", f"--master-port={port}",
         "-m", "benchbase", "run", *run_arguments],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
        for node in range(2)]
    try:
        outputs = [node.communicate(timeout=timeout) for node in nodes]
    finally:
        for node in nodes:
            if node.poll() is None:
                node.kill()
    return [(node.returncode, stdout, stderr) for node, (stdout, stderr) in zip(nodes, outputs)]
