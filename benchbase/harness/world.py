"""The processes of a data-parallel run, and how rank 0's decisions reach the others.

A ``process_per_device`` backend trains in one process per device under torch.distributed,
started by torch's own launcher (``benchbase run`` starts it through
``torch.distributed.run``, or the user runs ``torchrun``, on one machine or several). Every
process runs the harness; rank 0 owns the clock, the log, evaluation, checkpoints, telemetry
and the lifecycle hooks, and the others train. They stay in step through the same engine the
backend uses for its gradients: a barrier before the clock starts, one small all-reduce after
every batch (rank 0's verdict: go on or stop; any rank's SIGTERM), and the process group's key
value store, where a failing rank leaves its error for rank 0 to log.

The harness talks to a ``Coordinator``: ``Solo`` for a world of one, ``ProcessGroup`` for
several. torch is imported only by the latter and only for such a run: the harness itself stays
framework-free, and a single-process run never touches it.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from enum import IntEnum
from typing import Any, Protocol

import psutil

from benchbase.errors import BenchbaseError, InputError

__all__ = ["Coordinator", "PeerLost", "ProcessGroup", "Solo", "Verdict", "World", "coordinator_for",
           "torch_distributed"]

FAILURE_KEY = "benchbase/failure/{rank}"
# How long rank 0 waits for a failing peer's own account before it names the failure itself.
PEER_REPORT_GRACE_SECONDS = 2.0


class PeerLost(BenchbaseError):
    """A collective of the harness failed: another rank of the run ended."""


class Verdict(IntEnum):
    """What every rank does after a batch or an epoch: the largest any rank says wins."""

    CONTINUE = 0
    STOP = 1
    """Rank 0 decided (a limit, every target reached); it knows the reason and logs it."""
    TERMINATED = 2
    """Some rank received SIGTERM: every rank stops at this same point, rank 0 checkpoints."""


@dataclass(frozen=True)
class World:
    """This process's place among the run's processes, as torch's launcher describes it."""

    rank: int = 0
    size: int = 1
    local_rank: int = 0
    local_size: int = 1
    node_rank: int = 0

    @classmethod
    def from_environment(cls, environment: dict[str, str] | None = None) -> World:
        """The launcher's RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK; a world of one without them."""
        environment = dict(os.environ) if environment is None else environment
        if "WORLD_SIZE" not in environment:
            return cls()
        try:
            values = {name: int(environment.get(variable, default)) for name, variable, default in (
                ("rank", "RANK", "0"), ("size", "WORLD_SIZE", "1"), ("local_rank", "LOCAL_RANK", "0"),
                ("local_size", "LOCAL_WORLD_SIZE", "1"), ("node_rank", "GROUP_RANK", "0"))}
        except ValueError:
            raise InputError("RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE and GROUP_RANK must be integers "
                             "(set by torchrun)") from None
        world = cls(**values)
        if not (world.size >= 1 and 0 <= world.rank < world.size and 0 <= world.local_rank < world.local_size):
            raise InputError(f"torchrun's environment is inconsistent: RANK {world.rank}, WORLD_SIZE {world.size}, "
                             f"LOCAL_RANK {world.local_rank}, LOCAL_WORLD_SIZE {world.local_size}")
        return world

    @property
    def leader(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.size > 1


class Coordinator(Protocol):
    """How the harness meets the run's other processes; rank 0 decides, the others follow."""

    world: World
    service_addresses: tuple[str, ...]
    """One reachable host:port per rank, reserved for a framework that forms its own cluster."""

    def barrier(self) -> None:
        """Wait until every rank arrives."""

    def agree(self, verdict: Verdict) -> Verdict:
        """This rank's verdict in, the largest of every rank's out."""

    def gather(self, value: Any) -> list[Any]:
        """Every rank's ``value``, in rank order, on every rank."""

    def report_failure(self, message: str) -> None:
        """Leave this rank's error where rank 0 finds it; never raises."""

    def peer_failure(self) -> str | None:
        """Rank 0, after a collective failed: which rank failed and why, as far as can be told."""

    def local_processes(self) -> list[int]:
        """The run's processes on this machine (the telemetry sampler follows them)."""

    def close(self) -> None:
        """Leave the world; never raises."""


class Solo:
    """A world of one: every coordination is a no-op."""

    world = World()
    service_addresses: tuple[str, ...] = ()

    def barrier(self) -> None:
        pass

    def agree(self, verdict: Verdict) -> Verdict:
        return verdict

    def gather(self, value: Any) -> list[Any]:
        return [value]

    def report_failure(self, message: str) -> None:
        pass

    def peer_failure(self) -> str | None:
        return None

    def local_processes(self) -> list[int]:
        return [os.getpid()]

    def close(self) -> None:
        pass


class ProcessGroup:
    """torch.distributed's default process group, shared with the backend's DDP.

    gloo carries the harness's own messages (small CPU tensors) whatever the devices; a GPU
    plan adds NCCL for the backend's gradients in the same group.
    """

    def __init__(self, world: World, device_kind: str, timeout_seconds: float) -> None:
        torch, distributed = torch_distributed()
        self.world = world
        self._torch, self._distributed = torch, distributed
        backend = "cpu:gloo,cuda:nccl" if device_kind == "cuda" else "gloo"
        # The timeout bounds how long a rank waits in a collective, so it must outlast rank 0's
        # longest solo work (an evaluation) while the others wait at the next all-reduce. A
        # rank that dies is noticed at once anyway: its sockets close.
        distributed.init_process_group(backend=backend, timeout=timedelta(seconds=timeout_seconds))
        self._store = distributed.distributed_c10d._get_default_store()
        self._verdict = torch.zeros(1, dtype=torch.int64)
        # Where every rank runs, so that rank 0 can name a peer that died without a word.
        self.peers: list[tuple[str, int]] = self.gather((socket.gethostname(), os.getpid()))
        # One free port per rank on an address the others can reach, for a framework that forms
        # its own cluster (tf.distribute's MultiWorkerMirroredStrategy).
        self.service_addresses: tuple[str, ...] = tuple(self.gather(_reachable_free_address()))

    def barrier(self) -> None:
        with self._peers_lost():
            self._distributed.barrier()

    def agree(self, verdict: Verdict) -> Verdict:
        self._verdict.fill_(int(verdict))
        with self._peers_lost():
            self._distributed.all_reduce(self._verdict, op=self._distributed.ReduceOp.MAX)
        return Verdict(int(self._verdict.item()))

    def gather(self, value: Any) -> list[Any]:
        values: list[Any] = [None] * self.world.size
        with self._peers_lost():
            self._distributed.all_gather_object(values, value)
        return values

    @contextmanager
    def _peers_lost(self) -> Iterator[None]:
        """A collective that breaks means another rank is gone: one line, not gloo's traceback."""
        try:
            yield
        except RuntimeError as error:  # torch.distributed's DistError and gloo's own are RuntimeErrors
            first_line = (str(error).strip().splitlines() or [type(error).__name__])[0]
            raise PeerLost(f"another process of the run is gone ({first_line[:300]})") from None

    def report_failure(self, message: str) -> None:
        """Leave this rank's error where rank 0 finds it; never raises (the error itself is on its way out)."""
        try:
            self._store.set(FAILURE_KEY.format(rank=self.world.rank), message[:2000])
        except Exception:  # noqa: BLE001  (the store may be gone with rank 0)
            pass

    def peer_failure(self) -> str | None:
        """Rank 0, after a collective failed: which rank failed and why, as far as can be told."""
        deadline = time.monotonic() + PEER_REPORT_GRACE_SECONDS
        while True:
            reported = self._reported_failures()
            if reported or time.monotonic() >= deadline:
                break
            time.sleep(0.1)
        if reported:
            return "; ".join(f"rank {rank}: {message}" for rank, message in sorted(reported.items()))
        here = socket.gethostname()
        gone = [rank for rank, (host, pid) in enumerate(self.peers)
                if rank != self.world.rank and host == here and not psutil.pid_exists(pid)]
        if gone:
            return "; ".join(f"rank {rank}: the process ended without a report (killed?)" for rank in gone)
        return None

    def local_processes(self) -> list[int]:
        here = socket.gethostname()
        return [pid for host, pid in self.peers if host == here]

    def _reported_failures(self) -> dict[int, str]:
        failures = {}
        for rank in range(self.world.size):
            key = FAILURE_KEY.format(rank=rank)
            try:
                if rank != self.world.rank and self._store.check([key]):
                    failures[rank] = self._store.get(key).decode("utf-8", "replace")
            except Exception:  # noqa: BLE001  (the store went down with its host)
                break
        return failures

    def close(self) -> None:
        try:
            self._distributed.destroy_process_group()
        except Exception:  # noqa: BLE001  (a group broken by a failed peer cannot be torn down cleanly)
            pass


def _reachable_free_address() -> str:
    """host:port with a port free right now, on the interface that routes to the rendezvous host."""
    master = os.environ.get("MASTER_ADDR", "127.0.0.1")
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect((master, int(os.environ.get("MASTER_PORT", "29500"))))  # UDP: nothing is sent
            host = probe.getsockname()[0]
    except OSError:
        host = "127.0.0.1"
    with socket.socket() as listener:
        listener.bind((host, 0))
        return f"{host}:{listener.getsockname()[1]}"


def torch_distributed() -> tuple[Any, Any]:
    """torch and torch.distributed, or an InputError saying how to install them (benchbase's extra)."""
    try:
        import torch
        import torch.distributed as distributed
    except ModuleNotFoundError:
        raise InputError("a run of several processes is coordinated through torch.distributed, and torch is "
                         "not installed: pip install 'benchbase[distributed]'") from None
    return torch, distributed


def coordinator_for(world: World, device_kind: str, timeout_seconds: float) -> Coordinator:
    return ProcessGroup(world, device_kind, timeout_seconds) if world.distributed else Solo()
