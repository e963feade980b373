"""The run folder's layout: every file and folder a run writes is named here, and only here.

    RUN_DIR/
      config.json               the resolved RunConfig, written at init
      mllog.log                 the compliance log
      metrics.jsonl             one line per batch and per evaluation
      telemetry.jsonl           one line per telemetry sample
      sentences.jsonl           greedy-decoded training sentences
      result.json               the RunResult, written after run_stop
      traceback.txt             the whole traceback of a backend's error that ended the run
      checkpoints/              batch-NNNNNNN.ckpt with its sidecar batch-NNNNNNN.ckpt.json, final.ckpt;
                                in a run of several processes, each other rank's batch-NNNNNNN.rank-R.ckpt
      decoded/NAME.jsonl        each utterance's reference and hypothesis for one evaluated subset
      segments/K/               the files of an interrupted segment, moved aside by a resume
      profile/                  the framework profiler's trace (benchbase run --profile-steps)

A folder of runs (benchbase run --runs N) holds run-0, run-1, ... The module imports nothing of
the harness, so the checker and the report learn the layout without loading the training
machinery; it also holds the small readers and writers every one of them uses (JSON lines,
atomic whole files).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from benchbase.atomic import atomic_write_text, naming_the_file
from benchbase.errors import InputError

__all__ = [
    "CHECKPOINTS_DIR",
    "CONFIG_NAME",
    "DECODED_DIR",
    "FINAL_CHECKPOINT_NAME",
    "LOG_NAME",
    "METRICS_NAME",
    "PERIODIC_CHECKPOINTS_KEPT",
    "PROFILE_DIR",
    "RESULT_NAME",
    "SEGMENTS_DIR",
    "SENTENCES_NAME",
    "TELEMETRY_NAME",
    "TRACEBACK_NAME",
    "RunFolder",
    "find_run_folders",
    "is_run_folder",
    "read_json_lines",
    "series_member",
    "telemetry_summary",
    "write_json_line",
]

CONFIG_NAME = "config.json"
LOG_NAME = "mllog.log"
METRICS_NAME = "metrics.jsonl"
TELEMETRY_NAME = "telemetry.jsonl"
SENTENCES_NAME = "sentences.jsonl"
RESULT_NAME = "result.json"
TRACEBACK_NAME = "traceback.txt"
CHECKPOINTS_DIR = "checkpoints"
DECODED_DIR = "decoded"
SEGMENTS_DIR = "segments"
PROFILE_DIR = "profile"

FINAL_CHECKPOINT_NAME = "final.ckpt"
PERIODIC_CHECKPOINT_GLOB = "batch-*.ckpt"
PERIODIC_CHECKPOINT_NAME = re.compile(r"batch-\d+\.ckpt")
RANK_CHECKPOINT_SUFFIX = ".rank-{rank}.ckpt"
SIDECAR_SUFFIX = ".json"
TELEMETRY_SUMMARY_SUFFIX = ".summary.json"

PERIODIC_CHECKPOINTS_KEPT = 2
"""The harness prunes all but the newest periodic checkpoints; the checker expects these to exist."""


@dataclass(frozen=True)
class RunFolder:
    root: Path

    @classmethod
    def create(cls, root: Path) -> RunFolder:
        """A new, empty run folder; an existing finished run is never overwritten."""
        cls.check_available(root)
        folder = cls(root)
        folder.checkpoints.mkdir(parents=True, exist_ok=True)
        return folder

    @staticmethod
    def check_available(root: Path) -> None:
        if root.exists() and (not root.is_dir() or any(root.iterdir())):
            raise InputError(f"{root}: run folder exists and is not empty; choose another --out")

    # --- the files --------------------------------------------------------------------------

    @property
    def config(self) -> Path:
        return self.root / CONFIG_NAME

    @property
    def compliance_log(self) -> Path:
        return self.root / LOG_NAME

    @property
    def metrics(self) -> Path:
        return self.root / METRICS_NAME

    @property
    def telemetry(self) -> Path:
        return self.root / TELEMETRY_NAME

    @property
    def sentences(self) -> Path:
        return self.root / SENTENCES_NAME

    @property
    def result(self) -> Path:
        return self.root / RESULT_NAME

    @property
    def traceback(self) -> Path:
        """A backend's error that ended the run, whole: the terminal shows it in one line."""
        return self.root / TRACEBACK_NAME

    @property
    def profile(self) -> Path:
        return self.root / PROFILE_DIR

    # --- checkpoints ------------------------------------------------------------------------

    @property
    def checkpoints(self) -> Path:
        return self.root / CHECKPOINTS_DIR

    @property
    def final_checkpoint(self) -> Path:
        """The weights at run_stop, never pruned."""
        return self.checkpoints / FINAL_CHECKPOINT_NAME

    @property
    def final_weights(self) -> Path:
        """The final weights as the backend exported them (framework-neutral .npz): what
        `benchbase verify` re-scores with the reference model, without the backend."""
        return self.checkpoints / "final.weights.npz"

    def periodic_checkpoint(self, batch_index: int) -> Path:
        # Zero-padded, so that sorting the names sorts the batches.
        return self.checkpoints / f"batch-{batch_index:07d}.ckpt"

    def periodic_checkpoints(self) -> list[Path]:
        """The periodic checkpoints on disk (rank 0's), oldest first."""
        return sorted(path for path in self.checkpoints.glob(PERIODIC_CHECKPOINT_GLOB)
                      if PERIODIC_CHECKPOINT_NAME.fullmatch(path.name))

    def periodic_checkpoint_files(self) -> list[Path]:
        """The periodic checkpoints, their sidecars and the other ranks' checkpoints beside them."""
        return sorted(self.checkpoints.glob(PERIODIC_CHECKPOINT_GLOB + "*"))

    @staticmethod
    def rank_checkpoint(checkpoint: Path, rank: int) -> Path:
        """Rank ``rank``'s own state at rank 0's periodic ``checkpoint`` (a run of several processes)."""
        return checkpoint.with_name(checkpoint.name.removesuffix(".ckpt") + RANK_CHECKPOINT_SUFFIX.format(rank=rank))

    @staticmethod
    def rank_checkpoints(checkpoint: Path) -> list[Path]:
        """Every other rank's checkpoint beside rank 0's ``checkpoint`` on disk."""
        return sorted(checkpoint.parent.glob(checkpoint.name.removesuffix(".ckpt") + RANK_CHECKPOINT_SUFFIX.format(
            rank="*")))

    @staticmethod
    def sidecar(checkpoint: Path) -> Path:
        """Where a periodic checkpoint's checksum and harness state go (see harness.resume)."""
        return checkpoint.with_name(checkpoint.name + SIDECAR_SUFFIX)

    # --- decoded outputs --------------------------------------------------------------------

    def decoded(self, name: str) -> Path:
        return self.root / DECODED_DIR / f"{name}.jsonl"

    def decoded_evaluation(self, subset: str, epoch: int) -> Path:
        """A periodic evaluation's outputs on one subset."""
        return self.decoded(f"{subset}-epoch-{epoch:03d}")

    def decoded_final(self, subset: str, fp32: bool = False) -> Path:
        """The final evaluation's outputs on one subset (``fp32``: the same weights evaluated in FP32)."""
        return self.decoded(f"final-fp32-{subset}" if fp32 else f"final-{subset}")

    # --- segments of a resumed run ----------------------------------------------------------

    @property
    def segments(self) -> Path:
        return self.root / SEGMENTS_DIR

    def segment(self, number: int | str) -> RunFolder:
        """Segment ``number``: its files are named as the run folder's own."""
        return RunFolder(self.segments / str(number))

    def segment_folders(self) -> list[RunFolder]:
        """The resumes' segments in the order they ran: segments/10 after segments/9."""
        return [RunFolder(path) for path in sorted(self.segments.glob("*"),
                                                   key=lambda path: int(path.name) if path.name.isdigit() else -1)]

    def segment_evidence(self) -> tuple[Path, ...]:
        """The files a resume moves into a segment: what the interrupted segment wrote as it went."""
        return (self.compliance_log, self.metrics, self.telemetry, self.sentences)

    # --- reading and writing ----------------------------------------------------------------

    def relative(self, path: Path) -> str:
        """A path inside the folder as the log names it: relative, with forward slashes."""
        return path.relative_to(self.root).as_posix()

    def write_json(self, path: Path, data: Any) -> None:
        atomic_write_text(path, json.dumps(data, indent=2, default=str))

    def append_lines(self, path: Path) -> IO[str]:
        """A line-buffered append handle for a JSON-lines file."""
        return open(path, "a", encoding="utf-8", buffering=1)


