"""What a package needs of a run folder: its compliance log, what the log says the run is (workload,
division, seed, status), and the machine and software on record (config.json's hardware profile,
the log's benchbase_environment).

The log is the evidence: the workload, the division and the seed are read from it, as MLPerf's
tools read a result file, never from result.json's claim. config.json adds what the log does not
state: the hardware profile the run used.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchbase.compliance import keys
from benchbase.compliance.keys import constants
from benchbase.compliance.parse import ParsedLog, read_log
from benchbase.errors import InputError
from benchbase.report.runs import Run, RunGroup
from benchbase.run_folder import LOG_NAME, RunFolder

__all__ = ["PackagedRun", "log_value", "read_packaged_run", "refuse_incomplete"]


@dataclass(frozen=True)
class PackagedRun:
    """One run as the package holds it."""

    folder: Path
    log_path: Path
    workload: str
    division: str
    backend: str
    seed: int | None
    status: str | None
    """The log's submission_status (research, onprem, cloud)."""
    world_size: int | None
    contract: int | None
    """The backend contract version the log states."""
    device_plan: dict[str, Any]
    hardware: dict[str, Any]
    """The hardware profile the run used, as config.json records it."""
    environment: dict[str, Any]
    """The log's benchbase_environment, else config.json's."""

    @property
    def revision(self) -> tuple[str | None, str | None, bool | None]:
        """benchbase's (version, commit, dirty) that made the run."""
        source = self.environment.get("benchbase") or {}
        return source.get("version"), source.get("commit"), source.get("dirty")


def refuse_incomplete(groups: list[RunGroup]) -> None:
    """InputError for a run folder a package cannot hold: one without result.json (killed or still
    running), or a copy of another run (it would count one measurement twice)."""
    for group in groups:
        for folder in group.left_out:
            raise InputError(f"{folder}: no result.json: the run was killed or is still running; a package holds "
                             "finished runs")
        for copy, original in group.duplicates:
            raise InputError(f"{copy}: a copy of {original} (same seed, config and evaluations); a package holds "
                             "each measurement once")


def read_packaged_run(run: Run) -> PackagedRun:
    """``run`` with what its log says; InputError naming the folder where the log is missing or mute."""
    path = RunFolder(run.path).compliance_log
    if not path.is_file():
        raise InputError(f"{run.path}: no {LOG_NAME}: a package holds each run's compliance log")
    try:
        log = read_log(path)
    except OSError as error:
        raise InputError(f"{path}: cannot read: {error.strerror or error}") from None
    backend = run.config.get("backend") or run.result.backend
    environment = log_value(log, keys.ENVIRONMENT)
    return PackagedRun(
        folder=run.path, log_path=path, workload=_required_text(log, path, constants.SUBMISSION_BENCHMARK),
        division=_required_text(log, path, constants.SUBMISSION_DIVISION),
        backend=backend if isinstance(backend, str) else "", seed=_integer(log_value(log, constants.SEED)),
        status=_text(log_value(log, constants.SUBMISSION_STATUS)),
        world_size=_integer(log_value(log, keys.WORLD_SIZE)), contract=_integer(log_value(log, keys.BACKEND_CONTRACT)),
        device_plan=_mapping(log_value(log, keys.DEVICE_PLAN)),
        hardware=_mapping(run.config.get("hardware")),
        environment=_mapping(environment) or _mapping(run.config.get("environment")))


def log_value(log: ParsedLog, key: str) -> Any:
    """The value of the log's first ``key`` event, None without one."""
    event = log.first(key)
    return None if event is None else event.value


def _required_text(log: ParsedLog, path: Path, key: str) -> str:
    value = _text(log_value(log, key))
    if not value:
        raise InputError(f"{path}: no {key} in the log: a package files each run under what its log says it is")
    return value


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _integer(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}
