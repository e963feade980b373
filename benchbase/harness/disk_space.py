"""A full disk: what a run will write, checked before the clock, and a failed write named as such.

A run that fills its disk must not train for hours and then fail at the final checkpoint, and a
framework that reports the failed write in its own words (torch: ``unexpected pos N vs M``) must
still read as the disk being full.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from benchbase.errors import InputError
from benchbase.run_folder import PERIODIC_CHECKPOINTS_KEPT, RunFolder
from benchbase.specs import WorkloadSpec

__all__ = ["DISK_ESTIMATE_ENVIRONMENT", "DISK_FULL", "SpaceEstimate", "disk_full_error", "estimated_log_bytes",
           "estimated_resume_bytes", "estimated_run_bytes", "free_bytes", "space_estimate", "space_shortfall"]

DISK_FULL = "the disk is full (No space left on device)"

BYTES_PER_VALUE = 4
"""Checkpoints hold FP32 values, whatever the training precision."""

OPTIMIZER_SLOTS = {"adadelta": 2, "adamw": 2, "sgd": 1}
"""Values the optimizer keeps per parameter: AdaDelta's two accumulators, Adam's two moments,
SGD's momentum. An optimizer not named here counts as two."""

DISK_ESTIMATE_ENVIRONMENT = "BENCHBASE_DISK_ESTIMATE"
"""Replaces the estimate of what a run (a series, a sweep, a resume) writes: a size such as 200M or
2G, 0 to skip the check; for a filesystem whose free space is known better than the estimate."""

SAMPLES_PER_SECOND = 1 / 0.030
"""The telemetry sampler writes a line every 30 ms (benchbase/telemetry/sampler.py)."""
SAMPLE_BYTES, CORE_BYTES, GPU_BYTES = 100, 8, 320
"""A telemetry line: its time, CPU and the process tree's CPU and memory; each core's utilization;
each GPU's utilization, memory, power, clocks and PCIe traffic (measured lines, rounded up)."""
RECORD_BYTES_PER_SECOND = 4096
"""metrics.jsonl (a line of about 160 bytes per batch) and sentences.jsonl: 25 batches a second."""
LOG_HORIZON_MINUTES = 24 * 60
"""The logs are counted for the run's time limit up to a day: a workload whose limit is a
placeholder (100000 minutes) would otherwise ask for tens of GB that no run of it writes."""
FIXED_LOG_BYTES = 2**20
"""config.json, result.json, the compliance log's events and the decoded evaluation outputs."""

LOW_FREE_BYTES = 2**20
"""After a failed write, less free space than this means the disk filled up."""


def estimated_run_bytes(workload: WorkloadSpec, gpus: int = 0) -> int:
    """A rough upper bound on what one run writes into its folder: its checkpoints and its logs.

    A checkpoint is the parameters and the optimizer's state per parameter, 4 bytes each. On disk
    at once: the periodic checkpoints kept, plus the one being written (the oldest is pruned only
    after it), plus the final checkpoint and the exported final weights (parameters only). The
    logs grow with the time the run may take (``estimated_log_bytes``).
    """
    parameters = workload.model.parameter_count(workload.features.dimension)
    checkpoint = parameters * BYTES_PER_VALUE * (1 + OPTIMIZER_SLOTS.get(workload.optimizer.name, 2))
    checkpoints = checkpoint * (PERIODIC_CHECKPOINTS_KEPT + 2) + parameters * BYTES_PER_VALUE
    return checkpoints + estimated_log_bytes(workload, gpus)


def estimated_log_bytes(workload: WorkloadSpec, gpus: int = 0) -> int:
    """What the run's logs reach by its time limit (up to LOG_HORIZON_MINUTES): telemetry lines for
    this machine's cores and the run's ``gpus``, metrics and sentences, and a fixed allowance."""
    seconds = min(workload.max_minutes, LOG_HORIZON_MINUTES) * 60
    sample = SAMPLE_BYTES + CORE_BYTES * (os.cpu_count() or 1) + GPU_BYTES * gpus
    return int(seconds * (SAMPLES_PER_SECOND * sample + RECORD_BYTES_PER_SECOND)) + FIXED_LOG_BYTES


def free_bytes(folder: Path) -> int:
    """Free space on the filesystem that holds ``folder`` (or would, once made)."""
    path = folder.absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return shutil.disk_usage(path).free


