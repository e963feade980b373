"""Running the `benchbase` command as a user does: a subprocess, its exit code and output."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
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


def two_torchrun_nodes(run_arguments: list[str], timeout: float = 600,
                       rendezvous: str = "static") -> list[tuple[int, str, str, float]]:
    """`benchbase run RUN_ARGUMENTS` under two torchrun invocations ("machines") of one process each,
    meeting on 127.0.0.1; every node's (exit code, stdout, stderr, seconds until it exited).

    ``rendezvous``: "static", with explicit node ranks, or "c10d", torchrun's elastic rendezvous
    (the clusters' recipes), node 0 hosting its store (``is_host``): two c10d agents left to guess
    on one host race to host it, and the loser can wait minutes before it retries as a client.
    """
    started = time.monotonic()
    nodes = start_two_torchrun_nodes(run_arguments, rendezvous)
    try:
        outputs, ended = [], []
        for node in nodes:
            outputs.append(node.communicate(timeout=timeout))
            ended.append(time.monotonic() - started)
    finally:
        for node in nodes:
            if node.poll() is None:
                node.kill()
    return [(node.returncode, stdout, stderr, seconds)
            for node, (stdout, stderr), seconds in zip(nodes, outputs, ended)]


def start_two_torchrun_nodes(run_arguments: list[str], rendezvous: str = "static") -> list[subprocess.Popen]:
    """The two torchrun agents of ``two_torchrun_nodes``, started and left running."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    if rendezvous == "static":
        meeting = [["--rdzv-backend=static", "--master-addr=127.0.0.1", f"--master-port={port}", f"--node-rank={node}"]
                   for node in range(2)]
    else:
        meeting = [["--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{port}", "--rdzv-id=benchbase-test",
                    f"--rdzv-conf=is_host={'true' if node == 0 else 'false'}"] for node in range(2)]
    return [subprocess.Popen(
        [sys.executable, "-m", "torch.distributed.run", "--nnodes=2", "--nproc-per-node=1", *meeting[node],
         "-m", "benchbase", "run", *run_arguments],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
        for node in range(2)]