def telemetry_summary(samples: Path) -> Path:
    """The sampler process hands its summary over in this file beside its samples (then removed)."""
    return samples.with_name(samples.name + TELEMETRY_SUMMARY_SUFFIX)


def series_member(out: Path, index: int) -> Path:
    """Run ``index`` of a series (benchbase run --runs N)."""
    return out / f"run-{index}"


def is_run_folder(path: Path) -> bool:
    folder = RunFolder(path)
    return path.is_dir() and (folder.compliance_log.is_file() or folder.result.is_file())


def find_run_folders(path: Path) -> list[Path]:
    """[path] when it is a run folder, else its run-folder children in natural order."""
    if is_run_folder(path):
        return [path]
    if not path.is_dir():
        return []
    return sorted((child for child in path.iterdir() if is_run_folder(child)), key=_natural_key)


def _natural_key(path: Path) -> list[int | str]:
    # run-10 sorts after run-9, not after run-1.
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", path.name)]


def read_json_lines(path: Path) -> list[dict[str, Any]]:
    """The JSON objects of a JSON-lines file; a missing file or a torn last line is skipped."""
    if not path.is_file():
        return []
    records = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue  # a run killed mid-write leaves half a line; the rest is still worth plotting
        if isinstance(record, dict):
            records.append(record)
    return records


def write_json_line(handle: IO[str], record: dict[str, Any]) -> None:
    try:
        handle.write(json.dumps(record) + "\n")
    except OSError as error:
        if error.filename is not None:
            raise
        raise naming_the_file(error, getattr(handle, "name", "")) from error
