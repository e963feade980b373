"""The submission package's layout, MLPerf Training's: every folder and file name of a package is
named here, and only here, so the writer (tree.py), the checks and the summary agree on it.

    DIR/ORG/
      systems/SYSTEM.json                          the system description (MLPerf's 33 keys)
      results/SYSTEM/WORKLOAD/result_I.txt         each run's compliance log, byte for byte
      benchmarks/WORKLOAD/implementations/BACKEND/
        implementation.json                        which code produced the results
        README.md                                  the same, for a person

ORG is the folder MLPerf's package checker is given; DIR may hold several.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from benchbase.errors import InputError

__all__ = ["IMPLEMENTATION_NAME", "README_NAME", "OrgFolder", "ResultSet", "check_name", "org_folders"]

SYSTEMS_DIR = "systems"
RESULTS_DIR = "results"
BENCHMARKS_DIR = "benchmarks"
IMPLEMENTATIONS_DIR = "implementations"
SYSTEM_SUFFIX = ".json"
IMPLEMENTATION_NAME = "implementation.json"
README_NAME = "README.md"
_RESULT_FILE = re.compile(r"^result_(\d+)\.txt$")  # MLPerf's checker globs result_*.txt
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
"""An organization, system, workload or backend name becomes a folder or file name: a name, never a path."""


def check_name(kind: str, name: str) -> str:
    """``name`` when it can name a folder of the package; InputError otherwise."""
    if not _NAME.match(name):
        raise InputError(f"{kind} {name!r}: use letters, digits, '.', '_' and '-' (at most 64, not starting with "
                         "'.', '_' or '-'); it names a folder of the package")
    return name


@dataclass(frozen=True)
class ResultSet:
    """One system's result files for one workload: a set of runs, scored together."""

    system: str
    workload: str
    folder: Path

    @property
    def label(self) -> str:
        return f"{self.system}/{self.workload}"

    def result_files(self) -> list[Path]:
        """result_I.txt, in the order of I."""
        found = [(int(match.group(1)), path) for path in self.folder.iterdir()
                 if path.is_file() and (match := _RESULT_FILE.match(path.name))]
        return [path for _, path in sorted(found)]

    def other_files(self) -> list[str]:
        """Names MLPerf's checker warns of: anything that is not a result_I.txt."""
        return sorted(path.name for path in self.folder.iterdir() if not _RESULT_FILE.match(path.name))


@dataclass(frozen=True)
class OrgFolder:
    """One organization's part of a package (DIR/ORG)."""

    root: Path

    @property
    def org(self) -> str:
        return self.root.name

    def system_description(self, system: str) -> Path:
        return self.root / SYSTEMS_DIR / f"{system}{SYSTEM_SUFFIX}"

    def result_folder(self, system: str, workload: str) -> Path:
        return self.root / RESULTS_DIR / system / workload

    def result_file(self, system: str, workload: str, index: int) -> Path:
        return self.result_folder(system, workload) / f"result_{index}.txt"

    def implementation(self, workload: str, backend: str) -> Path:
        return self.root / BENCHMARKS_DIR / workload / IMPLEMENTATIONS_DIR / backend

    def systems(self) -> list[str]:
        """The systems described (systems/*.json)."""
        folder = self.root / SYSTEMS_DIR
        return sorted(path.stem for path in folder.glob(f"*{SYSTEM_SUFFIX}")) if folder.is_dir() else []

    def result_sets(self) -> list[ResultSet]:
        """Every results/SYSTEM/WORKLOAD folder."""
        results = self.root / RESULTS_DIR
        if not results.is_dir():
            return []
        return [ResultSet(system.name, workload.name, workload) for system in sorted(results.iterdir())
                if system.is_dir() for workload in sorted(system.iterdir()) if workload.is_dir()]


def org_folders(path: Path) -> list[OrgFolder]:
    """The organizations' folders of a package: ``path`` itself when it is one (it has results/ or
    systems/), else its sub-folders that are; InputError when there is none."""
    if not path.is_dir():
        raise InputError(f"{path}: no such folder")
    if _is_org_folder(path):
        return [OrgFolder(path)]
    found = [OrgFolder(folder) for folder in sorted(path.iterdir()) if folder.is_dir() and _is_org_folder(folder)]
    if not found:
        raise InputError(f"{path}: not a submission package: neither it nor a folder in it has {RESULTS_DIR}/ or "
                         f"{SYSTEMS_DIR}/ (`benchbase package make` writes one)")
    return found


def _is_org_folder(path: Path) -> bool:
    return (path / RESULTS_DIR).is_dir() or (path / SYSTEMS_DIR).is_dir()
