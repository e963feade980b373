"""Finding run folders: a run folder itself, or a folder of run folders (run-0, run-1, ...)
as `benchbase run --runs N` writes them."""

from __future__ import annotations

import json
import re
from pathlib import Path

__all__ = ["LOG_NAME", "RESULT_NAME", "find_run_folders", "is_run_folder", "read_json_lines"]

LOG_NAME = "mllog.log"
RESULT_NAME = "result.json"


def is_run_folder(path: Path) -> bool:
    return path.is_dir() and ((path / LOG_NAME).is_file() or (path / RESULT_NAME).is_file())


def find_run_folders(path: Path) -> list[Path]:
    """[path] when it is a run folder, else its run-folder children in natural order."""
    if is_run_folder(path):
        return [path]
    if not path.is_dir():
        return []
    return sorted((child for child in path.iterdir() if is_run_folder(child)), key=_natural_key)


def _natural_key(path: Path) -> list:
    # run-10 sorts after run-9, not after run-1.
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", path.name)]


def read_json_lines(path: Path) -> list[dict]:
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