def estimated_resume_bytes(workload: WorkloadSpec, folder: RunFolder) -> int:
    """What resuming the run in ``folder`` writes on top of what the folder holds: the run's
    estimate less the checkpoints already in it (they count among those on disk at once), plus
    the copy of the interrupted segment's log, metrics, telemetry and sentences (segments/K)."""
    held = sum(_size_of(path) for path in folder.checkpoints.glob("*")) if folder.checkpoints.is_dir() else 0
    segment = sum(_size_of(path) for path in folder.segment_evidence())
    return max(estimated_run_bytes(workload) - held, estimated_log_bytes(workload)) + segment


@dataclass(frozen=True)
class SpaceEstimate:
    """What ``who`` (the run, its resume, a sweep's runs) will write into ``folder``, and the free
    space on its filesystem (None where it cannot be known)."""

    folder: Path
    needed: int
    free: int | None
    who: str = "the run"
    basis: str = "checkpoints, log and metrics"
    """What ``needed`` counts, or where it came from (the override)."""

    @property
    def short(self) -> bool:
        return self.free is not None and self.free < self.needed

    def describe(self) -> str:
        """The estimate, as a dry run shows it."""
        free = "free space unknown" if self.free is None else f"{_size(self.free)} free on its filesystem"
        return f"{self.who} needs about {_size(self.needed)} ({self.basis}); {free}"

    def shortfall(self) -> str | None:
        """A one-line account when the filesystem has less free space than needed, with the way to
        overrule the estimate; else None."""
        if not self.short:
            return None
        return (f"{self.folder}: {self.who} needs about {_size(self.needed)} ({self.basis}) and its filesystem has "
                f"{_size(self.free or 0)} free ({DISK_ESTIMATE_ENVIRONMENT}=SIZE replaces the estimate)")


def space_estimate(folder: Path, needed: int, who: str = "the run") -> SpaceEstimate:
    """``needed`` in ``folder``, unless DISK_ESTIMATE_ENVIRONMENT says how much instead."""
    try:
        free: int | None = free_bytes(folder)
    except OSError:
        free = None  # unknowable here; the run's own writes will say
    override = _estimate_override()
    if override is not None:
        return SpaceEstimate(folder, override, free, who, f"{DISK_ESTIMATE_ENVIRONMENT}")
    return SpaceEstimate(folder, needed, free, who)


SIZE_UNITS = {"": 1, "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}


def _estimate_override() -> int | None:
    """DISK_ESTIMATE_ENVIRONMENT's size in bytes (K, M, G, T: powers of 1024), None when unset."""
    text = os.environ.get(DISK_ESTIMATE_ENVIRONMENT, "").strip()
    if not text:
        return None
    match = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?", text.lower())
    if match is None:
        raise InputError(f"{DISK_ESTIMATE_ENVIRONMENT}={text!r}: expected a size such as 500M or 2G "
                         "(K, M, G, T: powers of 1024), or 0 to skip the free-space check")
    return int(float(match.group(1)) * SIZE_UNITS[match.group(2)])


def space_shortfall(folder: Path, needed: int, who: str = "the run") -> str | None:
    """A one-line account when ``folder``'s filesystem has less free space than ``needed``; else None."""
    return space_estimate(folder, needed, who).shortfall()


def _size_of(path: Path) -> int:
    try:
        return path.stat().st_size if path.is_file() else 0
    except OSError:
        return 0


def disk_full_error(error: BaseException, path: Path) -> OSError | None:
    """``error`` from writing ``path`` as an ENOSPC OSError naming ``path``, when the disk is full:
    an ENOSPC anywhere in its chain of causes, or (a framework's own exception that hides it) less
    than LOW_FREE_BYTES left on ``path``'s filesystem. None when the disk is not why it failed."""
    seen: set[int] = set()
    cause: BaseException | None = error
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, OSError) and cause.errno == errno.ENOSPC:
            return OSError(errno.ENOSPC, DISK_FULL, str(path))
        cause = cause.__cause__ or cause.__context__
    try:
        if free_bytes(path.parent) < LOW_FREE_BYTES:
            return OSError(errno.ENOSPC, DISK_FULL, str(path))
    except OSError:
        pass
    return None


def _size(count: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if count < 1024 or unit == "GiB":
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1024
    return f"{count:.1f} TiB"
