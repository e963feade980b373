"""Resuming a run that was killed or preempted: `benchbase run --resume RUN_DIR`.

Every periodic checkpoint has a sidecar (``batch-N.ckpt.json``) written after it: the
checkpoint's SHA-256 and the harness's state at that batch (epoch, batches done in it, utterances
trained, run-clock seconds, the TTA tracker's history, the last evaluation, the CPU seconds of
the steps). The backend's own state (weights, optimizer, its random state) is in the checkpoint;
the data order is a function of the seed and the epoch, so the pipeline resumes by skipping the
batches already trained.

The clock rule. TTA counts the time up to the interruption, the work lost since the checkpoint
and the time after resuming; the restart's own init is untimed, like any init. The moment of
the interruption is the last thing the run wrote: its last telemetry sample (every 30 ms),
metrics line or log line. The resumed clock starts at that many seconds.

A run of several processes. Each rank other than 0 writes its own state at the same batch
beside rank 0's checkpoint (``batch-N.rank-R.ckpt``: its weights, which differ from rank 0's
under a strategy other than sync, its BatchNorm statistics and quantizer ranges under such a
strategy, its optimizer and its own dropout random state), and rank 0 writes the sidecar once
every rank's file is in place, with each one's SHA-256: a checkpoint is complete when every
rank's file matches. On resume every rank loads its own file; rank 0 alone chooses the
checkpoint and owns everything else, as in the run.

The folder afterwards. The interrupted segment's files move to segment K (the evidence
of what happened, the lost work included); the run's own files restart from the checkpoint:
mllog.log and metrics.jsonl keep their lines up to the checkpoint, then the log states the
resume (``benchbase_resume``: the checkpoint, the interruption's clock time and the downtime,
and the host that goes on, which may be another node of the kind the run started on),
and the run goes on. So mllog.log still holds one run_start and one run_stop; `benchbase check`
subtracts each resume's downtime from the wall clock of the events after it.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

from benchbase.atomic import atomic_write_text
from benchbase.compliance import ComplianceLog
from benchbase.compliance import keys as own_keys
from benchbase.compliance.parse import read_log
from benchbase.data.integrity import file_digest
from benchbase.errors import InputError
from benchbase.harness.clock import RunClock
from benchbase.harness.resume_state import ResumeState
from benchbase.run_folder import RunFolder
from benchbase.telemetry.environment import host_label

__all__ = ["ResumePoint", "Resumption", "find_resume_point", "interrupted_at", "restart_segment", "write_sidecar"]


@dataclass(frozen=True)
class ResumePoint:
    checkpoint: Path
    state: ResumeState
    """The harness state the checkpoint's sidecar holds."""
    skipped: tuple[str, ...] = ()
    """Why newer checkpoints were passed over (a torn file, a checksum that does not match)."""

    @property
    def batch_index(self) -> int:
        return self.state.batch_index


@dataclass(frozen=True)
class Resumption:
    """A run going on from a resume point, its interrupted segment moved aside."""

    point: ResumePoint
    checkpoint: str
    """The checkpoint's name in the run folder."""
    segment: int
    interrupted_at: float
    """Run-clock seconds of the interrupted segment's last evidence: where the clock goes on."""

    @classmethod
    def begin(cls, folder: RunFolder, point: ResumePoint) -> Resumption:
        """Date the interruption, then restart the run's files from the checkpoint; before any of them is opened."""
        at = interrupted_at(folder)
        return cls(point, folder.relative(point.checkpoint), restart_segment(folder, point), at)

    @property
    def lost_s(self) -> float:
        """The work done after the checkpoint, which the clock counts again."""
        return round(self.interrupted_at - self.point.state.clock_s, 4)

    def start_clock(self, clock: RunClock, log: ComplianceLog) -> None:
        """The clock goes on from the interruption (the restart's init was not timed), and the log says so."""
        clock.start(offset=self.interrupted_at)
        log.event(own_keys.RESUME, value={
            "checkpoint": self.checkpoint, "batch": self.point.batch_index, "epoch": self.point.state.epoch,
            "segment": self.segment, "interrupted_at_s": round(self.interrupted_at, 4), "lost_s": self.lost_s,
            "skipped": list(self.point.skipped), "host": host_label()})

    def resumes(self) -> list[dict]:
        """Every resume of the run, this one last, as the sidecars and result.json list them."""
        return [*self.point.state.resumes, {
            "segment": self.segment, "checkpoint": self.checkpoint, "batch": self.point.batch_index,
            "interrupted_at_s": round(self.interrupted_at, 4), "lost_s": self.lost_s, "host": host_label()}]


def write_sidecar(checkpoint: Path, state: ResumeState, ranks: dict[int, str] | None = None) -> None:
    """After the checkpoint is in place: its checksum and the harness state, atomically; ``ranks``:
    the SHA-256 of each other rank's checkpoint beside it, already in place (a run of several processes)."""
    record: dict = {"sha256": file_digest(checkpoint)}
    if ranks:
        record["ranks"] = {str(rank): digest for rank, digest in sorted(ranks.items())}
    record["state"] = state.to_dict()
    atomic_write_text(RunFolder.sidecar(checkpoint), json.dumps(record, indent=1))


