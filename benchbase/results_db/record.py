"""One run folder as the results database stores it: the rows of every table that hang off the run.

The facts come from where the checker finds them: the compliance log for the evaluations (with
their run-clock times), the start time and the precision; config.json for the hardware profile
and the workload; result.json for the status, the TTA and the final evaluation.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchbase.compliance.keys import PRECISION, SUBSET, constants
from benchbase.compliance.parse import LogEvent, ParsedLog, read_log
from benchbase.errors import InputError
from benchbase.report.runs import Run
from benchbase.run_folder import RunFolder
from benchbase.specs.numbers import is_number

__all__ = ["RunRecord", "flatten", "json_safe", "read_run_record", "run_id"]

RATES = ("wer", "cer", "paper_cer", "loss")


@dataclass(frozen=True)
class RunRecord:
    """A run's rows: ``run`` for the runs table, the others keyed by its run_id."""

    run: dict[str, Any]
    environment: list[dict[str, Any]]
    evaluations: list[dict[str, Any]]
    tta: list[dict[str, Any]]
    time_parts: list[dict[str, Any]] = field(default_factory=list)

    @property
    def run_id(self) -> str:
        return str(self.run["run_id"])


def run_id(folder: Path) -> str:
    """SHA-256 of the run's compliance log and config.json: the same run imported from any place, or
    twice, is one run; a copy whose config.json was changed is another (it claims another run).
    benchbase logs no run uuid today; a log that gains one would key the run by it here."""
    run = RunFolder(folder)
    digest = hashlib.sha256()
    for path in (run.compliance_log, run.config) if run.compliance_log.is_file() else (run.result, run.config):
        digest.update(path.read_bytes() if path.is_file() else b"")
        digest.update(b"\0")  # so that the bytes cannot move from one file to the other unseen
    return digest.hexdigest()


def read_run_record(run: Run, imported_at: datetime) -> RunRecord:
    log = _read_log(RunFolder(run.path))
    identity = run_id(run.path)
    row = {"run_id": identity, **_description(run, log), **_final_rates(run), **_where_time_went(run),
           **_revision(run), "imported_at": imported_at, "source": str(run.path.resolve()),
           "config": json_safe(run.config), "result": json_safe(run.result.model_dump(mode="json"))}
    environment = [{"run_id": identity, "key": key, "value": value} for key, value in flatten(_environment(run))]
    evaluations = [{"run_id": identity, **item} for item in [*_training_evaluations(log), *_final_evaluations(run)]]
    tta = [{"run_id": identity, "target": label, "seconds": None if reached is None else reached["seconds"],
            "epoch": None if reached is None else reached["epoch"]} for label, reached in run.result.tta.items()]
    breakdown = run.result.time_breakdown
    time_parts = [{"run_id": identity, "part": part, "seconds": _finite(breakdown.get("seconds", {}).get(part)),
                   "fraction": _finite(fraction)} for part, fraction in breakdown.get("fractions", {}).items()]
    return RunRecord(row, environment, evaluations, tta, time_parts)


def flatten(value: Any, prefix: str = "") -> list[tuple[str, str | None]]:
    """A nested mapping as (dotted key, text) pairs; a list is one value, as JSON."""
    if isinstance(value, dict) and (value or not prefix):
        return [pair for key, item in value.items() for pair in flatten(item, f"{prefix}{key}.")]
    text = None if value is None else value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    return [(prefix.rstrip("."), text)]


