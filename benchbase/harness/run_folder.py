"""The run folder: every file a run writes, with atomic writes for whole files."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from benchbase.atomic import atomic_write_text
from benchbase.errors import InputError

__all__ = ["RunFolder"]


@dataclass(frozen=True)
class RunFolder:
    root: Path

    @classmethod
    def create(cls, root: Path) -> RunFolder:
        """A new, empty run folder; an existing finished run is never overwritten."""
        cls.check_available(root)
        (root / "checkpoints").mkdir(parents=True, exist_ok=True)
        return cls(root)

    @staticmethod
    def check_available(root: Path) -> None:
        if root.exists() and (not root.is_dir() or any(root.iterdir())):
            raise InputError(f"{root}: run folder exists and is not empty; choose another --out")

    config = property(lambda self: self.root / "config.json")
    compliance_log = property(lambda self: self.root / "mllog.log")
    metrics = property(lambda self: self.root / "metrics.jsonl")
    telemetry = property(lambda self: self.root / "telemetry.jsonl")
    sentences = property(lambda self: self.root / "sentences.jsonl")
    result = property(lambda self: self.root / "result.json")
    checkpoints = property(lambda self: self.root / "checkpoints")

    def relative(self, path: Path) -> str:
        """A path inside the folder as the log names it: relative, with forward slashes."""
        return path.relative_to(self.root).as_posix()

    def write_json(self, path: Path, data) -> None:
        atomic_write_text(path, json.dumps(data, indent=2, default=str))

    def append_lines(self, path: Path) -> IO[str]:
        """A line-buffered append handle for a JSON-lines file."""
        return open(path, "a", encoding="utf-8", buffering=1)


def write_json_line(handle: IO[str], record: dict) -> None:
    handle.write(json.dumps(record) + "\n")