def find_resume_point(folder: RunFolder, processes: int = 1) -> ResumePoint:
    """The newest checkpoint whose sidecar is complete and whose bytes match it, with every one of
    the run's ``processes`` ranks' own checkpoints."""
    skipped = []
    for checkpoint in reversed(folder.periodic_checkpoints()):
        problem = _problem_with(checkpoint, processes)
        if problem is None:
            state = json.loads(RunFolder.sidecar(checkpoint).read_text(encoding="utf-8"))["state"]
            return ResumePoint(checkpoint, ResumeState.from_dict(state), tuple(skipped))
        skipped.append(f"{folder.relative(checkpoint)}: {problem}")
    detail = f" ({'; '.join(skipped)})" if skipped else ""
    raise InputError(f"{folder.checkpoints}: no complete checkpoint to resume from{detail}")


def _problem_with(checkpoint: Path, processes: int) -> str | None:
    sidecar = RunFolder.sidecar(checkpoint)
    try:
        recorded = json.loads(sidecar.read_text(encoding="utf-8"))
        expected, state, ranks = recorded["sha256"], recorded["state"], recorded.get("ranks", {})
        int(state["batch_index"])
        dict(ranks)
    except FileNotFoundError:
        return "no sidecar (the run ended while writing it)"
    except (OSError, ValueError, KeyError, TypeError):
        return f"its sidecar {sidecar.name} is unreadable"
    if file_digest(checkpoint) != expected:
        return "its checksum does not match its sidecar (truncated or corrupt)"
    for rank in range(1, processes):
        own = RunFolder.rank_checkpoint(checkpoint, rank)
        if str(rank) not in ranks:
            return f"its sidecar holds no checkpoint of rank {rank} (only rank 0's state was saved)"
        if not own.is_file():
            return f"rank {rank}'s {own.name} is missing"
        if file_digest(own) != ranks[str(rank)]:
            return f"rank {rank}'s {own.name} does not match its sidecar (truncated or corrupt)"
    return None


def interrupted_at(folder: RunFolder) -> float:
    """Run-clock seconds of the last evidence the interrupted run left: its last telemetry sample,
    metrics line or log event, in the run folder or in the segments moved aside before (a resume
    that failed during its own setup has already moved the evidence there)."""
    times = []
    for place in (folder, *folder.segment_folders()):
        times += [_last_t(place.telemetry), _last_t(place.metrics), _last_log_clock(place.compliance_log)]
    known = [time for time in times if time is not None]
    return max(known) if known else 0.0


def restart_segment(folder: RunFolder, point: ResumePoint) -> int:
    """Move the interrupted segment's files to segment K and restart the run's files from the checkpoint.

    Returns K. The log keeps its lines up to the checkpoint's own event, the metrics and
    sentences theirs up to the checkpoint's batch; telemetry starts afresh.
    """
    number = 1 + len(folder.segment_folders())
    segment = folder.segment(number)
    segment.root.mkdir(parents=True)
    for evidence in folder.segment_evidence():
        if evidence.exists():
            shutil.copy2(evidence, segment.root / evidence.name)  # a segment names its files as the folder does
    checkpoint_name = folder.relative(point.checkpoint)
    atomic_write_text(folder.compliance_log, _log_prefix(segment.compliance_log, checkpoint_name))
    batch = point.batch_index
    atomic_write_text(folder.metrics, _lines_up_to_batch(segment.metrics, batch))
    atomic_write_text(folder.sentences, _lines_up_to_batch(segment.sentences, batch))
    folder.telemetry.unlink(missing_ok=True)
    for stale in folder.periodic_checkpoint_files():
        if stale.name.split(".")[0] > point.checkpoint.name.split(".")[0]:
            stale.unlink()  # torn or unverifiable checkpoints of the lost work
    return number


def _log_prefix(log: Path, checkpoint_name: str) -> str:
    kept = []
    for line in log.read_text(encoding="utf-8").splitlines(keepends=True):
        kept.append(line)
        record = _parse(line)
        if record and record.get("key") == own_keys.CHECKPOINT and record.get("value") == checkpoint_name:
            return "".join(kept)
    raise InputError(f"{log}: the log never names {checkpoint_name}; it does not belong to this run")


def _lines_up_to_batch(path: Path, batch: int) -> str:
    if not path.exists():
        return ""
    kept = []
    for line in path.read_text(encoding="utf-8").splitlines(keepends=True):
        try:
            record = json.loads(line)
        except ValueError:
            break  # a line torn by the kill ends what can be kept
        if record.get("batch", 0) > batch:
            break
        kept.append(line)
    return "".join(kept)


def _last_t(path: Path) -> float | None:
    if not path.exists():
        return None
    last = None
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            last = float(json.loads(line)["t"])
        except (ValueError, KeyError, TypeError):
            continue
    return last


def _last_log_clock(log: Path) -> float | None:
    if not log.exists():
        return None
    parsed = read_log(log)
    if not parsed.events:
        return None
    return parsed.run_clock(max(event.time_ms for event in parsed.events))


def _parse(line: str) -> dict | None:
    _, separator, payload = line.partition(":::MLLOG ")
    if not separator:
        return None
    try:
        record = json.loads(payload)
    except ValueError:
        return None
    return record if isinstance(record, dict) else None
