"""`benchbase run` of a process-per-device backend on several devices: the workers are started
by torch's own launcher, the engine behind ``torchrun`` (``torch.distributed.launcher``), with
a standalone rendezvous on this machine. Each worker runs ``python -m benchbase run`` with the
same arguments and finds its rank in the launcher's environment; rank 0 writes the run folder.
A worker runs this process's interpreter and imports this process's benchbase, whatever the
current directory holds (``benchbase.process_guard.child_python_environment``).

``torchrun --nnodes N --nproc-per-node G -m benchbase run ...`` is the same thing across machines
(benchbase then starts nothing itself).
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import uuid
from dataclasses import dataclass

from benchbase.errors import Terminated
from benchbase.harness.world import torch_distributed
from benchbase.process_guard import child_python_environment

__all__ = ["LAUNCHED_WORKER", "WorkerFailure", "launch_workers"]

LAUNCHED_WORKER = "BENCHBASE_LAUNCHED_WORKER"
"""Set to "1" in the workers this launcher starts. They exit 0 when their run ended, whatever its
status, and the launching process reads the status from rank 0's result.json: the launcher
stops every other worker as soon as one exits non-zero, so rank 0's "aborted at a limit" exit
code (3) would cut off a rank still closing down and make a finished run look broken. Stopped
by a signal, they leave without a word: the launching process says it, once."""

HANDLED_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT)
"""The signals torch's launcher handles by stopping its workers (TORCHELASTIC_SIGNALS_TO_HANDLE's default)."""

# The launcher's grace period between SIGTERM and SIGKILL when it stops workers (one failed,
# or it was itself interrupted): long enough for rank 0 to checkpoint and close its log.
SHUTDOWN_GRACE_SECONDS = 60


def _quiet_launcher_logs() -> None:
    """The launcher logs each worker's exit and every SIGTERM it sends; benchbase reports failures
    itself, one line per rank. LOGLEVEL (torch's own switch) set by the user keeps them."""
    if "LOGLEVEL" in os.environ:
        return
    for name in list(logging.root.manager.loggerDict):
        if name.startswith("torch.distributed.elastic"):
            logging.getLogger(name).setLevel(logging.CRITICAL)


@dataclass(frozen=True)
class WorkerFailure:
    rank: int
    exit_code: int
    message: str


def launch_workers(processes: int, arguments: list[str], threads_per_process: int | None) -> list[WorkerFailure]:
    """Run ``python -m benchbase ARGUMENTS`` in ``processes`` workers until all end; their failures."""
    torch_distributed()  # torch installed, or the one-line error that says how
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    _quiet_launcher_logs()
    if threads_per_process:
        # torchrun sets OMP_NUM_THREADS=1 for every worker unless told; the plan's budget is the truth.
        os.environ["OMP_NUM_THREADS"] = str(threads_per_process)
    config = LaunchConfig(
        min_nodes=1, max_nodes=1, nproc_per_node=processes, run_id=f"benchbase-{uuid.uuid4().hex[:12]}",
        rdzv_backend="c10d", rdzv_endpoint="127.0.0.1:0",  # torchrun --standalone: a free port here
        max_restarts=0,  # a failed run is not restarted behind the user's back: it ends, logged
        monitor_interval=0.1, start_method="spawn", shutdown_timeout=SHUTDOWN_GRACE_SECONDS,
    )
    # The spawned workers inherit this process's environment; this process does not keep these.
    worker_variables = {name: value for name, value in child_python_environment().items()
                        if os.environ.get(name) != value}
    worker_variables[LAUNCHED_WORKER] = "1"
    previous = {name: os.environ.get(name) for name in worker_variables}
    os.environ.update(worker_variables)
    # The launcher replaces this process's handlers of SIGTERM, SIGINT, SIGHUP and SIGQUIT with its
    # own and leaves them there; they go back once it returns (benchbase's turn SIGTERM into Terminated).
    handlers = {number: signal.getsignal(number) for number in HANDLED_SIGNALS}
    try:
        try:
            elastic_launch(config, sys.executable)("-m", "benchbase", *arguments)
        finally:
            for number, handler in handlers.items():
                if handler is not None:
                    signal.signal(number, handler)
            for name, value in previous.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value
    except ChildFailedError as error:
        return [WorkerFailure(rank, failure.exitcode, failure.message or "")
                for rank, failure in sorted(error.failures.items())]
    except SignalException as error:
        # The launcher has passed the signal on to every worker and waited for them to stop (they
        # stop at the same batch, rank 0 checkpoints and logs run_stop): this process then ends as
        # a single-process run does on the same signal, in one line.
        if error.sigval == signal.SIGINT:
            raise KeyboardInterrupt from None
        raise Terminated() from None
    return []
