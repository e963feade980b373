"""`benchbase summarize`: MLPerf's result summarizer on a package, one row per system, workload and target.

The columns are the summarizer's (the system's from its description, then the score, then where
the details and the code are), with a row per target where MLPerf has a column per benchmark: a
benchbase workload has several targets. The score is the olympic mean of the runs' minutes to the
target, recomputed from the result files with the workload's TTA rule (benchbase's clock: run_start
to the evaluation that reached it, MLPerf's is run_start to run_stop), multiplied by the RCP's
normalization factor where the set converged faster than the reference mean and still passed
(MLPerf's scaling.json).
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from benchbase.compliance.keys import constants
from benchbase.compliance.parse import ParsedLog, read_log
from benchbase.compliance.tta_check import recompute_tta
from benchbase.errors import InputError
from benchbase.packaging.layout import OrgFolder, ResultSet, org_folders
from benchbase.packaging.package_checks import read_system_description
from benchbase.packaging.rcp_sets import SetVerdicts, judge_result_set, shipped_rcp
from benchbase.packaging.system_description import REQUIRED_KEYS
from benchbase.rcp.tables import FAIL, NOT_JUDGED, verdict_word
from benchbase.report.scoring import olympic_score
from benchbase.specs import WorkloadSpec

__all__ = ["SUMMARY_COLUMNS", "summarize_package", "summary_csv", "summary_json"]

SYSTEM_COLUMNS = ("division", "availability", "submitter", "system", "number_of_nodes", "host_processor_model_name",
                  "host_processors_count", "accelerator_model_name", "accelerators_count", "framework", "notes")
SCORE_COLUMNS = ("benchmark", "target", "runs", "converged", "epochs_to_converge", "samples_to_converge",
                 "olympic_minutes", "rcp", "rcp_norm_factor", "score")
SUMMARY_COLUMNS = (*SYSTEM_COLUMNS, *SCORE_COLUMNS, "details_url", "code_url")
"""score: olympic_minutes x rcp_norm_factor (1 where none applies); empty where the score is invalid (too few
runs converged, or the set fails the RCP). epochs_to_converge and samples_to_converge (MLPerf Training 6.0's:
the epochs times the log's train_samples): the mean over the runs that reached the target, empty where none did."""


def summarize_package(path: Path, workloads: Mapping[str, WorkloadSpec]) -> list[dict[str, Any]]:
    """One row per system, workload and target of the package at ``path``."""
    rows = []
    for org in org_folders(path):
        for result_set in org.result_sets():
            rows += _set_rows(org, result_set, workloads)
    return rows


def summary_csv(rows: list[dict[str, Any]]) -> str:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=SUMMARY_COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows({key: "" if value is None else value for key, value in row.items()} for row in rows)
    return out.getvalue()


def summary_json(rows: list[dict[str, Any]]) -> str:
    return json.dumps(rows, indent=2) + "\n"


def _set_rows(org: OrgFolder, result_set: ResultSet, workloads: Mapping[str, WorkloadSpec]) -> list[dict[str, Any]]:
    workload = workloads.get(result_set.workload)
    if workload is None:
        raise InputError(f"{result_set.folder}: workload {result_set.workload!r} is not registered, so its targets "
                         "are unknown (`benchbase workloads` lists those that are)")
    description = read_system_description(org, result_set.system)
    files = result_set.result_files()
    if not files:
        raise InputError(f"{result_set.folder}: no result_I.txt in it")
    logs = [(path, read_log(path)) for path in files]
    reached = [recompute_tta(log, workload.tta, workload.scored_subset) for _, log in logs]
    judged = _rcp(result_set.workload, description, logs)
    system = _system_columns(description)
    links = {"details_url": f"{org.org}/systems/{result_set.system}.json",
             "code_url": f"{org.org}/benchmarks/{result_set.workload}/implementations"}
    rows = []
    for target in workload.tta.targets:
        seconds = [None if (found := run[target.label]) is None else found[0] for run in reached]
        converged = [(found[1], log) for (_, log), run in zip(logs, reached) if (found := run[target.label])]
        rows.append({**system, **_score(result_set.workload, target.label, seconds, judged), **links,
                     **_to_converge(converged)})
    return rows


def _rcp(workload: str, description: dict[str, Any], logs: list[tuple[Path, ParsedLog]]) -> SetVerdicts | str:
    """The set's RCP verdicts, or why it has none (open division, no RCP, not comparable)."""
    if description.get("division") != constants.CLOSED:
        return f"{NOT_JUDGED}: open division"
    rcp = shipped_rcp(workload)
    if rcp is None:
        return f"{NOT_JUDGED}: no RCP"
    try:
        return judge_result_set(logs, *rcp)
    except InputError as error:
        return f"{NOT_JUDGED}: {error}"


def _score(workload: str, label: str, seconds: list[float | None], judged: SetVerdicts | str) -> dict[str, Any]:
    score = olympic_score(seconds)
    minutes = None if score.seconds is None else score.seconds / 60
    verdict = None if isinstance(judged, str) else judged.verdicts.get(label)
    factor = verdict.norm_factor if verdict is not None and verdict.passed else None
    # spelt as `benchbase rcp check` spells a target's verdict (pass, fail, NA)
    rcp = judged if isinstance(judged, str) else f"{NOT_JUDGED}: no RCP for this target" if verdict is None else (
        verdict_word(verdict))
    valid = minutes is not None and rcp != FAIL  # a set that fails the RCP has no score (MLPerf)
    return {"benchmark": workload, "target": label, "runs": score.runs, "converged": score.converged,
            "olympic_minutes": _rounded(minutes), "rcp": rcp, "rcp_norm_factor": _rounded(factor),
            "score": _rounded(minutes * (factor or 1.0)) if valid else None}


def _to_converge(converged: list[tuple[int, ParsedLog]]) -> dict[str, float | None]:
    """The mean epochs and samples (epochs x the log's train_samples) of the runs that reached a target."""
    if not converged:
        return {"epochs_to_converge": None, "samples_to_converge": None}
    samples = [epoch * _train_samples(log) for epoch, log in converged]
    known = [count for count in samples if count is not None]
    return {"epochs_to_converge": _rounded(sum(epoch for epoch, _ in converged) / len(converged)),
            "samples_to_converge": _rounded(sum(known) / len(known)) if len(known) == len(samples) else None}


def _train_samples(log: ParsedLog) -> int | None:
    stated = log.first(constants.TRAIN_SAMPLES)
    return stated.value if stated is not None and isinstance(stated.value, int) else None


def _system_columns(description: dict[str, Any]) -> dict[str, Any]:
    """The summarizer's system columns from the description ("" where it lacks a key)."""
    known = {key: description.get(key, "") for key in REQUIRED_KEYS}
    return {"division": known["division"], "availability": known["status"], "submitter": known["submitter"],
            "system": known["system_name"], "number_of_nodes": known["number_of_nodes"],
            "host_processor_model_name": known["host_processor_model_name"],
            "host_processors_count": _product(known["host_processors_per_node"], known["number_of_nodes"]),
            "accelerator_model_name": known["accelerator_model_name"],
            "accelerators_count": _product(known["accelerators_per_node"], known["number_of_nodes"]),
            "framework": known["framework"],
            "notes": ";".join(note for note in (known["hw_notes"], known["sw_notes"]) if note)}


def _product(per_node: Any, nodes: Any) -> int | str:
    """MLPerf's count over all nodes; "" where either is unknown."""
    try:
        return int(per_node) * int(nodes)
    except (TypeError, ValueError):
        return ""


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 4)
