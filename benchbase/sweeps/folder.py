"""A sweep's folder: its layout, its record (sweep.json), and what each run of it needs next.

    SWEEP_DIR/
      sweep.json                   the sweep file's spec, the plan, each run's status and exit code
      CONFIGURATION/               backend-profile[-variant]: one group of `benchbase score` / `report`
        seed-S/                    a run folder, exactly as `benchbase run --out` writes it
        seed-S.log                 that run's output (every attempt, appended)
      .abandoned/CONFIGURATION/    runs killed before their first checkpoint, moved aside to start again
      .lock                        held while a sweep runs in the folder

A configuration's folder holds only its seeds' run folders, so the report's loader reads it as
one group of seeded runs. Hidden names keep the abandoned runs and the lock out of every group.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from benchbase.atomic import atomic_write_text
from benchbase.errors import InputError
from benchbase.run_folder import RunFolder, find_run_folders
from benchbase.sweeps.spec import PlannedRun, SweepSpec

__all__ = ["FINISHED", "RECORD_NAME", "SweepRecord", "abandon", "check_same_runs", "configuration_folders",
           "hold_sweep_folder", "next_action"]

RECORD_NAME = "sweep.json"
ABANDONED_DIR = ".abandoned"
LOCK_NAME = ".lock"
RECORD_FORMAT = 1

FINISHED = ("success", "aborted")
"""Statuses of a finished run: it reached every target, or stopped at a limit (exit code 3)."""


def next_action(folder: Path) -> str:
    """What a planned run needs: skip (finished), start, resume, or restart (moved aside, then start)."""
    run = RunFolder(folder)
    if run.result.is_file():
        return "skip"
    if not folder.exists() or (folder.is_dir() and not any(folder.iterdir())):
        return "start"
    if run.config.is_file() and _has_checkpoint(run):
        return "resume"
    return "restart"  # killed before its first checkpoint: nothing to go on from


def _has_checkpoint(run: RunFolder) -> bool:
    # The sidecar is written after its checkpoint; `benchbase run --resume` verifies the bytes.
    return any(RunFolder.sidecar(checkpoint).is_file() for checkpoint in run.periodic_checkpoints())


def finished_status(folder: Path) -> str:
    """A finished run's status as its result.json states it."""
    try:
        status = json.loads(RunFolder(folder).result.read_text(encoding="utf-8")).get("status")
    except (OSError, ValueError, AttributeError):
        return "success"  # the report will say what is wrong with it; the sweep only needs "finished"
    return status if status in FINISHED else "success"


def abandon(sweep_dir: Path, run: PlannedRun) -> Path:
    """Move a run that cannot go on out of its configuration, keeping it as evidence; returns where."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    target = sweep_dir / ABANDONED_DIR / run.configuration / f"seed-{run.seed}-{stamp}"
    index = 2
    while target.exists():
        target = target.with_name(f"seed-{run.seed}-{stamp}-{index}")
        index += 1
    target.parent.mkdir(parents=True, exist_ok=True)
    os.replace(run.folder(sweep_dir), target)
    return target


@contextmanager
def hold_sweep_folder(sweep_dir: Path) -> Iterator[None]:
    """One sweep at a time in a folder: two would start the same runs into the same folders."""
    sweep_dir.mkdir(parents=True, exist_ok=True)
    with open(sweep_dir / LOCK_NAME, "a+") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise InputError(f"{sweep_dir}: another sweep is running in this folder") from None
        yield


class SweepRecord:
    """sweep.json: what was planned and how each run went, rewritten atomically after every change."""

    def __init__(self, path: Path, data: dict[str, Any]):
        self.path = path
        self.data = data

    @classmethod
    def read(cls, sweep_dir: Path) -> SweepRecord | None:
        path = sweep_dir / RECORD_NAME
        if not path.is_file():
            return None
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as error:
            raise InputError(f"{path}: cannot read: {error}") from None
        if not isinstance(data, dict) or not isinstance(data.get("runs"), list):
            raise InputError(f"{path}: not a sweep record")
        return cls(path, data)

    @classmethod
    def planned(cls, sweep_dir: Path, spec: SweepSpec, source: Path, plan: list[PlannedRun],
                previous: SweepRecord | None) -> SweepRecord:
        """The record of this invocation: the current plan, each run's history carried over."""
        before = previous.runs if previous is not None else {}
        runs = [{"run": run.name, "configuration": run.configuration, "backend": run.backend,
                 "profile": run.profile, "variant": run.variant, "seed": run.seed, "options": list(run.options),
                 "status": "pending", "exit_code": None, "attempts": [],
                 **{key: before[run.name][key] for key in ("status", "exit_code", "attempts")
                    if run.name in before and key in before[run.name]}}
                for run in plan]
        # Runs of an earlier plan stay on the record while their folders are there: they are in the groups.
        runs += [entry for name, entry in before.items()
                 if name not in {run.name for run in plan} and (sweep_dir / name).exists()]
        data = {"format": RECORD_FORMAT, "name": spec.name, "source": str(source),
                "spec": spec.model_dump(mode="json", by_alias=True), "state": "running", "stopped_at": None,
                "runs": runs}
        return cls(sweep_dir / RECORD_NAME, data)

    @property
    def runs(self) -> dict[str, dict[str, Any]]:
        return {entry["run"]: entry for entry in self.data["runs"] if isinstance(entry, dict) and "run" in entry}

    def set_status(self, run: PlannedRun, status: str, exit_code: int | None = None) -> None:
        entry = self.runs[run.name]
        entry["status"], entry["exit_code"] = status, exit_code
        self.save()

    def add_attempt(self, run: PlannedRun, action: str, exit_code: int | None, seconds: float) -> None:
        self.runs[run.name]["attempts"].append({"action": action, "exit_code": exit_code,
                                                "seconds": round(seconds, 1), "ended": _now()})

    def stop(self, state: str, stopped_at: PlannedRun | None = None) -> None:
        self.data["state"] = state
        self.data["stopped_at"] = None if stopped_at is None else stopped_at.name
        self.save()

    def save(self) -> None:
        self.data["updated"] = _now()
        atomic_write_text(self.path, json.dumps(self.data, indent=2) + "\n")


