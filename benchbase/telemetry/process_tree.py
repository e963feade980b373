"""The run's own processes: the PIDs it names and all their descendants (data-loader workers,
compile workers), followed as they start and end, with their CPU use and resident memory.

Cost matters at one sample every 30 ms. Reading a process's CPU times and memory is a file
read or two each (tens of microseconds), so the psutil.Process objects are kept from sample to
sample. Finding descendants means reading every process's parent on the machine (about 30 µs a
process, milliseconds on a busy host, and psutil's children() pays it once per root), so the
descendants are looked up once for all roots, and only every ``refresh_seconds``: a process
that starts and ends between two look-ups is missed, and one found late counts from then on.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterable, Sequence

import psutil

__all__ = ["ProcessTree"]

BYTES_PER_MB = 2**20


class ProcessTree:
    """Reads the CPU share and resident memory of ``roots`` and their descendants.

    The sampler's own process is left out: it is a child of the run's first process, and its
    cost is measured and reported on its own (sampler_cpu_seconds).
    """

    def __init__(self, roots: Sequence[int], refresh_seconds: float = 0.5) -> None:
        self.roots = list(dict.fromkeys(roots))
        self.refresh_seconds = refresh_seconds
        self.most_followed = 0
        self._myself = os.getpid()
        self._processes: dict[int, psutil.Process] = {}
        self._busy_seconds: dict[int, float] = {}  # each process's CPU time at the last read
        self._looked_up_at = -float("inf")
        self._read_at: float | None = None
        # System "cpu" is the mean over logical CPUs, so dividing by their count puts the
        # tree's CPU on the same scale: percent of the whole machine, 100 = every core busy.
        self._logical_cpus = psutil.cpu_count() or 1

    def read(self) -> tuple[float, float]:
        """(CPU use since the last read as % of the machine, resident memory now in MB).

        The first read sets the baseline and reports 0 %; so does a process's first read."""
        now = time.monotonic()
        if now - self._looked_up_at >= self.refresh_seconds:
            self._follow(self._members())
            self._looked_up_at = now
        busy_seconds, resident_bytes = self._measure()
        elapsed = now - self._read_at if self._read_at is not None else 0.0
        self._read_at = now
        percent = 100.0 * busy_seconds / (elapsed * self._logical_cpus) if elapsed > 0 else 0.0
        return percent, resident_bytes / BYTES_PER_MB

    def _measure(self) -> tuple[float, int]:
        """CPU seconds used since the last read, and the resident bytes, summed over the tree.

        Resident memory is summed per process, so pages that processes share (a forked worker's
        copy-on-write pages, the same libraries) count once per process: an upper bound."""
        busy_seconds, resident_bytes = 0.0, 0
        for pid, process in list(self._processes.items()):
            try:
                times = process.cpu_times()
                resident_bytes += process.memory_info().rss
            except psutil.Error:  # it ended (or became unreadable) since the last look-up
                self._forget(pid)
                continue
            used = times.user + times.system
            # Never below zero: a PID reused by an unrelated process before the next look-up
            # would otherwise subtract the old process's time.
            busy_seconds += max(0.0, used - self._busy_seconds.get(pid, used))
            self._busy_seconds[pid] = used
        return busy_seconds, resident_bytes

    def _follow(self, members: Iterable[int]) -> None:
        members = set(members)
        for pid in set(self._processes) - members:
            self._forget(pid)
        for pid in members - set(self._processes):
            try:
                self._processes[pid] = psutil.Process(pid)
            except psutil.Error:
                continue  # ended between the look-up and now
        self.most_followed = max(self.most_followed, len(self._processes))

    def _forget(self, pid: int) -> None:
        self._processes.pop(pid, None)
        self._busy_seconds.pop(pid, None)

    def _members(self) -> set[int]:
        parents = _parents_by_pid()
        if parents is None:
            return self._members_via_psutil()
        children: dict[int, list[int]] = {}
        for pid, parent in parents.items():
            children.setdefault(parent, []).append(pid)
        members: set[int] = set()
        pending = [pid for pid in self.roots if pid in parents]
        while pending:
            pid = pending.pop()
            if pid not in members and pid != self._myself:  # the sampler and its own children stay out
                members.add(pid)
                pending.extend(children.get(pid, ()))
        return members

    def _members_via_psutil(self) -> set[int]:
        """Where /proc cannot be read: psutil's children(), one pass over all processes per root."""
        members: set[int] = set()
        for pid in self.roots:
            try:
                root = psutil.Process(pid)
                members.update([pid, *(child.pid for child in root.children(recursive=True))])
            except psutil.Error:
                continue  # this root has ended
        return members - {self._myself}


def _parents_by_pid() -> dict[int, int] | None:
    """Every process's parent, from one pass over /proc (Linux); None elsewhere."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        names = os.listdir("/proc")
    except OSError:
        return None
    parents: dict[int, int] = {}
    for name in names:
        if name.isdigit() and (parent := _parent_from_proc(name)) is not None:
            parents[int(name)] = parent
    return parents


def _parent_from_proc(pid: str) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            text = stat.read()
    except OSError:
        return None  # it ended since the listing
    # "pid (command) state ppid ...": the command may hold spaces and parentheses itself,
    # so the fields are counted from the last ")".
    fields = text[text.rfind(b")") + 2:].split(maxsplit=2)
    return int(fields[1]) if len(fields) >= 2 else None