def json_safe(value: Any) -> Any:
    """``value`` with each NaN or infinity as the token result.json writes for it ("NaN", "Infinity"):
    PostgreSQL's JSON has no such numbers, and a run that ended on a NaN loss is still a result."""
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else "Infinity" if value > 0 else "-Infinity"
    if isinstance(value, dict):
        return {key: json_safe(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(item) for item in value]
    return value


def _read_log(folder: RunFolder) -> ParsedLog:
    if not folder.compliance_log.is_file():
        return ParsedLog()
    try:
        return read_log(folder.compliance_log)
    except OSError as error:
        raise InputError(f"{folder.compliance_log}: cannot read: {error.strerror or error}") from None


def _description(run: Run, log: ParsedLog) -> dict[str, Any]:
    result, config = run.result, run.config
    workload = config.get("workload")
    workload = workload if isinstance(workload, dict) else {}
    start = log.first(constants.RUN_START)
    return {"workload": workload.get("name") or result.workload, "backend": config.get("backend") or result.backend,
            "system": run.hardware.get("name") or result.hardware or _logged(log, constants.SUBMISSION_PLATFORM),
            "seed": result.seed, "division": result.division, "status": result.status,
            "stop_reason": result.stop_reason or None, "precision": _logged(log, PRECISION),
            "global_batch": run.global_batch, "world_size": result.world_size, "epochs": result.epochs,
            "run_seconds": result.run_seconds,
            "started_at": None if start is None else datetime.fromtimestamp(start.time_ms / 1000, UTC)}


def _where_time_went(run: Run) -> dict[str, Any]:
    """Whether the backend timed its step's phases, the padding's share of the FLOPs and the MFUs
    (None where the run recorded none: an older run, a family without a cost model, no known peak)."""
    compute = run.result.compute
    return {"stages": run.result.time_breakdown.get("stages"),
            **{key: _finite(compute.get(key)) for key in ("padding_fraction", "mfu_hardware", "mfu_useful")}}


def _finite(value: Any) -> float | None:
    return float(value) if is_number(value) else None


def _logged(log: ParsedLog, key: str) -> str | None:
    event = log.first(key)
    return str(event.value) if event is not None and event.value is not None else None


def _environment(run: Run) -> dict[str, Any]:
    return run.result.environment or run.config.get("environment") or {}


def _revision(run: Run) -> dict[str, Any]:
    environment = _environment(run)
    source = environment.get("benchbase") or {}
    return {"benchbase_version": source.get("version"), "benchbase_commit": source.get("commit"),
            "benchbase_dirty": source.get("dirty"), "host": environment.get("host")}


def _final_rates(run: Run) -> dict[str, Any]:
    """The WER and CER the run ended with on its scored subset: the final evaluation's where it ran
    (untimed, the workload's final decoder), else the last evaluation during training."""
    last = run.result.last_evaluation or {}
    subset = last.get("subset")
    final = ((run.result.final_evaluation or {}).get("subsets") or {}).get(subset) if subset else None
    source, found = ("final", final) if isinstance(final, dict) else ("last", last)
    if not is_number(found.get("wer")):
        return {"final_wer": None, "final_cer": None, "final_from": None}
    return {"final_wer": found["wer"], "final_cer": found.get("paper_cer", found.get("cer")), "final_from": source}


def _training_evaluations(log: ParsedLog) -> list[dict[str, Any]]:
    """Every eval_accuracy of the log, each (epoch, subset) once (the last: a resumed run may repeat one)."""
    found: dict[tuple[int, str], dict[str, Any]] = {}
    stops = {event.epoch(): event for event in log.keyed(constants.EVAL_STOP)}
    for event in log.keyed(constants.EVAL_ACCURACY):
        if isinstance(event.value, dict) and event.epoch() is not None:
            subset = str(event.metadata.get(SUBSET, ""))
            found[(event.epoch() or 0, subset)] = {"phase": "training", "epoch": event.epoch(), "subset": subset,
                                                   **_rates(event.value), "run_seconds": _ended(log, event, stops)}
    return list(found.values())


def _ended(log: ParsedLog, event: LogEvent, stops: dict[int | None, LogEvent]) -> float | None:
    # The harness reads its clock right after eval_stop: the evaluation's time, as the TTA rule takes it.
    stop = stops.get(event.epoch())
    seconds = log.run_clock(stop.time_ms if stop is not None and stop.time_ms >= event.time_ms else event.time_ms)
    return None if seconds is None else round(seconds, 3)


def _final_evaluations(run: Run) -> list[dict[str, Any]]:
    final = run.result.final_evaluation or {}
    epoch = final.get("epoch") if isinstance(final.get("epoch"), int) else run.result.epochs
    return [{"phase": "final", "epoch": epoch, "subset": subset, **_rates(rates), "run_seconds": None}
            for subset, rates in (final.get("subsets") or {}).items() if isinstance(rates, dict)]


def _rates(value: dict[str, Any]) -> dict[str, float | None]:
    return {rate: float(value[rate]) if is_number(value.get(rate)) else None for rate in RATES}