def check_same_runs(sweep_dir: Path, plan: list[PlannedRun], previous: SweepRecord | None) -> None:
    """Refuse, in one line, to go on in a folder whose runs were made by a different plan.

    A configuration's runs are scored together, so a run made with other options (the sweep file
    changed since) would silently mix two experiments in one group.
    """
    if previous is None:
        if sweep_dir.exists() and any(child.name != LOCK_NAME for child in sweep_dir.iterdir()):
            raise InputError(f"{sweep_dir}: exists and holds no {RECORD_NAME}; choose another --out")
        return
    before = previous.runs
    for run in plan:
        folder = run.folder(sweep_dir)
        if not folder.exists():
            continue
        options = before.get(run.name, {}).get("options")
        if options is None:
            raise InputError(f"{folder}: this run is not on {previous.path}'s record; move it away or choose "
                             "another --out")
        if list(options) != list(run.options):
            raise InputError(f"{folder}: made with other options than the sweep file now gives it "
                             f"({_difference(options, list(run.options))}); the sweep file changed since: choose "
                             "another --out, or move the run away to redo it")


def _difference(before: list[str], now: list[str]) -> str:
    old, new = _option_pairs(before), _option_pairs(now)
    removed = [pair for pair in old if pair not in new]
    added = [pair for pair in new if pair not in old]
    return f"then {_show(removed)}, now {_show(added)}"


def _option_pairs(options: list[str]) -> list[str]:
    """`--flag value` pairs (a bare flag alone), so that a difference reads as the options do."""
    pairs: list[str] = []
    for token in options:
        if token.startswith("--") or not pairs:
            pairs.append(token)
        else:
            pairs[-1] += f" {token}"
    return pairs


def _show(pairs: list[str]) -> str:
    return " ".join(pairs) if pairs else "nothing more"


def configuration_folders(path: Path) -> list[Path] | None:
    """A sweep folder's configurations, each one group of seeded runs, in the plan's order; None
    when ``path`` is not a sweep folder (the report then reads it as it reads any folder)."""
    if not (path / RECORD_NAME).is_file():
        return None
    try:
        record = SweepRecord.read(path)
        named = list(dict.fromkeys(entry["configuration"] for entry in record.runs.values())) if record else []
    except (InputError, KeyError, TypeError):
        named = []  # a damaged record: the folders themselves still say what is there
    listed = sorted(child.name for child in path.iterdir() if child.is_dir() and not child.name.startswith("."))
    return [path / name for name in dict.fromkeys([*named, *listed])
            if (path / name).is_dir() and find_run_folders(path / name)]


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")
