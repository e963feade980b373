"""`benchbase package make`: run folders into an MLPerf-Training-shaped submission package (layout.py).

All or nothing: every run is read and every refusal made before anything is written, and the
tree is built in a hidden folder beside DIR and renamed to DIR at the end, so a failure leaves
no half-written package. A package is in one division. MLPerf's system includes its framework,
so runs of several backends (a sweep of torch and tf) are one system per backend, named
SYSTEM-BACKEND; runs of one backend whose recorded machine or software differ are refused with
the first field that differs.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchbase.atomic import current_umask
from benchbase.errors import InputError
from benchbase.packaging.layout import IMPLEMENTATION_NAME, README_NAME, OrgFolder, check_name
from benchbase.packaging.runs import PackagedRun, read_packaged_run, refuse_incomplete
from benchbase.packaging.system_description import SystemDescription, describe_run
from benchbase.report.runs import load_groups

__all__ = ["PackageMade", "make_package"]


@dataclass(frozen=True)
class PackageMade:
    """What `package make` wrote."""

    folder: OrgFolder
    systems: tuple[str, ...]
    results: dict[tuple[str, str], int]
    """(system, workload) -> the result files written for it."""
    implementations: tuple[str, ...]
    """WORKLOAD/BACKEND of each implementation described."""


def make_package(paths: list[Path], org: str, system: str, out: Path) -> PackageMade:
    """The runs under ``paths`` (run folders, folders of runs, sweep folders) as a package at ``out``/``org``."""
    check_name("--org", org)
    check_name("--system", system)
    _require_free(out)
    runs = _read_runs(paths)
    _one_division(runs)
    systems = _systems(runs, org, system)
    results: dict[tuple[str, str], int] = {}
    with _staging(out) as staging:
        for description, members in systems:
            by_workload: dict[str, list[PackagedRun]] = {}
            for run in members:
                by_workload.setdefault(check_name("workload", run.workload), []).append(run)
            _write_tree(OrgFolder(staging / org), description, by_workload)
            results |= {(description.system_name, name): len(found) for name, found in by_workload.items()}
    implementations = sorted({f"{run.workload}/{run.backend}" for run in runs})
    return PackageMade(OrgFolder(out / org), tuple(description.system_name for description, _ in systems),
                       results, tuple(implementations))


def _one_division(runs: list[PackagedRun]) -> None:
    first = runs[0]
    for run in runs[1:]:
        if run.division != first.division:
            raise InputError(f"{run.folder}: a run of the {run.division} division, but {first.folder} is "
                             f"{first.division}; a package is in one division (package the others on their own)")


def _systems(runs: list[PackagedRun], org: str, system: str) -> list[tuple[SystemDescription, list[PackagedRun]]]:
    """One system per backend (MLPerf's system names its framework): ``system`` itself for one backend."""
    by_backend: dict[str, list[PackagedRun]] = {}
    for run in runs:
        by_backend.setdefault(run.backend, []).append(run)
    if len(by_backend) == 1:
        return [(_one_description(runs, org, system), runs)]
    named = {backend: check_name("--system", f"{system}-{backend}") for backend in by_backend}
    return [(_one_description(members, org, named[backend]), members) for backend, members in by_backend.items()]


def _require_free(out: Path) -> None:
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise InputError(f"{out}: exists and is not an empty folder; choose another --out")


def _read_runs(paths: list[Path]) -> list[PackagedRun]:
    groups = load_groups(paths)
    refuse_incomplete(groups)
    runs: list[PackagedRun] = []
    seen: dict[Path, Path] = {}
    for group in groups:
        for run in group.runs:
            where = run.path.resolve()
            if where in seen:
                raise InputError(f"{run.path}: given twice (also as {seen[where]}); a package holds each run once")
            seen[where] = run.path
            packaged = read_packaged_run(run)
            if not packaged.backend:
                raise InputError(f"{run.path}: neither config.json nor result.json names the backend")
            check_name("backend", packaged.backend)
            runs.append(packaged)
    return runs


def _one_description(runs: list[PackagedRun], org: str, system: str) -> SystemDescription:
    """The system every run trained on; InputError naming the first run that trained on another."""
    first = runs[0]
    described = describe_run(first, org, system).to_json_dict()
    for run in runs[1:]:
        mine = describe_run(run, org, system).to_json_dict()
        differing = next((key for key in described if mine[key] != described[key]), None)
        if differing is not None:
            raise InputError(f"{run.folder}: trained on another system than {first.folder} ({differing} "
                             f"{mine[differing]!r}, not {described[differing]!r}); package each system under its own "
                             "--system")
    return SystemDescription.model_validate(described)


@contextmanager
def _staging(out: Path) -> Iterator[Path]:
    """A hidden folder beside ``out`` that becomes ``out`` when the block completes, and is removed otherwise."""
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        staging.chmod(0o777 & ~current_umask())  # mkdtemp's 0700 would make the package private
        yield staging
        os.replace(staging, out)  # replaces an empty folder; _require_free refused any other
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _write_tree(folder: OrgFolder, description: SystemDescription, by_workload: dict[str, list[PackagedRun]]) -> None:
    system = description.system_name
    _write_json(folder.system_description(system), description.to_json_dict())
    for workload, runs in by_workload.items():
        folder.result_folder(system, workload).mkdir(parents=True)
        for index, run in enumerate(runs):
            shutil.copyfile(run.log_path, folder.result_file(system, workload, index))
        for backend in dict.fromkeys(run.backend for run in runs):
            files = [folder.result_file(system, workload, index).relative_to(folder.root).as_posix()
                     for index, run in enumerate(runs) if run.backend == backend]
            _write_implementation(folder.implementation(workload, backend),
                                  [run for run in runs if run.backend == backend], files)


def _write_implementation(where: Path, runs: list[PackagedRun], result_files: list[str]) -> None:
    """Which code produced the results: MLPerf keeps the source here; benchbase's is in its distributions."""
    record = implementation_record(runs, result_files)
    _write_json(where / IMPLEMENTATION_NAME, record)
    distribution = record["backend_distribution"] or "no recorded distribution"
    revisions = "\n".join(f"- benchbase {item['version']}, commit {item['commit'] or 'unknown'}"
                          f"{' with uncommitted changes' if item['dirty'] else ''}: {item['runs']} run(s)"
                          for item in record["benchbase"])
    (where / README_NAME).write_text(
        f"# {record['workload']}: backend {record['backend']}\n\nThe results were trained by benchbase's harness with "
        f"the backend `{record['backend']}` ({distribution}), backend contract {record['backend_contract']}.\n"
        f"The code is that of the distributions and revisions below; {IMPLEMENTATION_NAME} says the same as data.\n\n"
        f"{revisions}\n", encoding="utf-8")


def implementation_record(runs: list[PackagedRun], result_files: list[str]) -> dict[str, Any]:
    """The implementation's identity: workload, backend, its distribution, the benchbase revisions."""
    counts: dict[tuple[str | None, str | None, bool | None], int] = {}
    for run in runs:
        counts[run.revision] = counts.get(run.revision, 0) + 1
    distribution = runs[0].environment.get("backend_distribution")
    name, _, version = distribution.partition(" ") if isinstance(distribution, str) else ("", "", "")
    return {"workload": runs[0].workload, "backend": runs[0].backend,
            "backend_distribution": distribution if isinstance(distribution, str) else None,
            "distribution": name or None, "distribution_version": version or None,
            "backend_contract": runs[0].contract,
            "benchbase": [{"version": revision[0], "commit": revision[1], "dirty": revision[2], "runs": count}
                          for revision, count in counts.items()],
            "results": result_files}


def _write_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
